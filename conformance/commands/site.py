"""`rlspec site DIR`: build the static conformance site from the committed reports.

The matrix of every spec quantity against every framework (a page per cell with the case, the
fingerprint and the reproduce command), each framework's own rows, the spec sections, the mutation
catalogue, the bench tables and the plots (`conformance.site.build`). Nothing is run: the site shows
what `rlspec reports`, `rlspec bench` and the experiments committed. The pages need no network and
work from `file://` or any static host.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.errors import BrokenRun
from conformance.site import browser
from conformance.site.build import REPORTS_DIR, build_site


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "site", help="build the static conformance site (matrix, cells, spec, mutants, bench, plots) into a folder",
        description="Build the static conformance site from the committed reports into DIR (a new or empty "
        "folder, or a site built before, which is replaced). Open DIR/index.html.")
    p.add_argument("dir", metavar="DIR", help="output folder")
    p.add_argument("--reports", default=str(REPORTS_DIR), metavar="DIR",
                   help="folder of the framework reports, bench results and plots (default: conformance/reports)")
    p.add_argument("--report", action="append", default=[], metavar="PATH",
                   help="also show the adapters of this `rlspec check --json` report as columns (repeatable; "
                   "e.g. oracle and refimpl, or your own adapter); one named like a framework replaces its column")
    p.add_argument("--screenshot", metavar="PNG",
                   help="then save a screenshot of the matrix page with headless Chromium (needs chromium, "
                   "chromium-driver and selenium: the [browser] extra)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    out = Path(args.dir)
    reports = Path(args.reports)
    if not reports.is_dir():
        raise BrokenRun(f"--reports {reports}: no such folder")
    for path in args.report:
        if not Path(path).is_file():
            raise BrokenRun(f"--report {path}: no such file")
    if args.screenshot and browser.missing():
        raise BrokenRun(f"--screenshot: {browser.missing()}")
    try:
        site = build_site(out, reports_dir=reports, extra_reports=[Path(p) for p in args.report])
    except FileExistsError as exc:
        raise BrokenRun(str(exc)) from exc
    states = ", ".join(f"{c.name} {c.version}" if c.status == "ok" else f"{c.name} ({c.status.replace('_', ' ')})"
                       for c in site.columns)
    print(f"wrote {len(site.pages)} pages and {len(site.files)} files to {out} ({states}); open {out / 'index.html'}")
    if args.screenshot:
        browser.screenshot(out / "index.html", Path(args.screenshot))
        print(f"wrote {args.screenshot}")
    return 0
