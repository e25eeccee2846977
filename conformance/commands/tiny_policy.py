"""`rlspec tiny-policy`: the tiny autoregressive policy experiment, run with the refimpl losses."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time

from conformance.experiments import tiny_policy as tp


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _learning_rates(text: str) -> tuple[float, ...]:
    try:
        lrs = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not lrs or any(not lr > 0 for lr in lrs):
        raise argparse.ArgumentTypeError(f"expected positive learning rates, got {text!r}")
    if len({tp.lr_key(lr) for lr in lrs}) != len(lrs):
        raise argparse.ArgumentTypeError(f"duplicate learning rates in {text!r}")
    return lrs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tiny-policy",
        help="the tiny autoregressive policy experiment: why baselines and clipping exist",
        description=textwrap.fill(
            f"A policy writes {tp.LENGTH} tokens from a vocabulary of {tp.V} and earns one point per "
            f"token matching a hidden target, plus {tp.OFFSET:g}. Tabular policy (one row of logits per "
            f"prefix, zeros at start), Adam, {tp.BATCH_SIZE} sequences per update. Five learners, "
            "trained with the refimpl losses (pg_token_loss, ppo_token_loss, aggregate):",
            width=88,
        )
        + "\n"
        + tp.describe_learners(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--seeds", type=_positive_int, default=tp.DEFAULT_SEEDS, metavar="N",
        help=f"number of seeds, 0..N-1 (default {tp.DEFAULT_SEEDS})",
    )
    parser.add_argument(
        "--updates", type=_positive_int, default=tp.DEFAULT_UPDATES, metavar="N",
        help=f"updates (sampled batches) per run (default {tp.DEFAULT_UPDATES})",
    )
    parser.add_argument(
        "--lrs", type=_learning_rates, default=tp.DEFAULT_LRS, metavar="LR[,LR...]",
        help="Adam learning rates, comma-separated (default "
        + ",".join(tp.lr_key(lr) for lr in tp.DEFAULT_LRS) + ")",
    )
    parser.add_argument(
        "--batch-size", type=int, default=tp.BATCH_SIZE, metavar="N",
        help=f"sequences per update (default {tp.BATCH_SIZE})",
    )
    parser.add_argument(
        "--cosine-batches", type=_positive_int, default=tp.DEFAULT_COSINE_BATCHES, metavar="N",
        help=f"batches averaged for the gradient cosines (default {tp.DEFAULT_COSINE_BATCHES})",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument(
        "--plot", metavar="PATH",
        help="write a PNG of the learning curves to PATH (needs matplotlib: pip install 'rlspec[plot]')",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 2:
        print("tiny-policy: --batch-size: expected >= 2 (the baseline needs two samples)", file=sys.stderr)
        return 2
    if args.plot:
        try:
            tp.require_matplotlib()  # fail before spending minutes on the runs
        except tp.MissingPlotDependency as exc:
            print(exc, file=sys.stderr)
            return 2
    try:
        losses = tp.load_losses()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        if not args.quiet:
            print(f"[tiny-policy] {line}", file=sys.stderr, flush=True)

    start = time.perf_counter()
    result = tp.run_experiment(
        seeds=args.seeds,
        updates=args.updates,
        lrs=args.lrs,
        batch_size=args.batch_size,
        cosine_batches=args.cosine_batches,
        losses=losses,
        progress=progress,
    )
    print(tp.format_tables(result))
    print(f"\n({time.perf_counter() - start:.1f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(tp.to_json(result), fh, indent=2)
            fh.write("\n")
        progress(f"wrote {args.json}")
    if args.plot:
        tp.plot_curves(result, args.plot)
        progress(f"wrote {args.plot}")
    return 0
