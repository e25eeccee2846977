"""The failure modes of a row: its failing outcomes grouped by kind and by how they fail (which outputs miss
and how, or which exception), each group with its worst case, the input features all its cases share
(`conformance.records.tags`) and its own reproduce line. `conformance.runner.verdict` builds them;
`RowResult.failures` holds their JSON; docs/checking.md, "Failure modes", shows an example."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from conformance.records.tags import TAGS, case_tags
from conformance.runner.differential import Outcome


@dataclass
class FailureMode:
    """One distinct way a row fails: the outcomes of one kind ("contract", "invariant", "fail", "preset",
    "error") that miss the same outputs in the same way (NaN, ±inf or finite but off) or raise the same
    exception; `worst` is the one shown (the largest difference; the first exception)."""

    kind: str
    label: str
    outcomes: list[Outcome]

    @property
    def worst(self) -> Outcome:
        return self.outcomes[0] if self.kind == "error" else max(self.outcomes, key=lambda o: o.max_abs)

    @cached_property
    def case_tags(self) -> list[tuple[str, ...]]:
        """Each case's input features (`conformance.records.tags`), read once."""
        return [case_tags(o.case.args) for o in self.outcomes]

    @property
    def tags(self) -> tuple[str, ...]:
        """The input features every case of the mode has."""
        common = set.intersection(*(set(t) for t in self.case_tags)) if self.case_tags else set()
        return tuple(t for t in TAGS if t in common)

    def headline(self) -> str:
        checks = sorted({o.kind for o in self.outcomes})
        where = f"; every case has: {', '.join(self.tags)}" if self.tags else ""
        distinct = sorted(set(self.case_tags))
        if not self.tags and len(distinct) <= 3 and all(distinct):
            where = "; each case has one of: " + " | ".join(", ".join(t) for t in distinct)
        return f"{self.label} on {len(self.outcomes)} case(s) ({', '.join(checks)}{where})"

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        first = (worst.mismatches[0].describe() if worst.mismatches else worst.message).splitlines()
        return {"kind": self.kind, "label": self.label, "n": len(self.outcomes), "tags": list(self.tags),
                "checks": sorted({o.kind for o in self.outcomes}), "headline": self.headline(),
                "detail": first[0] if first else "", "case": _describe(worst), "reproduce": worst.repro()}


def _describe(outcome: Outcome) -> str:
    where = f"golden vector {outcome.case.note}" if outcome.kind == "golden" else f"{outcome.kind}, seed {outcome.case.seed}"
    return f"{where}, {outcome.dtype}" + (f", {_fmt_kwargs(outcome.kwargs)}" if outcome.kwargs else "")


_EXCEPTION = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))\b")


def _nature(value: float) -> str:
    return "NaN" if math.isnan(value) else "inf" if math.isinf(value) else "off"


def _signature(kind: str, outcome: Outcome) -> str:
    """What a failing outcome's mode is: the exception type for an error, the check for a broken invariant
    or preset check, the message for a broken contract, else which outputs miss and how."""
    if kind == "outside":
        return f"outside: {_signature('error', outcome) if outcome.status == 'error' else _signature('fail', outcome)}"
    if kind == "error":  # "ValueError", "gradient: ValueError", "clean inputs: ValueError: ..."
        found = _EXCEPTION.search(outcome.message)
        return f"raises {found.group(1)}" if found else "raises"
    if kind == "contract":
        return f"calling contract: {outcome.message}"
    parts = [f"{m.what} {_nature(m.actual_at)}" + ("" if _nature(m.expected_at) == "off" else f" (expected {_nature(m.expected_at)})")
             for m in outcome.mismatches]
    label = ", ".join(parts) or "differs"
    return f"{outcome.kind}: {label}" if kind in ("invariant", "preset") else label


def failure_modes(groups: list[tuple[str, list[Outcome]]]) -> list[FailureMode]:
    """The distinct failure modes of a row's failing outcomes, per kind in the order given, each kind's
    modes by their number of cases (most first)."""
    modes: list[FailureMode] = []
    for kind, outcomes in groups:
        by: dict[str, list[Outcome]] = {}
        for o in outcomes:
            by.setdefault(_signature(kind, o), []).append(o)
        modes += sorted((FailureMode(kind, label, members) for label, members in by.items()),
                        key=lambda m: -len(m.outcomes))
    return modes


def _fmt_kwargs(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


__all__ = ["FailureMode", "failure_modes"]
