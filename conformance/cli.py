"""The `rlspec` command line: one sub-command per module in `conformance.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from conformance import SPEC_VERSION, SUITE_VERSION
from conformance.errors import BrokenRun

# Each module defines `register(subparsers) -> None`, which adds its sub-parser and sets
# `func=<callable(args) -> int>` as the parser default.
COMMAND_MODULES = (
    "conformance.commands.check",
    "conformance.commands.spec",
    "conformance.commands.repro",
    "conformance.commands.readme",
    "conformance.commands.new_adapter",
    "conformance.commands.reports",
    "conformance.commands.mutants",
    "conformance.commands.tiny_policy",
    "conformance.commands.vectors",
    "conformance.commands.frameworks",
    "conformance.commands.parity",
    "conformance.commands.bench",
    "conformance.commands.train",
    "conformance.commands.async_study",
    "conformance.commands.e2e",
    "conformance.commands.replay",
    "conformance.commands.record",
    "conformance.commands.site",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlspec",
        description="Reference spec, oracle and conformance checks for RL-on-LLM math.",
    )
    parser.add_argument(
        "--version", action="version", version=f"rlspec {SUITE_VERSION} (spec {SPEC_VERSION})"
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback when the run breaks (accepted anywhere on the line)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 all pass, 1 findings, 2 the run itself is broken (usage error, an adapter that
    cannot be loaded, an unexpected exception), with a one-line reason on stderr and a traceback
    only under `--debug`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere: `rlspec check ... --debug` too
    parser = build_parser()
    args = parser.parse_args([a for a in argv if a != "--debug"])  # a usage error exits 2 (argparse)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenRun as exc:
        if debug:
            raise
        print(f"rlspec {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rlspec {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - any other crash is a broken run, said in one line
        if debug:
            raise
        where = traceback.extract_tb(exc.__traceback__)[-1]
        print(f"rlspec {args.command}: internal error: {type(exc).__name__}: {exc} "
              f"(at {where.filename}:{where.lineno}; rerun with --debug for the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
