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
The metamorphic checks are in `conformance.runner.invariants`.

Semantics and precision are judged apart. The adapter is called once per case; each oracle-compared
outcome records the finest precision class its outputs meet (float64, float32, bfloat16 or below
bfloat16: the tolerance classes of `conformance.tolerances`). The row's semantics is the oracle
keyword set (canonical, a preset, a variant of the record's grid, or one per value of a question
keyword) that explains every case with float64/float32 inputs at bfloat16 precision or finer, with
the least precision deficit; the precision each input dtype then meets is reported beside the
verdict, and a class coarser than the dtype's own is a *precision finding*, not a FAIL (so a float32
framework handed float64 is still matched to its preset, and a bfloat16 softmax is a precision
finding). The metamorphic and preset checks are judged at that precision. `strict_precision` judges
every case at its own dtype's class. A row that nothing explains is a FAIL showing its worst case.
Cases the adapter does not offer (`NotImplementedError`, `unsupported_kwargs`) are listed and left
out; the rest of the row is checked. `check_row` keeps the trials whose values or gradients missed
on `RowResult.evidence` for `conformance.runner.diagnosis`, which names the known bugs consistent with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance.records import Quantity, cases
from conformance.records.tags import case_tags
from conformance.runner.differential import BELOW, RANK, Outcome, coarser, precision_label, rejudge, run_case
from conformance.runner.failures import failure_modes
from conformance.runner.invariants import METAMORPHIC
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.runner.rows import CASE_FAMILIES, RowResult, case_family, finite_or_none, is_thin, match_status

def _dtypes(record: Quantity, adapter: LoadedAdapter) -> list[str]:
    return [d for d in record.dtypes if d in adapter.dtypes_for(record.function)]


@dataclass(eq=False)
class Trial:
    """One comparison to run. `oracle_kwargs` are the keywords only the oracle is given (a
    framework row's pinned keywords); the adapter gets `adapter_kwargs`. `outcome` is the canonical
    result once run: fingerprinting re-judges it (`differential.rejudge`) without calling the
    adapter again."""

    kind: str
    case: cases.Case
    dtype: str
    adapter_kwargs: dict[str, Any]
    oracle_kwargs: dict[str, Any] = field(default_factory=dict)
    outcome: Outcome | None = None

    def describe(self) -> str:
        """'property check, seed 123, float32' / 'golden vector gae/multi-turn-gap' (crash reports)."""
        where = f"golden vector {self.case.note}" if self.kind == "golden" else f"{self.kind} check, seed {self.case.seed}"
        return f"{where}, {self.dtype}" + (f", {_fmt_kwargs(self.adapter_kwargs)}" if self.adapter_kwargs else "")

    @property
    def metamorphic(self) -> bool:
        return self.kind in METAMORPHIC

    def run(self, record: Quantity, adapter: LoadedAdapter, *, ref: str | None = None,
            tol_class: str | None = None) -> Outcome:
        """Call the adapter; oracle-compared checks are judged at `tol_class` (default the dtype's)."""
        if self.kind in METAMORPHIC:  # the adapter against itself: no oracle keywords
            out = METAMORPHIC[self.kind](record, adapter, self.case, self.dtype, self.adapter_kwargs, tol_class)
            out.ref = ref
            return out
        return run_case(record, adapter, self.case, self.dtype, self.adapter_kwargs, self.oracle_base(),
                        kind=self.kind, ref=ref, judged_at=tol_class)

    def oracle_base(self) -> dict[str, Any]:
        return {**self.adapter_kwargs, **self.oracle_kwargs}

    def judged(self, variant: dict[str, Any], klass: str | None = None) -> Outcome:
        """The canonical call judged against the oracle under `variant` at class `klass`."""
        assert self.outcome is not None
        if not variant and klass in (None, self.outcome.judged_at or self.dtype):
            return self.outcome
        return rejudge(self.outcome, {**self.oracle_base(), **variant}, klass)


