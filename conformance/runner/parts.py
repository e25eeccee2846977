"""The rows of one part of a conformance run for one adapter, computed in process: the same functions serve
the in-process path of `conformance.runner.run` and the isolated worker of `conformance.runner.isolation`.

- ``core``: one row per (record, adapter): `verdict.check_row` and the diagnosis of a failing row;
- ``partition``: the `agg.partition[<mode>]` rows (`conformance.runner.partition`);
- ``framework``: the adapter's own rows (`extra_rows(seed)`), kept when their spec family is selected.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence

from conformance.records import RECORDS, Quantity, cases
from conformance.runner.diagnosis import diagnose, pattern_hints
from conformance.runner.options import RunOptions
from conformance.runner.partition import partition_rows
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.runner.rows import RowResult, error_row, seeds_for
from conformance.runner.timeout import run_with_timeout
from conformance.runner.verdict import check_row


def golden_cases(record: Quantity) -> list[cases.Case]:
    """The published golden vectors of a record as cases (loaded once per process)."""
    from conformance.vectors.golden import cases_for

    return cases_for(record.function)


def core_row(record: Quantity, adapter: Adapter, ref: str, options: RunOptions,
             on_trial: Callable[[str], None] | None = None) -> RowResult:
    """Check one (record, adapter) row and diagnose it, with no timeout (the caller's job). `ref` is how the
    user named the adapter (the reproduce lines); `on_trial(description)` is called before each adapter
    call (the isolated worker says with it where a crash happened)."""
    seeds = seeds_for(record.function, options.seed, options.n_seeds)
    t0 = time.perf_counter()
    # a framework's own preset is tried first (among keyword sets that explain a row equally well, it is the
    # one named); the others follow in name order
    row = check_row(record, adapter, seeds=seeds, golden=golden_cases(record), ref=ref, on_trial=on_trial,
                    strict_precision=options.strict_precision, prefer=LoadedAdapter.of(adapter).name)
    row.seconds = time.perf_counter() - t0
    if options.diagnose and row.status in ("fail", "error", "preset", "variant"):
        try:
            row.consistent_with = diagnose(record, row)
            row.pattern_hints = pattern_hints(record, row)
        except Exception as exc:  # noqa: BLE001 - a diagnosis problem must not hide the verdict
            row.consistent_with = [f"(diagnosis failed: {type(exc).__name__}: {exc})"]
    return row


def core_error_row(record: Quantity, adapter_name: str, options: RunOptions, message: str) -> RowResult:
    """The row of a (record, adapter) pair whose check could not complete (a timeout, a crash)."""
    return error_row(f"{record.function}@{adapter_name}", record.spec_id, record.function, adapter_name, message,
                     seeds_for(record.function, options.seed, options.n_seeds))


def row_repro(row_id: str, ref: str, seed: int) -> str:
    """The command that re-runs the framework row ``row_id`` of the adapter ``ref``."""
    return f"rlspec repro --row {shlex.quote(row_id)} --adapter {shlex.quote(ref)} --seed {seed}"


def framework_rows(adapter: Adapter, records: Sequence[Quantity], options: RunOptions, ref: str) -> list[RowResult]:
    """The adapter's own rows (`extra_rows(seed)`), kept when their spec family is a selected record's (or
    all of them, when every record is selected), under one timeout. A failing row without its own reproduce
    line gets `rlspec repro --row ID --adapter REF --seed SEED`, which re-runs the adapter's rows and shows
    that one."""
    adapter = LoadedAdapter.of(adapter)
    if adapter.extra_rows is None:
        return []
    box: dict[str, list[RowResult]] = {}

    def rows() -> RowResult:
        box["rows"] = adapter.extra_rows(options.seed)
        return RowResult(id="", spec_id="", function="", adapter=adapter.name, status="pass")

    def on_timeout() -> RowResult:
        return error_row(f"{adapter.name}.extra_rows", "-", f"{adapter.name}.extra_rows", adapter.name,
                         f"timed out after {options.timeout:g}s")

    t0 = time.perf_counter()
    head = run_with_timeout(rows, options.timeout, on_timeout)
    if head.status == "error":
        head.seconds = time.perf_counter() - t0
        return [head]
    families = {r.spec_id.split(".")[0] for r in records}
    everything = len(records) == len(RECORDS)
    kept = [r for r in box["rows"] if everything or r.spec_id.split(".")[0] in families]
    for r in kept:
        line = row_repro(r.id, ref, options.seed)
        if r.status in ("fail", "error") and not r.reproduce:
            r.reproduce = line
            r.message = f"{r.message}\nReproduce: {r.reproduce}"
        for finding in r.precision_findings:
            finding["reproduce"] = finding.get("reproduce") or line
    return kept


def run_part(part: str, adapter: Adapter, ref: str, records: Sequence[Quantity], options: RunOptions,
             on_trial: Callable[[str], None] | None = None) -> list[RowResult]:
    """The rows of one part of the run for one adapter, in process (the isolated worker calls this too).
    For "core", `records` is the one record of the row."""
    if part == "core":
        (record,) = records
        return [core_row(record, adapter, ref, options, on_trial)]
    if part == "partition":
        return partition_rows(adapter, seed=options.seed, timeout=options.timeout)
    return framework_rows(adapter, records, options, ref)


__all__ = ["golden_cases", "core_row", "core_error_row", "row_repro", "framework_rows", "run_part"]
