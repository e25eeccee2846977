"""`rlspec replay TRACE`: recompute every link of a recorded training step with the oracle and print the
verdict table of `rlspec check` (one row per link: mask, log-probs, entropy, rewards, advantages, per-token
loss, d loss/d logp with its wiring and normalisation, micro-batch losses, value gradient, probe gradient).

The trace is what `rlspec.trace.TraceRecorder` wrote (format: conformance/spec/v1/trace.md); `rlspec train
--trace DIR` and `rlspec record FRAMEWORK` write one. Exit status: 0 every checked link passes or matches
the trainer's documented convention, 1 a link FAILs (the finding), 2 the trace cannot be read or no link
could be checked.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.errors import BrokenRun
from conformance.runner import report as reports


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="recompute a recorded training step's every link with the oracle (rlspec.trace)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("trace", metavar="TRACE", help="the trace folder (trace.json and step-*/)")
    p.add_argument("--sample-rows", type=int, default=8, metavar="K",
                   help="rows per step on which the hidden-state links (logp, entropy) are recomputed, a seeded "
                   "sample named in the row's notes; every other link covers every row (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the row sample (default 0)")
    p.add_argument("--json", metavar="PATH", help=f"write the JSON report (schema {reports.REPORT_SCHEMA_VERSION})")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown report")
    p.add_argument("--html", metavar="PATH", help="write the report as one self-contained HTML page")
    p.add_argument("--explain", action="store_true", help="print every row's notes (which rows were sampled, what was skipped)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.trace.reader import TraceError
    from conformance.trace.replay import ReplayOptions, replay_report

    if args.sample_rows < 1:
        raise BrokenRun(f"rlspec replay: --sample-rows: expected >= 1, got {args.sample_rows}")
    try:
        report = replay_report(args.trace, ReplayOptions(sample_rows=args.sample_rows, seed=args.seed))
    except (TraceError, ValueError) as exc:
        raise BrokenRun(f"rlspec replay: {exc}") from None
    print(reports.render_table(report, explain=args.explain))
    reports.write_outputs(report, json_path=args.json, junit_path=args.junit, markdown_path=args.markdown)
    if args.html:
        from conformance.site.matrix import report_page

        Path(args.html).write_text(report_page(report.to_json()), encoding="utf-8")
    if all(r.status == "not_implemented" for r in report.rows):
        raise BrokenRun(f"rlspec replay: {args.trace}: no link could be checked (see the table for what is missing)")
    return 0 if report.ok else 1