def _trials(record: Quantity, adapter: LoadedAdapter, seeds: list[int], golden: Iterable[cases.Case],
            fixed: dict[str, Any]) -> list[Trial]:
    trials: list[Trial] = []
    dtypes = _dtypes(record, adapter)

    def trial(kind: str, case: cases.Case, dtype: str) -> Trial:
        if fixed:  # a copy: golden cases are shared (cached) objects, never edited in place
            case = dataclasses.replace(case, kwargs={**case.kwargs, **fixed})
        question = record.question_kwargs(case.kwargs)
        return Trial(kind, case, dtype, question, {k: v for k, v in fixed.items() if k not in question})

    for seed in seeds:
        case = record.make_case(seed)
        for dtype in dtypes:
            trials.append(trial("property", case, dtype))
        if "mask" in record.invariants and "mask" in case.args:
            trials.append(trial("invariant:mask", case, dtypes[0]))
        if "on_policy" in record.invariants:
            trials.append(trial("invariant:on_policy", cases.on_policy(case), dtypes[0]))
        if "partition" in record.invariants:
            trials.append(trial("invariant:partition", case, dtypes[0]))
        if record.stop_grad_args and adapter.array_api == "torch":
            trials.append(trial("invariant:detached", case, dtypes[0]))
    for case in alone_cases(record, seeds):
        for dtype in dtypes:
            trials.append(trial("property", case, dtype))
    for case in golden:
        trials.append(trial("golden", case, "float64" if "float64" in dtypes else dtypes[0]))
    if adapter.accepts_variants:
        for name in record.presets:
            for seed in seeds:
                case = record.make_case(seed)
                kw = record.preset_kwargs(name, case.kwargs)
                trials.append(Trial(f"preset:{name}", case, "float32" if "float32" in dtypes else dtypes[0], kw))
    return trials


def _golden_under_presets(record: Quantity, golden: list[cases.Case], names: list[str], dtypes: list[str]) -> list[Trial]:
    """Every golden vector with each named preset's keywords on top of its own (the adapter and the oracle
    both get them): the golden checks of an adapter that offers only its presets' forms."""
    dtype = "float64" if "float64" in dtypes else dtypes[0]
    out = []
    for name in names:
        for case in golden:
            kw = {**record.question_kwargs(case.kwargs), **record.required_kwargs(case.kwargs), **record.presets[name]}
            out.append(Trial("golden", case, dtype, kw))
    return out


def alone_cases(record: Quantity, seeds: list[int]) -> list[cases.Case]:
    """Property cases that vary one question keyword at a time from the canonical defaults (the seeded
    cases vary them all together): one with every question keyword at its default, then one per question
    keyword with only that one drawn, each on the inputs of the next seed. A keyword left out is not
    passed at all (the adapter's default is the canonical one), so an adapter offering only some keywords,
    or none, still gets cases. Keywords without a default (`mode`, `norm_length`) are always passed."""
    if not record.question or not seeds:
        return []
    out: list[cases.Case] = []
    for i, key in enumerate((None, *record.question)):
        base = record.make_case(seeds[i % len(seeds)])
        required = record.required_kwargs(base.kwargs)
        if key is not None and (key in required or key not in base.kwargs
                                or base.kwargs[key] == record.keyword(key).default):
            continue  # passed in every case anyway, or drawn at its default: the canonical case covers it
        kept = {k: v for k, v in base.kwargs.items() if k not in record.question or k in required or k == key}
        if any(record.question_kwargs(c.kwargs) == record.question_kwargs(kept) for c in out):
            continue
        out.append(dataclasses.replace(base, kwargs=kept))
    return out


@dataclass
class _Explanation:
    """A keyword set of the oracle ({} = canonical) that explains a row's oracle-compared trials,
    and the precision each input dtype's outputs then meet."""

    variant: dict[str, Any]
    precision: dict[str, str]
    score: tuple[int, int]


