"""`rlspec check`: run the conformance suite against adapters and print the verdict table."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from conformance import report as reports
from conformance.adapters import BUILTIN_ADAPTERS, AdapterLoadError, load_adapter
from conformance.errors import BrokenRun
from conformance.records import Quantity, records_for
from conformance.suite import RowResult, check_row, run_with_timeout, seeds_for


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "check",
        help="check adapters against the spec and print a table",
        description="Check adapters against the spec. With no --adapter, every built-in adapter "
        "whose framework is installed.",
    )
    p.add_argument("--adapter", action="append", default=None, metavar="NAME|module:attr",
                   help="adapter to check (repeatable): built-in name, entry point or module:attribute")
    p.add_argument("--only", action="append", default=None, metavar="GLOB",
                   help="spec id or function glob, e.g. 'adv.*' or 'loss.ppo' (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="base seed of the property cases (default 0)")
    p.add_argument("--n-seeds", type=int, default=8, help="property cases per quantity (default 8)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per (quantity, adapter) row")
    p.add_argument("--json", metavar="PATH", help="write the JSON report (schema report-v1)")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown report")
    p.add_argument("--html", metavar="PATH", help="write the run's conformance matrix as one self-contained HTML "
                   "page (the matrix page of `rlspec site`, each cell's details on the same page)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--strict-precision", action="store_true",
                   help="judge every case at its input dtype's tolerance class: outputs of a coarser "
                   "precision FAIL (and no preset is named for them) instead of being precision findings")
    p.add_argument("--fail-on", default=",".join(reports.DEFAULT_FAIL_ON), type=_fail_on, metavar="KINDS",
                   help="comma-separated finding kinds that make the exit code 1, from "
                   f"{', '.join(reports.FINDINGS)} (default: {','.join(reports.DEFAULT_FAIL_ON)}); "
                   "exit 2 is kept for a run that is itself broken")
    p.add_argument("--isolate", choices=("auto", "always", "never"), default="auto",
                   help="run an adapter's rows in a worker process, so that an adapter that exits, "
                   "segfaults or hangs costs one error row, not the run (a hung row's worker is killed). "
                   "It costs one worker start per adapter and per crash (about 1.5 s on 2 CPU cores: "
                   "Python, torch and the adapter imported again), nothing per row. auto (default): "
                   "isolate adapters named by module:attribute or entry point (third-party code, where "
                   "native crashes happen; a 2-function adapter: 2.6 s -> 3.6 s); keep rlspec's own "
                   "oracle, refimpl and trl in process (refimpl, every row: 3.0 s -> 4.6 s, for no gain); "
                   "verl and openrlhf already run their framework in a subprocess")
    p.set_defaults(func=run)


def _fail_on(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in reports.FINDINGS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown finding kind(s) {', '.join(unknown)}; choose from {', '.join(reports.FINDINGS)}")
    return kinds


def selected_records(globs: list[str] | None) -> list[Quantity]:
    """The records matching any of the globs (all without globs); a glob that matches nothing is a
    usage error (BrokenRun), never an empty, passing run."""
    records: list[Quantity] = []
    for glob in globs or ["*"]:
        found = records_for(glob)
        if not found:
            raise BrokenRun(f"--only {glob!r} matches no spec id or function (see `rlspec list`)")
        for r in found:
            if r not in records:
                records.append(r)
    return records


def load_adapters(names: list[Any]) -> tuple[list[Any], list[reports.AdapterInfo], list[str]]:
    """Adapters by name (built-in, entry point or `module:attribute`); an adapter object is used as
    is. Returns the adapters, what the report says of every name, and how each loaded adapter was
    named (the reproduce lines use it)."""
    adapters: list[Any] = []
    infos: list[reports.AdapterInfo] = []
    refs: list[str] = []
    for name in names:
        if not isinstance(name, str):
            adapters.append(name)
            refs.append(name.name)
            infos.append(reports.AdapterInfo(name.name, str(name.version), name.spec_version))
            continue
        try:
            adapter = load_adapter(name)
        except AdapterLoadError as exc:
            status = "not_installed" if "cannot import" in str(exc) else "load_error"
            infos.append(reports.AdapterInfo(name, "-", "-", status, str(exc), ref=name))
            continue
        adapters.append(adapter)
        refs.append(name)
        infos.append(reports.AdapterInfo(adapter.name, str(adapter.version), adapter.spec_version, ref=name))
    return adapters, infos, refs


def golden_cases(record: Quantity) -> list:
    """Golden vectors of the record as cases (empty until vectors are published)."""
    try:
        from conformance.vectors.golden import cases_for
    except ImportError:
        return []
    return cases_for(record.function)


def _diagnose(record: Quantity, row: RowResult) -> list[str]:
    """The known bugs (mutants) the failing row is consistent with; never fails the run."""
    try:
        from conformance.diagnosis import diagnose
    except ImportError:
        return []
    try:
        return diagnose(record, row)
    except Exception as exc:  # noqa: BLE001 - a diagnosis problem must not hide the verdict
        return [f"(diagnosis failed: {type(exc).__name__}: {exc})"]


@dataclass(frozen=True)
class RunOptions:
    """The settings of one conformance run that every row is checked under."""

    seed: int = 0
    n_seeds: int = 8
    timeout: float = 120.0
    diagnose: bool = True
    strict_precision: bool = False


def run_row(record: Quantity, adapter: Any, ref: str, options: RunOptions,
            on_trial: Callable[[str], None] | None = None) -> RowResult:
    """Check one (quantity, adapter) row and diagnose it, with no timeout (the caller's job).
    `ref` is how the user named the adapter (for the reproduce lines); `on_trial(description)` is
    called before each adapter call (used by the isolated worker to say where a crash happened)."""
    seeds = seeds_for(record.function, options.seed, options.n_seeds)
    t0 = time.perf_counter()
    row = check_row(record, adapter, seeds=seeds, golden=golden_cases(record), ref=ref, on_trial=on_trial,
                    strict_precision=options.strict_precision)
    row.seconds = time.perf_counter() - t0
    if options.diagnose and row.status in ("fail", "error", "preset", "variant"):
        row.consistent_with = _diagnose(record, row)
    return row


def error_row(record: Quantity, adapter_name: str, options: RunOptions, message: str) -> RowResult:
    """The row of a (quantity, adapter) pair whose check could not complete (timeout, crash)."""
    return RowResult(
        id=f"{record.function}@{adapter_name}", spec_id=record.spec_id, function=record.function,
        adapter=adapter_name, status="error", seeds=seeds_for(record.function, options.seed, options.n_seeds),
        message=message,
    )


def run_report(adapter_names: list[Any], records: list[Quantity], *, seed: int, n_seeds: int,
               timeout: float, progress: bool, diagnose: bool = True, isolate: str = "auto",
               strict_precision: bool = False,
               fail_on: tuple[str, ...] = reports.DEFAULT_FAIL_ON) -> reports.Report:
    """The report of `records` against the named adapters; `isolate` (auto/always/never) chooses the
    adapters whose rows run in a worker process (`conformance.isolation`)."""
    from conformance import isolation  # it imports this module

    options = RunOptions(seed=seed, n_seeds=n_seeds, timeout=timeout, diagnose=diagnose,
                         strict_precision=strict_precision)
    adapters, infos, refs = load_adapters(adapter_names)
    workers = {id(a): isolation.IsolatedRows(ref, a.name, options) for a, ref in zip(adapters, refs)
               if isolation.isolates(isolate, ref, given_as_object=any(a is n for n in adapter_names))}
    report = reports.Report(seed=seed, n_seeds=n_seeds, adapters=infos, fail_on=fail_on,
                            strict_precision=strict_precision)
    start = time.perf_counter()
    units = [(r, a, ref) for a, ref in zip(adapters, refs) for r in records]
    bar = tqdm(units, desc="rlspec check", unit="row", disable=not progress, file=sys.stderr, leave=False)
    try:
        for record, adapter, ref in bar:
            bar.set_postfix_str(f"{adapter.name}:{record.function}")
            t0 = time.perf_counter()
            worker = workers.get(id(adapter))
            row = worker.run(record) if worker is not None else run_with_timeout(
                lambda: run_row(record, adapter, ref, options),
                timeout,
                lambda: error_row(record, adapter.name, options, f"timed out after {timeout:g}s (per-row limit, --timeout)"),
            )
            row.seconds = time.perf_counter() - t0
            report.rows.append(row)
    finally:
        for worker in workers.values():
            worker.close()
    if any(r.function == "aggregate" for r in records):  # agg.partition[<mode>]: conformance/partition.py
        from conformance.partition import partition_rows

        for adapter in adapters:
            report.rows += partition_rows(adapter, seed=seed, timeout=timeout)
    for adapter, ref in zip(adapters, refs):
        report.rows += framework_rows(adapter, records, seed=seed, timeout=timeout, ref=ref)
    report.seconds = time.perf_counter() - start
    return report


def framework_rows(adapter: Any, records: list[Quantity], *, seed: int, timeout: float,
                   ref: str | None = None) -> list[RowResult]:
    """Rows an adapter defines itself (`extra_rows(seed)`: e.g. every TRL loss_type), kept when
    their spec id matches a selected record's (or any, when nothing was filtered). A failing row
    without its own reproduce line gets `rlspec repro --row ID --adapter REF --seed SEED`, which
    re-runs the adapter's extra rows and shows that one."""
    extra = getattr(adapter, "extra_rows", None)
    if extra is None:
        return []
    box: dict[str, list[RowResult]] = {}

    def rows() -> RowResult:
        box["rows"] = extra(seed)
        return RowResult(id="", spec_id="", function="", adapter=adapter.name, status="pass")

    def on_timeout() -> RowResult:
        return RowResult(id=f"{adapter.name}.extra_rows", spec_id="-", function=f"{adapter.name}.extra_rows",
                         adapter=adapter.name, status="error", message=f"timed out after {timeout:g}s")

    t0 = time.perf_counter()
    head = run_with_timeout(rows, timeout, on_timeout)
    if head.status == "error":
        head.seconds = time.perf_counter() - t0
        return [head]
    selected = {r.spec_id.split(".")[0] for r in records}
    everything = len(records) == len(selected_records(None))
    kept = [r for r in box["rows"] if everything or r.spec_id.split(".")[0] in selected]
    for r in kept:
        line = row_repro(r.id, ref or adapter.name, seed)
        if r.status in ("fail", "error") and not r.reproduce:
            r.reproduce = line
            r.message = f"{r.message}\nReproduce: {r.reproduce}"
        for finding in r.precision_findings:
            finding["reproduce"] = finding.get("reproduce") or line
    return kept


def row_repro(row_id: str, ref: str, seed: int) -> str:
    """The command that re-runs the framework row ``row_id`` of the adapter ``ref``."""
    import shlex

    return f"rlspec repro --row {shlex.quote(row_id)} --adapter {shlex.quote(ref)} --seed {seed}"


def run(args: argparse.Namespace) -> int:
    names = args.adapter or list(BUILTIN_ADAPTERS)
    report = run_report(
        names,
        selected_records(args.only),
        seed=args.seed,
        n_seeds=args.n_seeds,
        timeout=args.timeout,
        progress=not args.no_progress and sys.stderr.isatty(),
        isolate=args.isolate,
        strict_precision=args.strict_precision,
        fail_on=args.fail_on,
    )
    print(reports.render_table(report))
    reports.write_outputs(report, json_path=args.json, junit_path=args.junit, markdown_path=args.markdown,
                          html_path=args.html)
    unloaded = [a for a in report.adapters if a.status != "ok"]
    if args.adapter and unloaded:  # asked for by name: a run without it is broken, not green
        raise BrokenRun("; ".join(f"adapter {a.ref!r} could not be loaded: {a.message}" for a in unloaded))
    if not any(a.status == "ok" for a in report.adapters):
        raise BrokenRun("no adapter could be loaded: nothing was checked")
    return 0 if report.ok else 1
