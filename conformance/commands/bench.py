"""`rlspec bench`: refimpl's fused log-probs against naive, TRL, TRL's fused LM head, Liger-Kernel
and Cut Cross-Entropy (the last two when installed: `pip install -e ".[bench]"`), and its GAE against
verl's loop and torchrl's two GAE functions (torchrl from its own environment: `rlspec frameworks
install torchrl`), one process per measurement. Prints the tables; `--json PATH` writes the results."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path


def _csv(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _shapes(text: str):
    from conformance.bench import Shape

    out = []
    for item in _csv(text):
        n, d, v = (int(x) for x in item.lower().split("x"))
        out.append(Shape(n, d, v))
    return tuple(out)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark fused log-probs (lean, and at each faster peer's memory via `memory_budget`) and GAE "
        "against naive, TRL, Liger, CCE, torchrl",
        description="Side-by-side benchmark of refimpl's fused log-probs (time, peak memory, GEMM efficiency) "
        "and vectorized GAE, one process per measurement.",
    )
    p.add_argument("--quick", action="store_true", help="small shapes, fp32, one repetition: a CI smoke run")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the results here")
    p.add_argument("--impl", type=_csv, default=None, help="comma-separated log-prob implementations")
    p.add_argument("--dtype", type=_csv, default=None, help="comma-separated dtypes (float32,bfloat16)")
    p.add_argument("--mode", type=_csv, default=None, help="comma-separated modes (fwd,fwd+bwd)")
    p.add_argument("--shapes", type=_shapes, default=None, help="comma-separated NxDxV, e.g. 8192x512x32000")
    p.add_argument("--gae-shapes", type=_csv, default=None, help="comma-separated BxT; 'none' to skip GAE")
    p.add_argument("--gae-lam", type=_csv, default=None, help="comma-separated γλ values (γ = 1)")
    p.add_argument("--gae-mask", type=_csv, default=None, help="comma-separated GAE masks (gaps,runs)")
    p.add_argument("--gae-impl", type=_csv, default=None,
                   help="comma-separated GAE implementations (refimpl,loop,torchrl_loop,torchrl_vec)")
    p.add_argument("--no-entropy", action="store_true", help="skip the log-probs + entropy rows")
    p.add_argument("--no-logprob", action="store_true", help="only GAE")
    p.add_argument("--no-budget-rows", action="store_true",
                   help="skip the refimpl rows at the memory of each faster peer (memory_budget)")
    p.add_argument("--reps", type=int, default=None, help="measured calls per case (median)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 2 on CPU)")
    p.add_argument("--max-mem-gb", type=float, default=None, help="skip cases estimated to need more")
    p.add_argument("--timeout", type=float, default=None, help="seconds per measurement process")
    p.add_argument("--update", action="store_true",
                   help="with --json: re-measure only the selected cases and replace their rows in the existing file")
    p.add_argument("--wait-idle", type=float, default=None, metavar="SECONDS",
                   help="before each measurement wait up to SECONDS for other processes to go quiet (shared machines)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from conformance.bench import bench_table_markdown, default_plan
    from conformance.bench import run as run_plan

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("rlspec bench: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
            return 2
    plan = default_plan(args.device, args.quick)
    changes = {}
    if args.impl:
        changes["impls"] = args.impl
    if args.dtype:
        changes["dtypes"] = args.dtype
    if args.mode:
        changes["modes"] = args.mode
    if args.shapes:
        changes["logprob_shapes"] = args.shapes
        changes["entropy_shapes"] = tuple(s for s in plan.entropy_shapes if s in args.shapes) or args.shapes[:1]
    if args.no_entropy:
        changes["entropy_shapes"] = ()
    if args.no_logprob:
        changes["logprob_shapes"] = ()
    if args.no_budget_rows:
        changes["budget_rows"] = False
    if args.gae_shapes:
        changes["gae_shapes"] = () if args.gae_shapes == ("none",) else tuple(
            tuple(int(x) for x in s.lower().split("x")) for s in args.gae_shapes
        )
    if args.gae_lam:
        changes["gae_c"] = tuple(float(x) for x in args.gae_lam)
    if args.gae_mask:
        changes["gae_masks"] = args.gae_mask
    if args.gae_impl:
        changes["gae_impls"] = args.gae_impl
    if args.reps:
        changes["reps"] = args.reps
    if args.threads:
        changes["threads"] = args.threads
    if args.max_mem_gb is not None:
        changes["max_mem_gb"] = args.max_mem_gb
    if args.timeout:
        changes["timeout_s"] = args.timeout
    if args.wait_idle is not None:
        changes["wait_idle_s"] = args.wait_idle
    plan = replace(plan, **changes)
    result = run_plan(plan, log=lambda line: print(line, flush=True))
    argv = sys.argv[sys.argv.index("bench") + 1 :] if "bench" in sys.argv else []
    result["command"] = " ".join(["rlspec", "bench", *(shlex.quote(a) for a in argv)])
    print()
    print(bench_table_markdown(result))
    if args.update and args.json and args.json.exists():
        from conformance.bench.runner import merge_results

        result = merge_results(json.loads(args.json.read_text()), result)
        print("merged into the existing results:")
        print(bench_table_markdown(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    failed = [r for r in result["logprob"] + result["gae"] if str(r.get("status", "")).startswith("failed")]
    return 1 if failed else 0
