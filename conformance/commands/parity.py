"""`rlspec parity --engine vllm [--model DIR]`: the engine-trainer mismatch metrics (spec ``metric.mismatch``)
between vLLM's log-probs of the tokens it sampled and the trainer's forward of the same weights, for a float32
and a bfloat16 engine (``conformance/experiments/parity.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "parity",
        help="engine vs trainer: the mismatch metrics (KL, chi2, perplexity, probability error) and a histogram",
        description="Generate with an inference engine (vLLM, from `rlspec frameworks install vllm`), score the same "
        "tokens with the trainer's forward of the same weights, and print the mismatch metrics of spec metric.mismatch "
        "per engine dtype. Without --model a tiny random-weight Llama is built (no download).",
    )
    p.add_argument("--engine", choices=("vllm",), default="vllm", help="the inference engine (default vllm)")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="a local transformers causal-LM folder the engine can load (default: a tiny random Llama)")
    p.add_argument("--engine-dtype", nargs="+", choices=("float32", "bfloat16"), default=["float32", "bfloat16"],
                   help="engine dtypes to compare (default both)")
    p.add_argument("--trainer-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="the trainer's forward dtype (default float32)")
    p.add_argument("--logprobs-mode", choices=("processed_logprobs", "raw_logprobs"), default="processed_logprobs",
                   help="what the engine reports; the trainer scores in the same semantics (default processed)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 = no top-k")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--prompts", type=int, default=16, metavar="N", help="prompts (default 16)")
    p.add_argument("--prompts-file", type=Path, default=None, metavar="FILE.jsonl",
                   help='JSON lines {"prompt": text}, tokenized with the --model folder\'s tokenizer')
    p.add_argument("--max-tokens", type=int, default=32, help="tokens generated per prompt (default 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, metavar="PATH", help="write the results (with every delta)")
    p.add_argument("--plot", type=Path, default=None, metavar="PNG", help="histogram of the per-token differences")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.experiments import parity
    from conformance.runner.loading import AdapterLoadError

    if args.prompts < 1 or args.max_tokens < 1:
        print("rlspec parity: --prompts and --max-tokens must be >= 1")
        return 2
    if args.model is not None and not Path(args.model).is_dir():
        print(f"rlspec parity: --model: {args.model} is not a folder")
        return 2
    try:
        results = [parity.run_parity(model=args.model, engine_dtype=d, trainer_dtype=args.trainer_dtype,
                                     logprobs_mode=args.logprobs_mode, temperature=args.temperature,
                                     top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, n_prompts=args.prompts,
                                     max_tokens=args.max_tokens, seed=args.seed, prompts_file=args.prompts_file)
                   for d in args.engine_dtype]
    except AdapterLoadError as exc:
        print(f"rlspec parity: {exc}")
        return 2
    except ValueError as exc:
        print(f"rlspec parity: {exc}")
        return 2
    first = results[0]
    print(f"{first.engine}, {first.logprobs_mode}, sampling {first.sampling}, {first.n_prompts} prompts")
    print(parity.format_results(results))
    if args.json:
        args.json.write_text(parity.to_json(results))
        print(f"wrote {args.json}")
    if args.plot:
        try:
            parity.plot_histogram(results, args.plot)
        except parity.MissingPlotDependency as exc:
            print(f"rlspec parity: {exc}")
            return 2
        print(f"wrote {args.plot}")
    return 0
