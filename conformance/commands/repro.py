"""`rlspec repro`: re-run one failing comparison from the line a failure message printed."""

from __future__ import annotations

import argparse
import ast

import numpy as np

from conformance import cases
from conformance.adapters import AdapterLoadError, load_adapter
from conformance.differential import run_case
from conformance.registry import BY_FUNCTION


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("repro", help="re-run one comparison (function, seed, dtype, adapter)")
    p.add_argument("function", choices=sorted(BY_FUNCTION))
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--dtype", default="float64", choices=["float64", "float32", "bfloat16"])
    p.add_argument("--adapter", default="refimpl")
    p.add_argument("--kw", action="append", default=[], metavar="NAME=VALUE",
                   help="keyword passed to the adapter and the oracle (Python literal), repeatable")
    p.add_argument("--show-inputs", action="store_true", help="print the input arrays")
    p.set_defaults(func=run)


def parse_kw(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"rlspec repro: --kw {item!r}: expected NAME=VALUE")
        out[name] = ast.literal_eval(value)
    return out


def run(args: argparse.Namespace) -> int:
    record = BY_FUNCTION[args.function]
    try:
        adapter = load_adapter(args.adapter)
    except AdapterLoadError as exc:
        print(f"rlspec repro: {exc}")
        return 2
    case = cases.make_case(record.function, args.seed)
    kwargs = parse_kw(args.kw) if args.kw else None
    outcome = run_case(record, adapter, case, args.dtype, kwargs)
    if args.show_inputs:
        with np.printoptions(precision=6, suppress=True, linewidth=120):
            for name, value in cases.rounded_args(case, args.dtype).items():
                print(f"{name} =\n{value}")
    print(outcome.report())
    print(f"status: {outcome.status}")
    return 0 if outcome.status in ("pass", "ill_conditioned") else 1
