"""`rlspec readme`: regenerate (or check) the tables made from code, in the README and in the
spec's api.md (`conformance.readme.DOCUMENTS`)."""

from __future__ import annotations

import argparse

from conformance import readme


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("readme", help="regenerate or check the tables made from code in the README, docs/ and api.md")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    stale_anywhere = False
    for path in readme.DOCUMENTS:
        text = path.read_text()
        if args.write:
            path.write_text(readme.render(text))
            continue
        stale = readme.stale_blocks(text)
        if stale:
            print(f"{path.name} blocks out of date: {', '.join(stale)}; run `rlspec readme --write`")
            stale_anywhere = True
    return int(stale_anywhere)
