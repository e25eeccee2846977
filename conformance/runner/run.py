"""The one entry point of a conformance run: `run(adapters, records, options) -> Report`.

Every caller is thin: `rlspec check`, `rlspec reports`, `rlspec mutants`, the pytest plugin
(`pytest --pyargs conformance --rlspec-adapter X`), the site and the README generator read what `run`
returns. A run has three parts (`RunOptions.parts`, `conformance.runner.parts`), each made of rows:

- ``core``: one row per (record, adapter): property cases, golden vectors, invariants, preset checks,
  and the diagnosis of a failing row;
- ``partition``: the `agg.partition[<mode>]` rows of an adapter with `micro_batched_loss`, run when
  `aggregate` is among the records;
- ``framework``: the adapter's own rows (`extra_rows(seed)`: a framework's settings, losses and trainer
  paths), kept when their spec family is a selected record's (all of them when nothing was filtered).

With isolation on (`RunOptions.isolate`), every part of an adapter runs in its worker process
(`conformance.runner.isolation`): an adapter that exits, segfaults or hangs costs error rows, not the run.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tqdm import tqdm

from conformance.errors import BrokenRun
from conformance.records import Quantity, records_for
from conformance.records.presets import unread_version_note
from conformance.runner.isolation import IsolatedRows, isolates
from conformance.runner.loading import AdapterLoadError, load_adapter
from conformance.runner import partition
from conformance.runner.options import RunOptions
from conformance.runner.parts import core_error_row, core_row, run_part
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.runner.report import AdapterInfo, Report
from conformance.runner.rows import RowResult
from conformance.runner.timeout import run_with_timeout


def select_records(globs: Sequence[str] | None) -> list[Quantity]:
    """The records matching any of the globs (all without globs); a glob that matches nothing is a usage
    error (BrokenRun), never an empty, passing run."""
    records: list[Quantity] = []
    for glob in globs or ["*"]:
        found = records_for(glob)
        if not found:
            raise BrokenRun(f"--only {glob!r} matches no spec id or function (see `rlspec list`)")
        records += [r for r in found if r not in records]
    return records


def load_adapters(names: Sequence[str | Adapter]) -> tuple[list[tuple[LoadedAdapter, str]], list[AdapterInfo]]:
    """Adapters by name (built-in, entry point or `module:attribute`); an adapter object is used as it is.
    Returns the loaded adapters with how each was named (the reproduce lines use it) and what the report
    says of every name (a name that cannot be loaded is "not_installed" or "load_error")."""
    loaded: list[tuple[LoadedAdapter, str]] = []
    infos: list[AdapterInfo] = []
    for name in names:
        if not isinstance(name, str):
            adapter = LoadedAdapter.of(name)
            loaded.append((adapter, adapter.name))
            infos.append(AdapterInfo(adapter.name, adapter.version, adapter.spec_version))
            continue
        try:
            adapter = LoadedAdapter.of(load_adapter(name))
        except AdapterLoadError as exc:
            status = "not_installed" if "cannot import" in str(exc) else "load_error"
            infos.append(AdapterInfo(name, "-", "-", status, str(exc), ref=name))
            continue
        loaded.append((adapter, name))
        infos.append(AdapterInfo(adapter.name, adapter.version, adapter.spec_version, ref=name))
    return loaded, infos


@dataclass
class _Unit:
    """One piece of work of a run: a part for one adapter (and its one record, for a core row)."""

    part: str
    adapter: LoadedAdapter
    ref: str
    records: list[Quantity] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.adapter.name}:{self.records[0].function if self.part == 'core' else self.part}"


def _in_process(unit: _Unit, options: RunOptions) -> list[RowResult]:
    if unit.part != "core":  # partition and framework rows keep their own per-row / per-call limits
        return run_part(unit.part, unit.adapter, unit.ref, unit.records, options)
    record = unit.records[0]
    return [run_with_timeout(
        lambda: core_row(record, unit.adapter, unit.ref, options),
        options.timeout,
        lambda: core_error_row(record, unit.adapter.name, options,
                               f"timed out after {options.timeout:g}s (per-row limit, --timeout)"),
    )]


def run(adapters: Sequence[str | Adapter], records: Sequence[Quantity], options: RunOptions = RunOptions()) -> Report:
    """The report of `records` against the adapters (names or objects), under `options`. An adapter that
    cannot be loaded is listed in the report (not_installed / load_error) and checked for nothing."""
    loaded, infos = load_adapters(adapters)
    given = [a for a in adapters if not isinstance(a, str)]
    workers = {id(a): IsolatedRows(ref, a.name, options) for a, ref in loaded
               if isolates(options.isolate, ref, given_as_object=any(a.raw is g for g in given))}
    report = Report(seed=options.seed, n_seeds=options.n_seeds, adapters=infos, fail_on=options.fail_on,
                    strict_precision=options.strict_precision)
    units: list[_Unit] = []
    if "core" in options.parts:
        units += [_Unit("core", a, ref, [r]) for a, ref in loaded for r in records]
    if "partition" in options.parts and partition.applies(records):
        units += [_Unit("partition", a, ref) for a, ref in loaded]
    if "framework" in options.parts:
        units += [_Unit("framework", a, ref, list(records)) for a, ref in loaded if a.extra_rows is not None]
    start = time.perf_counter()
    bar = tqdm(units, desc="rlspec check", unit="row", disable=not options.progress, file=sys.stderr, leave=False)
    try:
        for unit in bar:
            bar.set_postfix_str(unit.label)
            t0 = time.perf_counter()
            worker = workers.get(id(unit.adapter))
            rows = worker.run(unit.part, unit.records) if worker is not None else _in_process(unit, options)
            if unit.part == "core":
                rows[0].seconds = time.perf_counter() - t0
            report.rows += rows
    finally:
        for worker in workers.values():
            worker.close()
    report.seconds = time.perf_counter() - start
    _collapse_import_errors(report)
    _unread_version_notes(report, [a for a, _ in loaded])
    return report


def _unread_version_notes(report: Report, adapters: Sequence[LoadedAdapter]) -> None:
    """A framework adapter running a version its presets were not read for: every row whose verdict a preset
    could decide (preset, variant, FAIL) says which versions were read and which runs (presets per version)."""
    for adapter in adapters:
        note = unread_version_note(adapter.name, adapter.version)
        if note:
            for row in report.rows:
                if row.adapter == adapter.name and row.status in ("preset", "variant", "fail") and note not in row.notes:
                    row.notes.append(note)


_IMPORT_ERROR = re.compile(r"^(?:gradient: )?((?:ModuleNotFoundError|ImportError): .*)$", re.M)


def _collapse_import_errors(report: Report) -> None:
    """An adapter whose every checked row is an ERROR raising the same ImportError (a framework imported
    inside the adapter's functions, and not installed) is one load error of the adapter, not the same
    traceback on every row: its rows are dropped and the report lists it as "load_error" with that error."""
    for info in report.adapters:
        rows = [r for r in report.rows if r.adapter == info.name and r.status != "not_implemented"]
        found = [m.group(1) if r.status == "error" and (m := _IMPORT_ERROR.search(r.message)) else None for r in rows]
        if info.status != "ok" or not rows or None in found or len(set(found)) != 1:
            continue
        error = found[0]
        info.status = "load_error"
        info.message = f"every function it implements raised {error} (the framework cannot be imported)"
        report.rows = [r for r in report.rows if r.adapter != info.name]


__all__ = ["select_records", "load_adapters", "run"]
