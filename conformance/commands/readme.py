"""`rlspec readme`: regenerate (or check) the README's generated tables."""

from __future__ import annotations

import argparse

from conformance import readme


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("readme", help="regenerate or check the README tables made from code")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = readme.README.read_text()
    if args.write:
        readme.README.write_text(readme.render(text))
        return 0
    stale = readme.stale_blocks(text)
    if stale:
        print(f"README blocks out of date: {', '.join(stale)}; run `rlspec readme --write`")
        return 1
    return 0
