"""`rlspec check`: run the conformance suite against adapters and print the verdict table (a thin caller of
`conformance.runner.run`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.errors import BrokenRun
from conformance.runner import report as reports
from conformance.runner.loading import BUILTIN_ADAPTERS
from conformance.runner.options import RunOptions
from conformance.runner.run import run as run_checks
from conformance.runner.run import select_records


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
    p.add_argument("--json", metavar="PATH", help=f"write the JSON report (schema {reports.REPORT_SCHEMA_VERSION})")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown report")
    p.add_argument("--html", metavar="PATH", help="write the run's conformance matrix as one self-contained HTML "
                   "page (the matrix page of `rlspec site`, each cell's details on the same page)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--explain", action="store_true",
                   help="also print the weaker diagnosis hints: known bugs whose failure pattern alone fits a "
                   "FAIL (same checks failing) but which do not reproduce its outputs")
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
    try:
        return reports.parse_fail_on(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    names = args.adapter or list(BUILTIN_ADAPTERS)
    options = RunOptions(seed=args.seed, n_seeds=args.n_seeds, timeout=args.timeout, isolate=args.isolate,
                         strict_precision=args.strict_precision, fail_on=args.fail_on,
                         progress=not args.no_progress and sys.stderr.isatty())
    report = run_checks(names, select_records(args.only), options)
    print(reports.render_table(report, explain=args.explain))
    reports.write_outputs(report, json_path=args.json, junit_path=args.junit, markdown_path=args.markdown)
    if args.html:  # the matrix page of `rlspec site`, for this run (conformance/site/matrix.py)
        from conformance.site.matrix import report_page

        Path(args.html).write_text(report_page(report.to_json()), encoding="utf-8")
    unloaded = [a for a in report.adapters if a.status != "ok"]
    if args.adapter and unloaded:  # asked for by name: a run without it is broken, not green
        raise BrokenRun("; ".join(f"adapter {a.ref!r} could not be loaded: {a.message}" for a in unloaded))
    if not any(a.status == "ok" for a in report.adapters):
        raise BrokenRun("no adapter could be loaded: nothing was checked")
    idle = report.idle_adapters()
    if args.adapter and idle:  # asked for by name and nothing of it ran: a broken run, never "no findings"
        raise BrokenRun("; ".join(f"adapter {a.ref or a.name!r} implements none of the selected spec functions "
                                  "(each is absent or raises NotImplementedError on every case): nothing was "
                                  "checked; see `rlspec list` for the function names" for a in idle))
    return 0 if report.ok else 1
