"""Judge the wiring mutants: record each one's trace, replay it, and say whether its link FAILs (caught) and
names it (named); and replay the unmutated trainer in every configuration the mutants use (no link may
FAIL there: no false positive)."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from conformance.mutants.wiring.base import WiringMutant, config_of, record
from conformance.trace.replay import replay


@dataclass
class WiringResult:
    name: str
    bug_class: str
    link: str
    status: str  # the link row's status
    caught: bool
    named: bool
    identified: list[str] = field(default_factory=list)
    other_failing: list[str] = field(default_factory=list)  # links downstream of the bug that FAIL too
    message: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(mutant: WiringMutant) -> WiringResult:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"rlspec-wiring-{mutant.name}-") as d:
        record(mutant, d)
        _, rows = replay(d)
    row = next(r for r in rows if r.function == mutant.link)
    named = row.status == "fail" and any(mutant.identifies in c for c in row.consistent_with)
    return WiringResult(
        name=mutant.name, bug_class=mutant.bug_class, link=mutant.link, status=row.status, caught=row.status == "fail",
        named=named, identified=list(row.consistent_with),
        other_failing=[r.function for r in rows if r.status == "fail" and r.function != mutant.link],
        message=row.message, seconds=time.perf_counter() - t0,
    )


def _setup(m: WiringMutant) -> tuple[str, int, int]:
    return json.dumps(config_of(m), sort_keys=True), m.world_size, m.cp_size


def false_positives(mutants: list[WiringMutant]) -> list[dict[str, Any]]:
    """Every link that FAILs on the unmutated trainer, in each distinct setup of ``mutants``."""
    out = []
    for key in sorted({_setup(m) for m in mutants}):
        config, world, cp = key
        with tempfile.TemporaryDirectory(prefix="rlspec-wiring-baseline-") as d:
            record(None, d, overrides=json.loads(config), world_size=world, cp_size=cp)
            _, rows = replay(d)
        out += [{"setup": {"config": json.loads(config), "world_size": world, "cp_size": cp}, "link": r.function,
                 "message": r.message} for r in rows if r.status == "fail"]
    return out
