"""`rlspec vectors --write | --check | --list`: the golden vectors of conformance/vectors/v1.

- `--write` generates, with the oracle, the catalogue cases that have no file yet and rewrites
  MANIFEST.sha256. It never overwrites a file: when a regenerated existing case differs from its
  published file (or a file is modified, missing per the manifest, or has no catalogue case) it
  refuses, writes nothing and exits 1. A semantic change goes to a new `v2/`, never into `v1/`.
- `--check` verifies the manifest, regenerates every catalogue case in memory and compares it with
  the published file; any difference, missing case or unexpected file: exit 1 with the list.
  Outputs may differ within the float64 tolerance (libm last bits); `--exact` demands identical bytes.
- `--list` prints the catalogue ids.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "vectors",
        help="write, check or list the golden vectors",
        description="Golden vectors: hand-built cases with the oracle's float64 outputs.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="write missing cases, update the manifest")
    action.add_argument("--check", action="store_true", help="verify the manifest and regenerate every case")
    action.add_argument("--list", action="store_true", help="print the catalogue ids")
    p.add_argument("--root", type=Path, default=None, help="vector directory (default: the packaged v1/)")
    p.add_argument("--exact", action="store_true", help="outputs must be bit-identical, not only within tolerance")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.vectors import V1_ROOT, generate
    from conformance.records import golden_catalogue

    root = args.root or V1_ROOT
    if args.list:
        for entry in golden_catalogue():
            print(entry.id)
        return 0
    if args.check:
        scan = generate.check(root, exact=args.exact)
        problems = scan.problems()
        for path in scan.close:
            print(f"note: {root / path}: outputs differ from the regeneration within the float64 tolerance")
        if problems:
            print(f"rlspec vectors --check: {len(problems)} problem(s) under {root}:")
            for line in problems:
                print(f"  {line}")
            return 1
        print(f"rlspec vectors --check: {len(scan.texts)} vectors under {root} match the catalogue and the manifest")
        return 0
    scan, written = generate.write(root, exact=args.exact)
    refusals = scan.refusals()
    if refusals:
        print(f"rlspec vectors --write: refused (published vectors are never overwritten; a semantic "
              f"change goes to a new spec version directory). {len(refusals)} problem(s) under {root}:")
        for line in refusals:
            print(f"  {line}")
        return 1
    for path in written:
        print(f"wrote {root / path}")
    print(f"rlspec vectors --write: {len(written)} new, {len(scan.texts) - len(written)} unchanged; "
          f"manifest {root / 'MANIFEST.sha256'} updated")
    return 0
