"""`rlspec repro`: re-run one comparison exactly as `rlspec check` ran it, from the `Reproduce:` line
that a failure or a precision finding printed: a seeded property case, a golden vector
(`--vector`), an invariant (`--invariant`), with the adapter named as the user named it."""

from __future__ import annotations

import argparse
import ast
from typing import Any

import numpy as np

from conformance.records import cases, make_case
from conformance.runner.loading import AdapterLoadError, load_adapter
from conformance.runner.protocol import LoadedAdapter
from conformance.runner.differential import BELOW, PRECISIONS
from conformance.errors import BrokenRun
from conformance.runner.invariants import METAMORPHIC
from conformance.records import BY_FUNCTION, Quantity
from conformance.runner.verdict import Trial

INVARIANTS = sorted(k.split(":", 1)[1] for k in METAMORPHIC) + ["on_policy"]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "repro",
        help="re-run one comparison (function, seed or golden vector, dtype, adapter)",
        description="Re-run one comparison of `rlspec check` from the line it printed after "
        "'Reproduce:'. Exit 0 when it passes, 1 when it fails or errors, 2 when it cannot run.",
    )
    p.add_argument("function", nargs="?", choices=sorted(BY_FUNCTION), help="the spec function (not with --row)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--seed", type=int, help="seed of the property case (with --row: the base seed of the adapter's rows, "
                       "default 0)")
    where.add_argument("--vector", metavar="ID", help="golden vector id, e.g. gae/multi-turn-gap-discount")
    p.add_argument("--dtype", default="float64", choices=list(PRECISIONS))
    p.add_argument("--adapter", default="refimpl", help="built-in name, entry point or module:attribute")
    p.add_argument("--invariant", choices=INVARIANTS, help="run this invariant check on the case instead of the oracle comparison")
    p.add_argument("--kw", action="append", default=[], metavar="NAME=VALUE",
                   help="keyword passed to the adapter and the oracle (Python literal), repeatable")
    p.add_argument("--oracle-kw", action="append", default=[], metavar="NAME=VALUE",
                   help="keyword given to the oracle only, on top of --kw (a preset's or variant's), repeatable")
    p.add_argument("--precision", choices=[*PRECISIONS, BELOW],
                   help="judge at this precision class's tolerance (default: the input dtype's)")
    p.add_argument("--canonical", action="store_true",
                   help="pass no keyword but --kw: every other question keyword at its canonical default (the "
                   "property cases that vary one keyword at a time; without --kw or --canonical the seed's drawn "
                   "keywords are passed)")
    p.add_argument("--show-inputs", action="store_true", help="print the input arrays")
    p.add_argument("--row", metavar="ID",
                   help="re-run a framework-specific row (the adapter's extra_rows, its id in the report) and show it, "
                        "e.g. 'verl.compute_rollout_rejection_mask[token_k1,0.5_5.0]'")
    p.set_defaults(func=run)


def parse_kw(items: list[str], flag: str = "--kw") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise BrokenRun(f"{flag} {item!r}: expected NAME=VALUE")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise BrokenRun(f"{flag} {item!r}: the value is not a Python literal ({exc})") from exc
    return out


def _golden_case(record: Quantity, vector_id: str) -> cases.Case:
    from conformance.vectors.golden import cases_for

    found = [c for c in cases_for(record.function) if c.note == vector_id]
    if not found:
        known = ", ".join(c.note for c in cases_for(record.function))
        raise BrokenRun(f"--vector: no golden vector {vector_id!r} of {record.function}; known: {known}")
    return found[0]


def _invariants_of(record: Quantity) -> list[str]:
    """The invariants `rlspec check` runs for the record (`suite._trials`; detached for torch adapters)."""
    found = [name for name in ("mask", "on_policy", "partition") if name in record.invariants]
    return found + (["detached"] if record.stop_grad_args else [])


def run_row(args: argparse.Namespace) -> int:
    """`--row ID`: the adapter's framework-specific rows at the seed, and the one with that id."""
    if args.function or args.vector or args.invariant or args.kw or args.oracle_kw or args.precision:
        raise BrokenRun("--row: give only --adapter and --seed with it (a framework row fixes its own case)")
    try:
        adapter = LoadedAdapter.of(load_adapter(args.adapter))
    except AdapterLoadError as exc:
        raise BrokenRun(f"{exc}") from None
    extra = adapter.extra_rows
    if extra is None:
        raise BrokenRun(f"--row: adapter {args.adapter!r} defines no framework-specific rows (extra_rows)")
    rows = extra(0 if args.seed is None else args.seed)
    found = [r for r in rows if r.id == args.row]
    if not found:
        raise BrokenRun(f"--row {args.row!r}: no such row among the {len(rows)} framework rows of {args.adapter!r}")
    row = found[0]
    print(f"{row.id} @ {row.adapter} ({row.spec_id})")
    print(row.message)
    for finding in row.precision_findings:
        print(f"precision finding: {finding['message']}")
    print(f"status: {row.status}")
    return 1 if row.status in ("fail", "error") else 0


def run(args: argparse.Namespace) -> int:
    if args.row is not None:
        return run_row(args)
    if args.function is None:
        raise BrokenRun("rlspec repro: give a spec function (see `rlspec list`) or --row ID")
    if args.seed is None and args.vector is None:
        raise BrokenRun("rlspec repro: give --seed N (a property case) or --vector ID (a golden vector)")
    record = BY_FUNCTION[args.function]
    if args.invariant and args.invariant not in _invariants_of(record):
        raise BrokenRun(f"--invariant {args.invariant}: rlspec check runs no such check for {record.function} "
                        f"(its invariants: {', '.join(_invariants_of(record)) or 'none'})")
    try:
        adapter = LoadedAdapter.of(load_adapter(args.adapter))
    except AdapterLoadError as exc:
        raise BrokenRun(f"{exc}") from None
    if args.vector is not None:
        kind, case = "golden", _golden_case(record, args.vector)
    else:
        case = make_case(record.function, args.seed)
        kind = f"invariant:{args.invariant}" if args.invariant else "property"
        if args.invariant == "on_policy":
            case = cases.on_policy(case)
    kwargs = parse_kw(args.kw) if args.kw or args.canonical else record.question_kwargs(case.kwargs)
    trial = Trial(kind, case, args.dtype, kwargs, parse_kw(args.oracle_kw, "--oracle-kw"))
    outcome = trial.run(record, adapter, ref=args.adapter, tol_class=args.precision)
    if args.show_inputs:
        with np.printoptions(precision=6, suppress=True, linewidth=120):
            for name, value in cases.rounded_args(case, args.dtype).items():
                print(f"{name} =\n{value}")
    print(outcome.report())
    if outcome.precision is not None:
        print(f"precision met: {outcome.precision.replace('_', ' ')}")
    print(f"status: {outcome.status}")
    return 0 if outcome.status in ("pass", "ill_conditioned") else 1
