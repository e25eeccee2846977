"""`rlspec record FRAMEWORK`: train a real trainer (TRL, verl, ms-swift, ...) a few steps on a tiny random-weight
model in its own environment and write an rlspec trace per scenario (conformance/frameworks/<name>/recorder.py),
then, with --replay, replay each one (the rows `rlspec reports` commits as `trace[<scenario>].*`).

Exit status: 0 recorded (and, with --replay, every checked link passes or is a preset), 1 a replayed link
FAILs, 2 the framework has no recorder or is not installed, or the recorder failed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from conformance.errors import BrokenRun


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("record", help="record traces of a real trainer's steps (for rlspec replay)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("framework", metavar="FRAMEWORK", help="a framework whose home has a recorder (--list-frameworks)")
    p.add_argument("--out", metavar="DIR", default="rlspec-traces", help="traces go to DIR/<scenario>/ [rlspec-traces]")
    p.add_argument("--scenario", action="append", default=None, metavar="NAME", help="only these scenarios (repeatable)")
    p.add_argument("--list", action="store_true", help="print the framework's scenarios and exit")
    p.add_argument("--steps", type=int, default=2, metavar="N", help="optimizer steps per scenario [2]")
    p.add_argument("--seed", type=int, default=0, help="model, data and trainer seed [0]")
    p.add_argument("--replay", action="store_true", help="replay every trace written and print its table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.trace import frameworks as fw

    if args.framework not in fw.with_recorder():
        raise BrokenRun(f"rlspec record: {args.framework}: no recorder; frameworks with one: {', '.join(fw.with_recorder())}")
    if args.steps < 1:
        raise BrokenRun(f"rlspec record: --steps: expected >= 1, got {args.steps}")
    try:
        names = fw.scenarios(args.framework)
        if args.list:
            print("\n".join(names))
            return 0
        unknown = sorted(set(args.scenario or []) - set(names))
        if unknown:
            raise BrokenRun(f"rlspec record: --scenario: {unknown[0]!r} is not a scenario of {args.framework} ({', '.join(names)})")
        chosen = args.scenario or names
        t0 = time.perf_counter()
        traces = fw.record(args.framework, args.out, chosen, steps=args.steps, seed=args.seed)
    except (fw.RecorderUnavailable, RuntimeError) as exc:
        raise BrokenRun(f"rlspec record: {exc}") from None
    print(f"{args.framework}: {len(traces)} trace(s) in {time.perf_counter() - t0:.1f}s: " + ", ".join(str(t) for t in traces))
    if not args.replay:
        return 0
    from conformance.runner.report import AdapterInfo, Report, render_table

    rows = [r for s, t in zip(chosen, traces) for r in fw.scenario_rows(args.framework, s, Path(t))]
    report = Report(seed=args.seed, n_seeds=1, adapters=[AdapterInfo(args.framework, "", "v1")], rows=rows,
                    command=f"rlspec record {args.framework} --replay")
    print(render_table(report))
    return 0 if report.ok else 1
