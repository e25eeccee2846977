"""`rlspec async-study`: synchronous vs asynchronous training (max staleness 1, 2, 4, 8) with no
correction, token TIS and decoupled PPO, over several seeds on the digit task
(``conformance.experiments.async_study``). The committed results are
``conformance/reports/async_study.{json,png}``, read in docs/async.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from conformance.experiments import async_study as study_mod


def _ints(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not out or any(x < 0 for x in out):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 0, got {text!r}")
    return out


def _corrections(text: str) -> tuple[str, ...]:
    from refimpl.trainer.config import CORRECTIONS

    out = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in out if x not in CORRECTIONS]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"expected comma-separated corrections from {list(CORRECTIONS)}, got {text!r}")
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "async-study",
        help="synchronous vs asynchronous training (staleness x correction x seeds) on the digit task",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", metavar="PATH", help="write the study as JSON to PATH")
    parser.add_argument("--plot", metavar="PATH", help="write the PNG (reward curves, steps to target, throughput)")
    parser.add_argument("--staleness", type=_ints, default=study_mod.DEFAULT_STALENESS, metavar="S,S,...",
                        help=f"max_staleness values [{','.join(map(str, study_mod.DEFAULT_STALENESS))}]")
    parser.add_argument("--corrections", type=_corrections, default=study_mod.DEFAULT_CORRECTIONS, metavar="C,C,...",
                        help=f"corrections [{','.join(study_mod.DEFAULT_CORRECTIONS)}]")
    parser.add_argument("--seeds", type=_ints, default=study_mod.DEFAULT_SEEDS, metavar="N,N,...",
                        help=f"seeds [{','.join(map(str, study_mod.DEFAULT_SEEDS))}]")
    parser.add_argument("--steps", type=int, default=study_mod.DEFAULT_STEPS, help=f"steps per run [{study_mod.DEFAULT_STEPS}]")
    parser.add_argument("--actor-dtype", choices=("float32", "bfloat16"), default="float32",
                        help="precision of the rollout actors [float32]")
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                        help="what the asynchronous runs' actors sample with [hf]; vllm needs `rlspec frameworks "
                        "install vllm` and runs every configuration with 2 attention heads (vLLM's head size 32)")
    parser.add_argument("--behav-cap", type=float, default=None, metavar="X",
                        help="cap the behaviour weight of the decoupled configurations at X [uncapped]")
    parser.add_argument("--no-sync", action="store_true", help="leave the synchronous baseline out")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: a 1-layer model, 4 prompts x 4 samples, the given steps (default 6 here)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)


QUICK = dict(prompts_per_step=4, group_size=4, hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


def run(args: argparse.Namespace) -> int:
    from refimpl.trainer.actors import MissingRay
    from refimpl.trainer.task import MissingTransformers
    from refimpl.trainer.metrics import MissingPlotDependency, require_matplotlib

    if args.steps < 1:
        print("rlspec async-study: --steps: expected >= 1", file=sys.stderr)
        return 2
    if args.behav_cap is not None and not args.behav_cap > 0:
        print("rlspec async-study: --behav-cap: expected > 0", file=sys.stderr)
        return 2
    if args.plot:
        try:
            require_matplotlib()  # fail before spending minutes on the runs
        except MissingPlotDependency as exc:
            print(f"rlspec async-study: {exc}", file=sys.stderr)
            return 2
    steps = args.steps
    if args.quick and steps == study_mod.DEFAULT_STEPS:
        steps = 6

    def progress(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    base = dict(QUICK) if args.quick else {}
    if args.engine == "vllm":
        base["num_heads"] = base.get("hidden_size", 64) // 32  # a head size of 32: vLLM's CPU attention
    try:
        study = study_mod.run_study(staleness=args.staleness, corrections=args.corrections, seeds=args.seeds,
                                    steps=steps, actor_dtype=args.actor_dtype, base=base or None,
                                    behav_cap=args.behav_cap, sync=not args.no_sync, progress=progress,
                                    engine=args.engine)
    except (MissingRay, MissingTransformers) as exc:
        print(f"rlspec async-study: {exc}", file=sys.stderr)
        return 2
    print(study_mod.render_table(study))
    print(f"\n({study['seconds']:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(study, indent=1) + "\n")
        progress(f"wrote {args.json}")
    if args.plot:
        study_mod.plot_study(study, args.plot)
        progress(f"wrote {args.plot}")
    return 0
