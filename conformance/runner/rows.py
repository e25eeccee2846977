"""What a row of a report says: the verdict vocabulary (`STATUSES`), one row's result (`RowResult`) and
the deterministic per-row seeds."""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

STATUSES = {
    "pass": "the canonical quantity, at the precision reported beside it",
    "preset": "a named framework preset of the quantity (matched_preset, matched_kwargs)",
    "variant": "a keyword set of the quantity that no preset uses (matched_kwargs)",
    "fail": "a semantic difference no preset or variant explains, a broken invariant or a broken calling contract",
    "error": "the adapter raised (or crashed, or timed out) on a case it implements",
    "not_implemented": "the adapter lacks the function or raises NotImplementedError on every case",
}

# What a verdict rests on: the checks of a row counted by family (`RowResult.counts`). A pass, preset or
# variant resting on fewer than MIN_COMPARED oracle-compared cases (property, golden and preset checks
# together), or on no property case at all, is *thin* (docs/checking.md, "What a verdict rests on").
CASE_FAMILIES = ("property", "golden", "invariant", "preset")
MIN_COMPARED = 8


def case_family(kind: str) -> str:
    """The family of a check kind: "property", "golden", "invariant:mask" -> "invariant", "preset:verl" -> "preset"."""
    return kind.split(":", 1)[0]


def is_thin(counts: dict[str, int]) -> bool:
    """Whether a verdict resting on these case counts is thin (see MIN_COMPARED)."""
    compared = counts.get("property", 0) + counts.get("golden", 0) + counts.get("preset", 0)
    return counts.get("property", 0) == 0 or compared < MIN_COMPARED


@dataclass
class RowResult:
    """The verdict for one (quantity, adapter) row, as the reports print it."""

    id: str
    spec_id: str
    function: str
    adapter: str
    status: str
    matched_preset: str | None = None
    matched_kwargs: dict[str, Any] | None = None
    max_abs_err: float = 0.0
    max_rel_err: float = float("nan")
    message: str = ""
    consistent_with: list[str] = field(default_factory=list)
    # weaker hints: mutants whose failure pattern alone fits (outputs not reproduced); shown by --explain
    pattern_hints: list[str] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)
    n_cases: int = 0
    # the cases the verdict rests on, per family (CASE_FAMILIES); empty for a row built by hand
    counts: dict[str, int] = field(default_factory=dict)
    thin: bool = False  # a pass / preset / variant resting on too few cases (is_thin)
    # what the verdict does not say but a reader should know (e.g. "no gradient offered: ...")
    notes: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0
    # per input dtype, the finest precision class (PRECISIONS or BELOW) every output meets
    precision: dict[str, str] = field(default_factory=dict)
    # one entry per input dtype whose precision is coarser than the dtype's own class
    precision_findings: list[dict[str, Any]] = field(default_factory=list)
    # the keyword values the adapter does not offer ("scale='batch'"): not checked, rest of the row is
    not_implemented_cases: list[str] = field(default_factory=list)
    reproduce: str = ""  # re-runs the comparison the message shows (fail and error rows)
    # every distinct failure mode of the row (conformance.runner.verdict.FailureMode.to_json), the one the
    # message shows first; cases that raised ("error" modes) beside a semantic verdict are listed here too
    failures: list[dict[str, Any]] = field(default_factory=list)

    # Not a dataclass field (never serialised): the (trial, outcome) pairs whose values or gradients
    # missed at the row's precision, set by `check_row`, for `conformance.runner.diagnosis`.
    evidence = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RowResult:
        """The row `to_json` wrote (non-finite errors come back as inf, or NaN for a relative error
        that means nothing)."""
        known = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in known})
        row.max_abs_err = float("inf") if row.max_abs_err is None else row.max_abs_err
        row.max_rel_err = float("nan") if row.max_rel_err is None else row.max_rel_err
        return row

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["max_abs_err"] = finite_or_none(self.max_abs_err)
        out["max_rel_err"] = finite_or_none(self.max_rel_err)
        return out


def match_status(preset: str | None) -> str:
    """The status of a row explained by a non-canonical keyword set: "preset" when a named preset
    uses it, "variant" otherwise."""
    return "preset" if preset else "variant"


def finite_or_none(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def seeds_for(function: str, base_seed: int, n: int) -> list[int]:
    """Deterministic per-function seeds (the run's `--seed` shifts them all)."""
    start = zlib.crc32(function.encode()) + 7919 * base_seed
    return [(start + 104729 * i) % 2**32 for i in range(n)]


class _Named(Protocol):
    name: str


def _name(adapter: str | _Named) -> str:
    return adapter if isinstance(adapter, str) else adapter.name


def error_row(row_id: str, spec_id: str, function: str, adapter: str | _Named, message: str, seeds: list[int] | None = None) -> RowResult:
    """The row of a check that could not complete (a timeout, a crash, an adapter that cannot be loaded);
    `adapter` is the adapter or its name."""
    return RowResult(id=row_id, spec_id=spec_id, function=function, adapter=_name(adapter), status="error",
                     seeds=list(seeds or []), message=message)


def not_implemented_row(row_id: str, spec_id: str, function: str, adapter: str | _Named, message: str) -> RowResult:
    """A row the adapter (or its name) does not offer, saying why."""
    return RowResult(id=row_id, spec_id=spec_id, function=function, adapter=_name(adapter), status="not_implemented",
                     message=message)


__all__ = ["STATUSES", "CASE_FAMILIES", "MIN_COMPARED", "case_family", "is_thin", "RowResult", "match_status", "finite_or_none", "seeds_for", "error_row", "not_implemented_row"]