def _deficit(trial: Trial, outcome: Outcome) -> int:
    """How many precision classes the outcome is coarser than its input dtype's (0 when it meets
    the dtype's class or finer, or compared nothing: an ill-conditioned case under this variant)."""
    if outcome.status not in ("pass", "fail") or outcome.precision is None:
        return 0
    return max(0, RANK[outcome.precision] - RANK[trial.dtype])


def _precision_by_dtype(trials: list[Trial], outcomes: list[Outcome]) -> dict[str, str]:
    """Per input dtype, the coarsest class its outcomes meet."""
    out: dict[str, str] = {}
    for t, o in zip(trials, outcomes):
        if o.status in ("pass", "fail") and o.precision is not None:
            out[t.dtype] = coarser(out.get(t.dtype, "float64"), o.precision)
    return out


def _explain(trials: list[Trial], candidates: list[dict[str, Any]], strict: bool) -> _Explanation | None:
    """The candidate under which the trials are explained at the finest precision.

    Semantics are decided by the trials with float64/float32 inputs (all trials if there are no
    others): a candidate explains the row when each of them meets at least the bfloat16 class, so a
    framework computing in float32 is still matched to its preset. Among those, the one with the
    least precision deficit wins (ties: the earlier candidate, canonical first). `strict` asks every
    trial to meet its own dtype's class (rlspec check --strict-precision)."""
    decisive = [t for t in trials if t.dtype != "bfloat16"] or trials
    best: _Explanation | None = None
    for variant in candidates:
        try:
            outcomes = [t.judged(variant) for t in trials]
        except ValueError:  # not a valid keyword set for some case (the oracle says why): no explanation
            continue
        deficits = [_deficit(t, o) for t, o in zip(trials, outcomes)]
        if strict:
            explains = not any(deficits)
        else:
            explains = all(o.precision != BELOW for t, o in zip(trials, outcomes) if t in decisive and o.status in ("pass", "fail"))
        if not explains:
            continue
        low = sum(d for t, d in zip(trials, deficits) if t not in decisive)
        score = (sum(d for t, d in zip(trials, deficits) if t in decisive), low)
        if best is None or score < best.score:
            best = _Explanation(dict(variant), _precision_by_dtype(trials, outcomes), score)
        if score == (0, 0):
            break
    return best


def _candidates(record: Quantity, fixed: dict[str, Any], prefer: str | None) -> list[dict[str, Any]]:
    """Canonical, then the preferred presets (a framework row's own: its pinned version's, then every other
    version's it was read for), then every preset and variant keyword set of the record that does not
    contradict the pinned keywords."""
    out: list[dict[str, Any]] = [{}]
    first = [kw for name, kw in record.presets.items() if prefer and (name == prefer or name.startswith(f"{prefer}@"))]
    for variant in [*first, *record.variant_kwargs()]:
        if variant and variant not in out and not any(k in fixed and fixed[k] != v for k, v in variant.items()):
            out.append(variant)
    return out


def _explain_by_question(record: Quantity, trials: list[Trial], candidates: list[dict[str, Any]],
                         strict: bool) -> tuple[str, dict[str, _Explanation]] | None:
    """When no single keyword set explains every trial, split the trials by the value of one
    question keyword (e.g. `estimator`: verl clamps only its k3) and explain each group alone."""
    for key in record.question:
        groups: dict[str, list[Trial]] = {}
        for t in trials:
            groups.setdefault(repr(t.adapter_kwargs.get(key)), []).append(t)
        if len(groups) < 2:
            continue
        found: dict[str, _Explanation] = {}
        for value, members in groups.items():
            explanation = _explain(members, candidates, strict)
            if explanation is None:
                break
            found[value] = explanation
        else:
            if any(e.variant for e in found.values()):
                return key, found
    return None


def _names_of(record: Quantity, variant: dict[str, Any]) -> list[str]:
    return [n for n, kw in record.presets.items() if kw == variant]


