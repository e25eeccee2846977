"""The conformance run: every check of every selected quantity against one adapter, with variant
fingerprinting when a check fails.

One *row* is (quantity, adapter). Its checks:
- `property`: seeded realistic cases, every dtype the adapter supports, only the keywords that the
  record's `question` names (everything else at the canonical default);
- `golden`: the published golden vectors of the function;
- `invariant:mask`: the property cases with NaN / +-inf / 1e30 at positions that must not matter give
  the same outputs and gradients as the clean cases (metamorphic: the adapter against itself);
- `invariant:on_policy`: old and reference log-probs equal to the current ones;
- `invariant:partition`: micro-batches called with global counts sum to the whole batch (metamorphic);
- `invariant:detached`: no gradient reaches the inputs the spec makes constants (torch adapters);
- `preset:<name>`: for adapters that accept every spec keyword (`accepts_variants = True`), the
  property cases under each preset's keywords.
The metamorphic checks are in `conformance.invariants`. A row whose oracle-compared checks fail (and
whose metamorphic checks pass) is then fingerprinted: the oracle is re-run under every preset and
variant keyword set of the record; if one explains every failing case, the row reports it. A row
whose only failures are preset checks is a FAIL (the adapter computes the canonical quantity but not
a preset's keywords). `check_row` keeps the failing trials on `RowResult.evidence` for
`conformance.diagnosis`, which names the known bugs consistent with them.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from conformance import cases
from conformance.differential import Outcome, run_case
from conformance.invariants import METAMORPHIC
from conformance.registry import QuantityInfo

STATUSES = ("pass", "preset", "fail", "error", "not_implemented")


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
    max_rel_err: float = 0.0
    message: str = ""
    consistent_with: list[str] = field(default_factory=list)
    checks: dict[str, str] = field(default_factory=dict)
    n_cases: int = 0
    seeds: list[int] = field(default_factory=list)
    seconds: float = 0.0

    # Not a dataclass field (never serialised): the (trial, outcome) pairs that failed or raised,
    # set by `check_row`, for `conformance.diagnosis`.
    evidence = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RowResult:
        """The row `to_json` wrote (non-finite errors come back as inf)."""
        known = {f.name for f in fields(cls)}
        row = cls(**{k: v for k, v in data.items() if k in known})
        row.max_abs_err = float("inf") if row.max_abs_err is None else row.max_abs_err
        row.max_rel_err = float("inf") if row.max_rel_err is None else row.max_rel_err
        return row

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["max_abs_err"] = _finite_or_none(self.max_abs_err)
        out["max_rel_err"] = _finite_or_none(self.max_rel_err)
        return out


def _finite_or_none(x: float) -> float | None:
    return x if x == x and abs(x) != float("inf") else None


def seeds_for(function: str, base_seed: int, n: int) -> list[int]:
    """Deterministic per-function seeds (the run's `--seed` shifts them all)."""
    start = zlib.crc32(function.encode()) + 7919 * base_seed
    return [(start + 104729 * i) % 2**32 for i in range(n)]


def _dtypes(record: QuantityInfo, adapter: Any) -> list[str]:
    default = ("float64", "float32", "bfloat16") if adapter.array_api == "torch" else ("float64", "float32")
    supported = getattr(adapter, "dtypes", default)
    return [d for d in record.dtypes if d in supported]


@dataclass
class _Trial:
    """One comparison to run, and how to re-run it with different oracle keywords."""

    kind: str
    case: cases.Case
    dtype: str
    adapter_kwargs: dict[str, Any]

    def describe(self) -> str:
        """'property check, seed 123, float32' / 'golden vector gae/multi-turn-gap' (crash reports)."""
        where = f"golden vector {self.case.note}" if self.kind == "golden" else f"{self.kind} check, seed {self.case.seed}"
        return f"{where}, {self.dtype}" + (f", {_fmt_kwargs(self.adapter_kwargs)}" if self.adapter_kwargs else "")

    @property
    def metamorphic(self) -> bool:
        return self.kind in METAMORPHIC

    def run(self, record: QuantityInfo, adapter: Any, oracle_override: dict[str, Any] | None = None) -> Outcome:
        if self.kind in METAMORPHIC:  # the adapter against itself: no oracle keywords to override
            return METAMORPHIC[self.kind](record, adapter, self.case, self.dtype, self.adapter_kwargs)
        okw = dict(self.adapter_kwargs)
        if oracle_override is not None:
            okw.update(oracle_override)
        return run_case(record, adapter, self.case, self.dtype, self.adapter_kwargs, okw)


def _trials(record: QuantityInfo, adapter: Any, seeds: list[int], golden: Iterable[cases.Case]) -> list[_Trial]:
    trials: list[_Trial] = []
    dtypes = _dtypes(record, adapter)
    for seed in seeds:
        case = cases.make_case(record.function, seed)
        question = record.question_kwargs(case.kwargs)
        for dtype in dtypes:
            trials.append(_Trial("property", case, dtype, question))
        if "mask" in record.invariants and "mask" in case.args:
            trials.append(_Trial("invariant:mask", case, dtypes[0], question))
        if "on_policy" in record.invariants:
            trials.append(_Trial("invariant:on_policy", cases.on_policy(case), dtypes[0], question))
        if "partition" in record.invariants:
            trials.append(_Trial("invariant:partition", case, dtypes[0], question))
        if record.stop_grad_args and adapter.array_api == "torch":
            trials.append(_Trial("invariant:detached", case, dtypes[0], question))
    for case in golden:
        trials.append(_Trial("golden", case, "float64", record.question_kwargs(case.kwargs)))
    return trials


def check_row(
    record: QuantityInfo,
    adapter: Any,
    *,
    seeds: list[int],
    golden: Iterable[cases.Case] = (),
    ref: str | None = None,
    on_trial: Callable[[str], None] | None = None,
) -> RowResult:
    """Run every check of `record` against `adapter` and fingerprint a failure. `ref` is how the
    user named the adapter (reproduce lines use it; default its `name`); `on_trial(description)` is
    called before each trial."""
    row = RowResult(
        id=f"{record.function}@{adapter.name}",
        spec_id=record.spec_id,
        function=record.function,
        adapter=adapter.name,
        status="pass",
        seeds=list(seeds),
    )
    if getattr(adapter, record.function, None) is None:
        row.status = "not_implemented"
        row.message = f"{record.function} is not implemented by adapter {adapter.name!r}"
        return row

    trials = _trials(record, adapter, seeds, golden)
    outcomes = []
    for t in trials:
        if on_trial is not None:
            on_trial(t.describe())
        outcomes.append((t, t.run(record, adapter)))
    outcomes = [(t, o) for t, o in outcomes if o.status not in ("ill_conditioned", "unsupported")]
    if getattr(adapter, "accepts_variants", False):
        for name in record.presets:
            for seed in seeds:
                case = cases.make_case(record.function, seed)
                kw = record.preset_kwargs(name, case.kwargs)
                trial = _Trial(f"preset:{name}", case, "float32" if "float32" in _dtypes(record, adapter) else "float64", kw)
                try:
                    o = trial.run(record, adapter)
                except ValueError:  # the case's own keywords and the preset's make an invalid set
                    continue  # (e.g. bound="absolute" with verl's relative CISPO eps): not a question
                if o.status not in ("ill_conditioned", "unsupported"):
                    outcomes.append((trial, o))
    row.n_cases = len(outcomes)
    for trial, o in outcomes:
        row.max_abs_err = max(row.max_abs_err, o.max_abs)
        row.max_rel_err = max(row.max_rel_err, o.max_rel)
        previous = row.checks.get(trial.kind, "pass")
        row.checks[trial.kind] = previous if previous != "pass" else o.status

    row.evidence = tuple((t, o) for t, o in outcomes if o.status in ("fail", "error"))
    errors = [o for _, o in outcomes if o.status == "error"]
    if errors:
        row.status = "error"
        row.message = errors[0].report()
        return row
    failing = [(t, o) for t, o in outcomes if o.status == "fail"]
    if not failing:
        return row
    canonical = [t for t, _ in outcomes if not t.kind.startswith("preset:")]
    failing_canonical = [t for t, _ in failing if not t.kind.startswith("preset:")]
    if not failing_canonical or any(t.metamorphic for t in failing_canonical):
        # only preset checks fail (no variant of the canonical quantity can explain that), or a
        # metamorphic property is broken (no keyword set of the oracle can explain that either)
        row.status = "fail"
        row.message = failing[0][1].report()
        return row
    comparable = [t for t in canonical if not t.metamorphic]
    matched = fingerprint(record, adapter, comparable)
    if matched is not None:
        names, kwargs = matched
        row.status = "preset"
        row.matched_preset = ", ".join(names) if names else None
        row.matched_kwargs = kwargs
        label = f"preset {row.matched_preset}" if names else "variant"
        row.message = f"matches {label} ({_fmt_kwargs(kwargs)}), not canonical"
        return row
    passed = {id(t) for t, o in outcomes if o.status == "pass"}
    split = fingerprint_by_question(record, adapter, comparable, passed)
    if split is not None:
        key, found = split
        names = sorted({n for ns, _ in found.values() for n in ns})
        row.status = "preset"
        row.matched_preset = ", ".join(names) if names else None
        row.matched_kwargs = {f"{key}={value}": kw for value, (_, kw) in found.items()}
        parts = [
            f"{key}={value}: {('preset ' + ', '.join(ns)) if ns else 'variant'} ({_fmt_kwargs(kw)})"
            for value, (ns, kw) in found.items()
        ]
        row.message = "matches " + "; ".join(parts) + f"; canonical for every other {key}"
        return row
    row.status = "fail"
    row.message = failing[0][1].report()
    return row


def fingerprint(record: QuantityInfo, adapter: Any, trials: list[_Trial]) -> tuple[list[str], dict[str, Any]] | None:
    """The first variant keyword set under which every canonical trial passes, with the names of
    the presets that use exactly those keywords."""
    seen: list[dict[str, Any]] = []
    for variant in record.variant_kwargs():
        if not variant or variant in seen:
            continue
        seen.append(variant)
        if all(_passes(t, record, adapter, variant) for t in trials):
            names = [n for n, kw in record.presets.items() if kw == variant]
            return names, variant
    return None


def fingerprint_by_question(
    record: QuantityInfo, adapter: Any, trials: list[_Trial], passed: set[int]
) -> tuple[str, dict[str, tuple[list[str], dict[str, Any]]]] | None:
    """When no single variant explains every trial, split the trials by the value of one question
    keyword (e.g. `estimator`: verl clamps only its k3) and fingerprint each failing group alone;
    groups whose trials all pass canonically need no variant."""
    for key in record.question:
        groups: dict[str, list[_Trial]] = {}
        for t in trials:
            groups.setdefault(repr(t.adapter_kwargs.get(key)), []).append(t)
        if len(groups) < 2:
            continue
        found: dict[str, tuple[list[str], dict[str, Any]]] = {}
        for value, members in groups.items():
            if all(id(t) in passed for t in members):
                continue
            matched = fingerprint(record, adapter, members)
            if matched is None:
                break
            found[value] = matched
        else:
            if found:
                return key, found
    return None


def _passes(trial: _Trial, record: QuantityInfo, adapter: Any, variant: dict[str, Any]) -> bool:
    try:
        return trial.run(record, adapter, variant).status in ("pass", "ill_conditioned", "unsupported")
    except ValueError:  # the variant is not a valid keyword set for this case
        return False


def _fmt_kwargs(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def run_with_timeout(fn: Callable[[], RowResult], timeout: float, on_timeout: Callable[[], RowResult]) -> RowResult:
    """Run one row in a daemon thread; a row that outlives `timeout` seconds becomes an error row
    (the thread is abandoned, the run goes on)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["row"] = fn()
        except BaseException as exc:  # noqa: BLE001 - any adapter failure becomes an error row
            box["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return on_timeout()
    if "exc" in box:
        row = on_timeout()
        row.message = f"{type(box['exc']).__name__}: {box['exc']}"
        return row
    return box["row"]
