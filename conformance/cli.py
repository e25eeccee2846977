"""The `rlspec` command line: one sub-command per module in `conformance.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from conformance import SPEC_VERSION, SUITE_VERSION

# Each module defines `register(subparsers) -> None`, which adds its sub-parser and sets
# `func=<callable(args) -> int>` as the parser default.
COMMAND_MODULES = (
    "conformance.commands.check",
    "conformance.commands.spec",
    "conformance.commands.repro",
    "conformance.commands.readme",
    "conformance.commands.reports",
    "conformance.commands.mutants",
    "conformance.commands.tiny_policy",
    "conformance.commands.vectors",
    "conformance.commands.frameworks",
    "conformance.commands.bench",
    "conformance.commands.train",
    "conformance.commands.e2e",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlspec",
        description="Reference spec, oracle and conformance checks for RL-on-LLM math.",
    )
    parser.add_argument(
        "--version", action="version", version=f"rlspec {SUITE_VERSION} (spec {SPEC_VERSION})"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