def check_row(
    record: Quantity,
    adapter: Adapter,
    *,
    seeds: list[int],
    golden: Iterable[cases.Case] = (),
    ref: str | None = None,
    on_trial: Callable[[str], None] | None = None,
    strict_precision: bool = False,
    fixed: dict[str, Any] | None = None,
    prefer: str | None = None,
    skip: Callable[[cases.Case], str | None] | None = None,
    row_id: str | None = None,
) -> RowResult:
    """Run every check of `record` against `adapter`; decide its semantics (canonical, a preset, a
    variant, or FAIL) at the precision its outputs meet, and report that precision apart.

    `ref`: how the user named the adapter (reproduce lines; default its `name`). `on_trial`: called
    with a description before each adapter call. `strict_precision`: judge every case at its input
    dtype's class (a precision finding becomes a FAIL). For a framework's own rows: `fixed` keywords
    are pinned in every case (the adapter is asked only the question ones, the oracle all of them),
    `prefer` names the preset fingerprinting tries first, `skip(case)` may name a reason to leave a
    case out, `row_id` names the row."""
    adapter = LoadedAdapter.of(adapter)
    fixed = dict(fixed or {})
    row = RowResult(
        id=row_id or f"{record.function}@{adapter.name}",
        spec_id=record.spec_id,
        function=record.function,
        adapter=adapter.name,
        status="pass",
        seeds=list(seeds),
    )
    if adapter.function(record.function) is None:
        row.status = "not_implemented"
        row.message = f"{record.function} is not implemented by adapter {adapter.name!r}"
        return row
    if not _dtypes(record, adapter):
        row.status = "not_implemented"
        row.message = f"adapter dtypes {adapter.dtypes_for(record.function)} share none with {record.function}'s {record.dtypes}"
        return row
    golden_list = list(golden)
    trials = _trials(record, adapter, seeds, golden_list, fixed)
    skipped: list[str] = []
    if skip is not None:
        reasons = [(t, skip(t.case)) for t in trials]
        skipped = [f"{t.kind} seed {t.case.seed}: {r}" for t, r in reasons if r]
        trials = [t for t, r in reasons if not r]
    # cases with an input feature the framework declares it never receives (`domain`): run all the same (the
    # same vector on every framework), judged after the verdict, their divergences notes beside it
    declared = bool(adapter.domain.get(record.function))
    outside = [t for t in trials if declared and adapter.outside(record.function, case_tags(t.case.args))]
    trials = [t for t in trials if t not in outside]

    # 1. call the adapter once per oracle-compared case
    compared = _call(record, adapter, [t for t in trials if not t.metamorphic], ref, on_trial)
    absent = [t for t in compared if t.outcome.status == "not_implemented"]
    compared = [t for t in compared if t not in absent]
    row.not_implemented_cases = sorted({t.outcome.absent for t in absent})
    # an exception or a broken contract decides the status, but every check still runs: the
    # failure pattern of the row (`checks`) is what `conformance.runner.diagnosis` matches bugs against
    errors = [t.outcome for t in compared if t.outcome.status == "error"]
    broken = [t.outcome for t in compared if t.outcome.contract]
    for t in compared:
        if t.outcome.status == "error" or t.outcome.contract:
            row.checks[t.kind] = _worse(row.checks.get(t.kind, "pass"), t.outcome.status)
    compared = [t for t in compared if t.outcome.status != "error" and not t.outcome.contract]
    if absent and not compared and not errors and not broken:
        row.status = "not_implemented"
        refused = sorted({t.outcome.absent for t in absent})
        row.message = (f"{record.function} raises NotImplementedError (or is declared unsupported) for every case; "
                       f"refused: {'; '.join(refused[:6])}" + (f"; and {len(refused) - 6} more" if len(refused) > 6 else ""))
        row.not_implemented_cases = []
        return row
    semantic = [t for t in compared if not t.kind.startswith("preset:")]
    preset_checks = [t for t in compared if t.kind.startswith("preset:")]
    metamorphic = [t for t in trials if t.metamorphic]
    if not semantic and preset_checks and absent:
        # the canonical form is not offered, only the presets' (e.g. GSPO's token form): a variant never
        # hides a canonical failure, so every golden vector runs under each preset the adapter answered
        names = sorted({t.kind.split(":", 1)[1] for t in preset_checks})
        under = _call(record, adapter, _golden_under_presets(record, golden_list, names, _dtypes(record, adapter)),
                      ref, on_trial, skip_invalid=True)
        under = [t for t in under if t.outcome.status != "not_implemented"]
        errors += [t.outcome for t in under if t.outcome.status == "error"]
        broken += [t.outcome for t in under if t.outcome.contract]
        semantic = [t for t in under if t.outcome.status != "error" and not t.outcome.contract]
        row.notes.append(f"canonical form not offered: every case without a preset's keywords was refused, so the "
                         f"row is judged under preset(s) {', '.join(names)} (their checks, and every golden vector "
                         "run with their keywords)")

    # 2. the semantics, and the precision it is met at
    sem = _semantics(record, semantic, _candidates(record, fixed, prefer), strict_precision)
    row.precision = dict(sorted(sem.measured.items(), key=lambda kv: RANK[kv[0]]))
    canonical = [(t, t.judged({}, sem.klass(t))) for t in semantic]
    for t, o in canonical:
        status = "pass" if sem.klass(t) == BELOW and sem.explained else o.status
        row.checks[t.kind] = _worse(row.checks.get(t.kind, "pass"), status)

    # 3. the invariants and preset checks, judged at that precision
    for t in metamorphic:
        if on_trial is not None:
            on_trial(t.describe())
        t.outcome = t.run(record, adapter, ref=ref, tol_class=sem.klass(t))
        if t.outcome.status not in ("ill_conditioned", "unsupported"):
            row.checks[t.kind] = _worse(row.checks.get(t.kind, "pass"), t.outcome.status)
    broken_invariants = [t.outcome for t in metamorphic if t.outcome.status in ("fail", "error")]
    preset_judged = [(t, t.judged({}, sem.klass(t))) for t in preset_checks]
    for t, o in preset_judged:
        row.checks[t.kind] = _worse(row.checks.get(t.kind, "pass"), o.status)
        if o.status == "fail":
            o.message = "\n".join(x for x in (o.message, preset_diff(record, t, sem.klass(t))) if x)

    # evidence of a bug: what misses at the precision the adapter meets (never a rounding difference,
    # even when --strict-precision judged the row at the input dtype's class)
    at_measured = [(t, t.judged({}, coarser(sem.measured.get(t.dtype, t.dtype), t.dtype))) for t in semantic]
    row.evidence = tuple(
        [(t, o) for t, o in at_measured if o.status == "fail" and o.tol_class != BELOW]
        + [(t, t.outcome) for t in metamorphic if t.outcome.status == "fail"]
        + [(t, o) for t, o in preset_judged if o.status == "fail"]
    )
    everything = ([t.judged(sem.variant_of[id(t)], sem.klass(t)) for t in semantic]
                  + [o for _, o in preset_judged] + [t.outcome for t in metamorphic])
    ran = [o for o in everything if o.status not in ("ill_conditioned", "unsupported", "not_implemented")]
    row.n_cases = len(ran)
    row.counts = {family: sum(case_family(o.kind) == family for o in ran) for family in CASE_FAMILIES}
    if record.grad_args and not adapter.grad_for(record.function):
        row.notes.append("no gradient offered: values only (supports_grad is False"
                         + (f" for {record.function})" if record.function in adapter.function_grad else ")"))
    row.max_abs_err = max([row.max_abs_err] + [o.max_abs for o in everything])
    rels = [o.max_rel for o in everything if o.max_rel == o.max_rel]
    row.max_rel_err = max(rels) if rels else float("nan")

    _judge_outside(record, adapter, outside, sem, row, ref, on_trial)

    # 4. every failure mode of the row (`failure_modes`), most specific cause first: a broken calling
    # contract, a broken invariant (no keyword set of the oracle can explain one), the oracle comparisons
    # nothing explains, the preset checks; the cases that raised are their own modes, beside the verdict
    errors += [o for o in broken_invariants if o.status == "error"]
    unexplained = [] if sem.explained else [o for _, o in canonical if o.status == "fail"]
    semantic_modes = failure_modes([
        ("contract", broken),
        ("invariant", [o for o in broken_invariants if o.status == "fail"]),
        ("fail", unexplained),
        ("preset", [o for _, o in preset_judged if o.status == "fail"]),  # a variant, but not a preset's keywords
    ])
    error_modes = failure_modes([("error", errors)])
    row.failures = [m.to_json() for m in semantic_modes + error_modes] + row.failures  # the domain's notes last
    if semantic_modes:
        return _finish(row, skipped, "fail", semantic_modes[0].worst.report(), semantic_modes[0].worst)
    if error_modes and not semantic:  # every case that compared anything raised: nothing to judge
        return _finish(row, skipped, "error", error_modes[0].worst.report(), error_modes[0].worst)
    row.precision_findings = _precision_findings(record, adapter, semantic, sem.variant_of, sem.precision, strict_precision)
    row.matched_preset, row.matched_kwargs, message = _match(record, sem)
    status = "pass" if row.matched_kwargs is None else match_status(row.matched_preset)
    if error_modes:  # the semantic verdict of the cases that ran, and the cases that raised beside it
        first = error_modes[0]
        message = "\n".join(x for x in (message, f"ERROR beside the verdict: {first.headline()}", first.worst.report()) if x)
        return _finish(row, skipped, status, message, first.worst)
    return _finish(row, skipped, status, message, None)


