"""The command line every framework's ``recorder.py`` offers (the contract ``conformance/trace/frameworks.py``
runs it by): ``--list`` prints the scenario names as a JSON list; ``--out DIR [--scenario NAME ...] --steps N
--seed S`` writes one trace per scenario to ``DIR/<scenario>/``. Standard library only: it runs in every
framework's own environment."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def recorder_main(argv: list[str] | None, *, description: str, scenarios: Mapping[str, Any],
                  record: Callable[..., Path], default_steps: int = 2, steps_help: str = "optimizer steps per scenario",
                  before: Callable[[], None] | None = None, after: Callable[[], None] | None = None) -> int:
    """Parse ``argv`` and call ``record(out, name, steps=, seed=)`` for each chosen scenario; ``before`` and
    ``after`` run around the recordings (e.g. thread settings, a process group torn down)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", help="the folder the traces go to (one per scenario)")
    p.add_argument("--scenario", action="append", choices=list(scenarios), help="default: all")
    p.add_argument("--steps", type=int, default=default_steps, help=f"{steps_help} [{default_steps}]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--list", action="store_true", help="print the scenario names as a JSON list and exit")
    a = p.parse_args(argv)
    if a.list:
        print(json.dumps(list(scenarios)))
        return 0
    if not a.out:
        p.error("--out is required")
    if before is not None:
        before()
    try:
        for name in a.scenario or list(scenarios):
            t0 = time.perf_counter()
            folder = record(a.out, name, steps=a.steps, seed=a.seed)
            print(f"{name}: {folder} ({time.perf_counter() - t0:.1f} s)", flush=True)
    finally:
        if after is not None:
            after()
    return 0
