"""`rlspec list` and `rlspec explain SPEC_ID`: the spec from the command line."""

from __future__ import annotations

import argparse

from conformance import spec
from conformance.records import RECORDS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("list", help="list spec ids with one-line descriptions")
    p.set_defaults(func=run_list)
    p = subparsers.add_parser("explain", help="print the spec section of a spec id")
    p.add_argument("spec_id", help="e.g. adv.grpo, loss.ppo, agg.token_mean")
    p.set_defaults(func=run_explain)


def run_list(args: argparse.Namespace) -> int:
    rows = [(q.spec_id, q.function, spec.description(q.spec_id)) for q in RECORDS]
    w_id = max(len(r[0]) for r in rows)
    w_fn = max(len(r[1]) for r in rows)
    for spec_id, function, text in rows:
        print(f"{spec_id.ljust(w_id)}  {function.ljust(w_fn)}  {text}")
    return 0


def run_explain(args: argparse.Namespace) -> int:
    try:
        print(spec.section(args.spec_id))
    except KeyError as exc:
        print(f"rlspec explain: {exc.args[0]}")
        return 2
    return 0