def _judge_outside(record: Quantity, adapter: LoadedAdapter, outside: list[Trial], sem: _Semantics, row: RowResult,
                   ref: str | None, on_trial: Callable[[str], None] | None) -> None:
    """Run the cases outside the adapter's declared domain, judge them under the row's semantics at its
    precision, and note each of their failure modes ("outside the framework's domain: ...")."""
    if not outside:
        return
    variant = sem.explanation.variant if sem.explanation is not None else {}
    failing: list[Outcome] = []
    for t in _call(record, adapter, [t for t in outside if not t.metamorphic], ref, on_trial, skip_invalid=True):
        o = t.outcome if t.outcome.status in ("error", "not_implemented") or t.outcome.contract else t.judged(variant, sem.klass(t))
        if o.status in ("fail", "error"):
            failing.append(o)
    for t in (t for t in outside if t.metamorphic):
        t.outcome = t.run(record, adapter, ref=ref, tol_class=sem.klass(t))
        if t.outcome.status in ("fail", "error"):
            failing.append(t.outcome)
    modes = failure_modes([("outside", failing)])
    for mode in modes:
        why = adapter.outside(record.function, tuple(t for o in mode.outcomes for t in case_tags(o.case.args)))
        reasons = "; ".join(f"{tag}: {reason}" for tag, reason in why.items())
        row.notes.append(f"outside the framework's domain ({reasons}): {mode.headline()}; Reproduce: {mode.worst.repro()}")
    row.failures += [m.to_json() for m in modes]


