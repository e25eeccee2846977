"""`rlspec reports`: regenerate the published conformance reports of the real frameworks.

For each framework adapter that loads, runs the full check (fixed seed), adds the replay rows of every
scenario its recorder writes (`trace[<scenario>].<link>`, `conformance.trace.frameworks`) and writes
`conformance/reports/<adapter>.md` and `<adapter>.json`; an adapter that is not installed keeps its
previous report and is named on stdout. The README's framework table is generated from the JSONs.

`rlspec reports --diff OLD NEW` compares two report JSONs of a framework instead (fixed, regressed, changed
preset, ...: `conformance.runner.report_diff`) and runs nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.runner import report as reports
from conformance.runner.discovery import framework_names
from conformance.runner.options import RunOptions
from conformance.runner.report_diff import diff_markdown, diff_reports, load_report
from conformance.runner.rows import STATUSES
from conformance.runner.run import run as run_checks
from conformance.runner.run import select_records

REPORTS_DIR = Path(__file__).resolve().parent.parent / "reports"
FRAMEWORKS = framework_names()


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("reports", help="regenerate the committed reports of the frameworks under test")
    p.add_argument("--adapter", action="append", choices=FRAMEWORKS, help="only these (repeatable)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-seeds", type=int, default=8)
    p.add_argument("--out", default=str(REPORTS_DIR), help="folder (default: conformance/reports)")
    p.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"),
                   help="compare two report JSONs (e.g. conformance/reports/history/skyrl-0.3.0-e9415fa.json "
                        "conformance/reports/skyrl.json): rows fixed, regressed, with a changed preset or precision, "
                        "new or removed; runs no check (exit 2 when a file is no report)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.diff:
        try:
            old, new = (load_report(p) for p in args.diff)
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(diff_markdown(diff_reports(old, new)))
        return 0
    from conformance.trace.frameworks import trace_rows, with_recorder

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    broken = []
    for name in args.adapter or FRAMEWORKS:
        rep = run_checks([name], select_records(None), RunOptions(seed=args.seed, n_seeds=args.n_seeds, timeout=600))
        info = rep.adapters[0]
        if info.status != "ok":
            print(f"{name}: {info.status.replace('_', ' ')} ({info.message}); kept the previous report")
            continue
        if name in with_recorder():
            try:
                rep.rows += trace_rows(name, seed=args.seed)
            except RuntimeError as exc:  # the framework loads but its real trainer does not run: a broken run
                print(f"{name}: recorder failed, report not written: {exc}", file=sys.stderr)
                broken.append(name)
                continue
        reports.write_outputs(rep, json_path=str(out / f"{name}.json"), junit_path=None, markdown_path=str(out / f"{name}.md"))
        counts = {s: sum(r.status == s for r in rep.rows) for s in STATUSES}
        print(f"{name} {info.version}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 2 if broken else 0