def preset_diff(record: Quantity, trial: Trial, klass: str) -> str:
    """Why a `preset:<name>` check failed, keyword by keyword: the preset's keywords the adapter was passed,
    and for each one whether the outputs match the oracle with that keyword at its canonical default (the
    adapter ignores it) or at another value of the record's grid (the adapter computes it differently)."""
    name = trial.kind.split(":", 1)[1]
    preset = record.presets.get(name, {})
    base = trial.oracle_base()
    lines = [f"preset {name} tried: the adapter was passed {_fmt_kwargs(preset)}"]
    found = []
    for key, value in preset.items():
        default = record.keyword(key).default
        alternatives = [default] + [v for v in record.variants.get(key, ()) if v not in (value, default)]
        for alt in alternatives:
            if alt == value:
                continue
            try:
                outcome = trial.judged({**base, key: alt}, klass)
            except ValueError:  # not a valid keyword set with the others: no explanation
                continue
            if outcome.status == "pass":
                how = "ignores it (computes the canonical " if alt == default else "computes it as "
                found.append(f"{key}={value!r}: the outputs match {key}={alt!r}: the adapter {how}{key}={alt!r}"
                             + (")" if alt == default else ""))
                break
        else:
            found.append(f"{key}={value!r}: taken as passed (no other value of {key} alone explains the outputs)")
    return "\n".join(lines + ["  " + f for f in found])


def _call(record: Quantity, adapter: LoadedAdapter, trials: list[Trial], ref: str | None,
          on_trial: Callable[[str], None] | None, skip_invalid: bool = False) -> list[Trial]:
    """Run the oracle-compared trials (one adapter call each); the ones that compared something or
    said why not (ill-conditioned cases and unsupported dtypes are dropped)."""
    kept = []
    for t in trials:
        if on_trial is not None:
            on_trial(t.describe())
        try:
            t.outcome = t.run(record, adapter, ref=ref)
        except ValueError:
            if skip_invalid or t.kind.startswith("preset:"):  # the case's keywords and the preset's: an invalid set
                continue  # (e.g. bound="absolute" with verl's relative CISPO eps): not a question
            raise
        if t.outcome.status not in ("ill_conditioned", "unsupported"):
            kept.append(t)
    return kept


@dataclass
class _Semantics:
    """What explains a row: one keyword set (`explanation`), one per value of a question keyword
    (`split`), or nothing; the precision the cases are judged at (`precision`, empty under
    --strict-precision for an unexplained row) and the precision they measurably meet (`measured`)."""

    explanation: _Explanation | None
    split: tuple[str, dict[str, _Explanation]] | None
    variant_of: dict[int, dict[str, Any]]
    precision: dict[str, str]
    measured: dict[str, str]

    @property
    def explained(self) -> bool:
        return self.explanation is not None or self.split is not None

    def klass(self, t: Trial) -> str:
        """The tolerance class a trial is judged at: the row's precision for its dtype, never finer
        than the dtype's own."""
        return coarser(self.precision.get(t.dtype, t.dtype), t.dtype)


def _semantics(record: Quantity, semantic: list[Trial], candidates: list[dict[str, Any]], strict: bool) -> _Semantics:
    explanation = _explain(semantic, candidates, strict) if semantic else _Explanation({}, {}, (0, 0))
    if explanation is not None:
        variant_of = {id(t): explanation.variant for t in semantic}
        return _Semantics(explanation, None, variant_of, explanation.precision, explanation.precision)
    split = _explain_by_question(record, semantic, candidates, strict)
    if split is not None:
        key, found = split
        precision: dict[str, str] = {}
        for e in found.values():
            for d, c in e.precision.items():
                precision[d] = coarser(precision.get(d, "float64"), c)
        variant_of = {id(t): found[repr(t.adapter_kwargs.get(key))].variant for t in semantic}
        return _Semantics(None, split, variant_of, precision, precision)
    # nothing explains the row: the precision measured on the cases that do pass
    passing = [t for t in semantic if t.outcome.precision != BELOW]
    measured = _precision_by_dtype(passing, [t.outcome for t in passing])
    return _Semantics(None, None, {id(t): {} for t in semantic}, {} if strict else measured, measured)


def _match(record: Quantity, sem: _Semantics) -> tuple[str | None, dict[str, Any] | None, str]:
    """(matched preset names, matched keywords, message) of an explained row; (None, None, "") for
    a canonical one."""
    if sem.explanation is not None:
        variant = sem.explanation.variant
        if not variant:
            return None, None, ""
        names = ", ".join(_names_of(record, variant)) or None
        label = f"preset {names}" if names else "variant"
        return names, dict(variant), f"matches {label} ({_fmt_kwargs(variant)}), not canonical"
    assert sem.split is not None
    key, found = sem.split
    matched = {v: e for v, e in found.items() if e.variant}
    union = {n for e in matched.values() for n in _names_of(record, e.variant)}
    names = ", ".join(n for n in record.presets if n in union) or None  # in PRESETS order, as _names_of
    parts = []
    for value, e in matched.items():
        own = ", ".join(_names_of(record, e.variant))
        parts.append(f"{key}={value}: {'preset ' + own if own else 'variant'} ({_fmt_kwargs(e.variant)})")
    kwargs = {f"{key}={value}": e.variant for value, e in matched.items()}
    return names, kwargs, "matches " + "; ".join(parts) + f"; canonical for every other {key}"


def _finish(row: RowResult, skipped: list[str], status: str, message: str, shown: Outcome | None) -> RowResult:
    """Set the row's status, message (with the cases left out) and the reproduce line and error
    figures of the outcome its message shows."""
    row.status = status
    row.thin = status in ("pass", "preset", "variant") and bool(row.counts) and is_thin(row.counts)
    tail = f"({len(skipped)} case(s) left out: {'; '.join(skipped[:3])})" if skipped else ""
    row.message = "\n".join(x for x in (message, tail) if x)
    if shown is not None:
        row.reproduce = shown.repro()
        if shown.mismatches:  # the JSON figures are the ones the message shows
            row.max_abs_err = max(m.max_abs for m in shown.mismatches)
            rels = [m.max_rel for m in shown.mismatches if m.max_rel == m.max_rel]
            row.max_rel_err = max(rels) if rels else float("nan")
    return row


def _worse(a: str, b: str) -> str:
    order = ("pass", "not_implemented", "fail", "error")
    return max(a, b, key=lambda s: order.index(s) if s in order else 0)


def _precision_findings(record: Quantity, adapter: LoadedAdapter, trials: list[Trial], variant_of: dict[int, dict[str, Any]],
                        precision: dict[str, str], strict: bool) -> list[dict[str, Any]]:
    """One finding per input dtype whose outputs meet only a coarser class than the dtype's own:
    the class met, the worst case judged at the dtype's class (its error figures and reproduce
    line), and the adapter's `precision_notes` for the function."""
    if strict:
        return []
    note = adapter.precision_notes.get(record.function, "")
    findings = []
    for dtype, meets in precision.items():
        if RANK[meets] <= RANK[dtype]:
            continue
        own = [(t, t.judged(variant_of[id(t)], dtype)) for t in trials if t.dtype == dtype]
        missed = [(t, o) for t, o in own if o.status == "fail"]
        if not missed:
            continue
        # the case that sets the class (the coarsest precision), then the largest difference
        t, worst = max(missed, key=lambda to: (RANK[to[1].precision or dtype], to[1].max_abs))
        findings.append({
            "dtype": dtype,
            "meets": meets,
            "max_abs_err": finite_or_none(worst.max_abs),
            "max_rel_err": finite_or_none(worst.max_rel),
            "case": t.describe(),
            "note": note,
            "message": f"{dtype} inputs: outputs meet {precision_label(meets)} precision, not {dtype} "
                       f"(greatest absolute difference {worst.max_abs:.3g}"
                       + (f", relative {worst.max_rel:.3g}" if worst.max_rel == worst.max_rel else "")
                       + f"; {t.describe()})" + (f": {note}" if note else ""),
            "reproduce": worst.repro(),
        })
    return findings


def _fmt_kwargs(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
