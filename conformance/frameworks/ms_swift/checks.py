"""ms-swift rows that are not single core-API calls: every ``loss_type`` of ``GRPOTrainer._compute_loss_and_metrics``
aggregated (value and gradient w.r.t. the per-token log-probs), with its settings (``epsilon_high``, ``delta``,
GSPO's ``importance_sampling_level``, CISPO's cap, SAPO's temperatures), the KL term in the loss, the
top-entropy mask (in the loss, and taken per rank), the rollout importance correction in the loss (the KL
weighted too), the off-policy sequence mask editing the denominator, the batch split over ranks and
gradient-accumulation micro-batches, the path from logits (the trainer's own log-prob and entropy
computation), and the advantage settings that are compositions: RLOO and REINFORCE++ under other
``scale_rewards``, several weighted reward functions, and the KL in the reward through the trainer's
``_compute_advantages``.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.frameworks.ms_swift.adapter.MsSwiftAdapter``). Row ids look like ``ms_swift.loss[grpo]``,
``ms_swift.loss[dapo,rollout_importance_sampling_mode=token_mask,beta=0.04]``, ``ms_swift.advantages[rloo,scale_rewards=group]``.

How a loss row is checked: the seeded float32 batch of ``conformance/frameworks/loss_batch.py`` (``loss_batch``:
ragged rows, a masked tool token, an empty completion, finite garbage at every masked position,
log-ratios inside and far outside every clip range) goes to the loss method unchanged (``completion_mask`` =
the spec mask); ms-swift returns the loss and, by autograd, its gradient w.r.t. ``per_token_logps``. The
oracle (float64, on the same float32-rounded inputs) composes the spec pieces, e.g.
``aggregate(ppo_token_loss(...), mode="seq_mean_token_mean")``; the first candidate that matches value and
gradient decides the row: canonical (``pass``), a named preset or variant (``preset``/``variant``), else ``fail``.

The loss's scalar is what one rank returns for one micro-batch; transformers' ``Trainer.training_step``
divides it by the gradient-accumulation steps and DDP averages the ranks, so a batch split into parts is
``mean over ranks of Σ_micro-batches loss / steps`` (the ``parts=`` rows), with ``num_items_in_batch`` the
completion tokens of the whole window (``grpo_trainer.py:795-801``).

Sources: ms-swift 4.6.0, ``swift/rlhf_trainers/grpo_trainer.py`` (``_compute_loss_and_metrics`` :934-1226,
``_undo_gradient_accumulation_scaling`` :1228-1241, ``_compute_advantages`` :387-520, the rollout correction
:1761-1773 and :2328-2393), ``swift/rl_core/advantage.py`` (``compute_advantages`` :20-99).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.records import cases
from conformance.runner.composite import Candidate, composition_row, loss_tolerances, value_and_grad_tolerances
from conformance.records.pieces import Piece, broadcast_advantages, compose, fmt, policy_piece, scaled
from conformance.frameworks.loss_batch import loss_batch, round_batch
from conformance.runner.rows import not_implemented_row
from conformance.runner.rows import RowResult

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.ms_swift.adapter import MsSwiftAdapter

DTYPE = "float32"
MAX_LEN = 16  # max_completion_length: Dr. GRPO's normaliser (grpo_trainer.py:1087-1089)
BETA = 0.04  # ms-swift's default beta for GRPO (arguments/rlhf_args.py:356-357)
# log-ratio kinks of every clip in use: 1 -+ 0.2, 1 + 0.28, delta 3, CISPO's absolute cap 0.2 and cap 5
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 3.0, 0.2, 5.0))
IS_THRESHOLD = 2.0  # rollout_importance_sampling_threshold default (rlhf_trainers/args_mixin.py)
SCALE_DEFAULT = {"grpo": "group", "rloo": "none", "reinforce_plus_plus": "batch"}  # rlhf_args.py:385-393
KL_CLAMPS = {"log_ratio_clamp": 20.0, "clamp": 10.0}  # grpo_trainer.py:975-976
AGG = {  # loss_type -> the spec aggregation of its branch (grpo_trainer.py:1082-1135)
    "grpo": "seq_mean_token_mean", "sapo": "seq_mean_token_mean", "bnpo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm", "dapo": "token_mean", "cispo": "token_mean",
}
# loss types of 4.6.0 without a spec quantity: REAL's group-wise log-sum-exp loss on sequence scores
# (:1091-1122) and FIPO's future-KL influence weight (:885-932, :1057-1058)
NO_SPEC_LOSS = {"real": "REAL's group-contrastive loss on length-normalised sequence log-ratios (grpo_trainer.py:1091-1122)",
                "fipo": "FIPO's discounted future-KL influence weight times the PPO loss (grpo_trainer.py:885-932, :1057-1058)"}


# ---------------------------------------------------------------------------------------------
# batches and the ms-swift call
# ---------------------------------------------------------------------------------------------


def _batch(seed: int, **kw: Any) -> dict[str, np.ndarray]:
    b = round_batch(loss_batch(seed, kinks=KINKS, **kw), DTYPE)
    rng = np.random.default_rng(seed + 101)
    m = b["mask"]
    # entropies rising with the row, so that each half of the batch has its own quantile (the per-rank rows)
    level = 0.4 * np.arange(m.shape[0])[:, None]
    b["entropy"] = cases.round_to(np.where(m, level + rng.uniform(0.0, 1.0, size=m.shape), rng.uniform(-5.0, 5.0, size=m.shape)), DTYPE)
    # rollout log-probs: delta = old - rollout, each token and each row mean kept 0.03 from log 2 (the threshold)
    delta = np.zeros(m.shape)
    for r in range(m.shape[0]):
        shift = 0.9 if r == 1 else 0.0  # one row whose geometric-mean ratio exceeds the threshold
        while True:
            row = shift + rng.normal(0.0, 0.5, size=m.shape[1])
            ok = all(abs(x - math.log(IS_THRESHOLD)) > 0.03 for x in row)
            if ok and (not m[r].any() or abs(row[m[r]].mean() - math.log(IS_THRESHOLD)) > 0.03):
                delta[r] = row
                break
    b["rollout_logp"] = cases.round_to(b["old_logp"] - delta, DTYPE)
    return b


def _opsm_delta(b: dict[str, np.ndarray], sampler: np.ndarray) -> float:
    """A threshold that drops some negative-advantage rows and keeps others: the midpoint of the widest gap
    between their mean log-ratios D_b = mean(sampler - logp) (each D_b at least half that gap away)."""
    m, A = b["mask"], broadcast_advantages(b)
    rows = [r for r in range(m.shape[0]) if m[r].any() and A[r][m[r]].mean() < 0]
    D = np.sort([float((sampler[r] - b["logp"][r])[m[r]].mean()) for r in rows])
    gap = int(np.argmax(np.diff(D)))
    return float((D[gap] + D[gap + 1]) / 2)


def _mild_ref(b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The batch with |logp - ref| <= 0.6 on valid tokens (k3 <= 0.22: ms-swift's clamps never bind)."""
    out = dict(b)
    d = np.clip(b["logp"] - b["ref_logp"], -0.6, 0.6)
    out["ref_logp"] = cases.round_to(np.where(b["mask"], b["logp"] - d, b["ref_logp"]), DTYPE)
    return out


def _arrays(b: dict[str, np.ndarray], rows: Any = slice(None), *, ref: bool = False, rollout: bool = False,
            entropy: bool = False, tokens: float | None = None) -> dict[str, Any]:
    f = np.float32
    m = b["mask"][rows]
    out: dict[str, Any] = {"per_token_logps": b["logp"][rows].astype(f), "old_per_token_logps": b["old_logp"][rows].astype(f),
                           "advantages": broadcast_advantages(b)[rows].astype(f), "completion_mask": m,
                           "num_items_in_batch": np.asarray(float(m.sum()) if tokens is None else tokens, dtype=f)}
    if ref:
        out["ref_per_token_logps"] = b["ref_logp"][rows].astype(f)
    if rollout:
        out["rollout_per_token_logps"] = b["rollout_logp"][rows].astype(f)
    if entropy:
        out["entropies"] = b["entropy"][rows].astype(f)
    return out


def _got(adapter: MsSwiftAdapter, arrays: dict[str, Any], settings: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = adapter.loss(arrays, settings, wrt="per_token_logps", upstream={"loss": 1.0}, **kw)
    return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["per_token_logps"]}


def _settings(loss_type: str, **kw: Any) -> dict[str, Any]:
    return {"loss_type": loss_type, "max_completion_length": MAX_LEN, **kw}


def _agg(loss_type: str, m: np.ndarray, **kw: Any) -> dict[str, Any]:
    agg: dict[str, Any] = {"mode": AGG[loss_type], **kw}
    if loss_type == "dr_grpo":
        agg["norm_length"] = float(MAX_LEN)
    return agg


def _plus(p: Piece, q: Piece, c: float) -> Piece:
    return Piece(p.value + c * q.value, lambda u: p.vjp(u) + c * q.vjp(u))


def _kl_piece(b: dict[str, np.ndarray], **kw: Any) -> Piece:
    lp, ref, m = b["logp"], b["ref_logp"], b["mask"]
    return Piece(oracle.kl_penalty(lp, ref, m, estimator="k3", **kw),
                 lambda u: oracle.kl_penalty_grad(lp, ref, m, u, estimator="k3", **kw))


PIECE = {"grpo": "ppo_token_loss", "bnpo": "ppo_token_loss", "dr_grpo": "ppo_token_loss", "dapo": "ppo_token_loss",
         "cispo": "cispo_token_loss", "sapo": "sapo_token_loss"}
SPEC_ID = {"ppo_token_loss": "loss.ppo", "cispo_token_loss": "loss.cispo", "sapo_token_loss": "loss.sapo",
           "gspo_token_loss": "loss.gspo"}


# ---------------------------------------------------------------------------------------------
# the aggregated loss of every loss_type, with its settings
# ---------------------------------------------------------------------------------------------


def loss_row(adapter: MsSwiftAdapter, seed: int, loss_type: str, *, settings: dict[str, Any] | None = None,
             asked: dict[str, Any] | None = None, function: str | None = None, variant: dict[str, Any] | None = None,
             per_token_advantages: bool = False, label: str = "") -> RowResult:
    """``loss_type`` with ``GRPOConfig(**settings)`` against ``aggregate(<function>(**asked), <its mode>)``
    (canonical), then with the ``ms_swift`` preset of ``function``, then ``variant`` (keywords) if given."""
    settings, asked = dict(settings or {}), dict(asked or {})
    function = function or PIECE[loss_type]
    b = _batch(seed, per_token_advantages=per_token_advantages)
    m = b["mask"]
    agg = _agg(loss_type, m)

    def ev(kwargs: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: compose(policy_piece(function, b["logp"], b, **kwargs), m, agg, "grad[logp]")

    cands = [Candidate("canonical", f"aggregate({function}({fmt(asked)}), {fmt(agg)})", ev(asked))]
    preset = {**preset_kwargs("ms_swift", function), **asked}
    if preset != asked:
        cands.append(Candidate(fmt({k: v for k, v in preset.items() if asked.get(k, object()) != v}),
                               f"aggregate({function}({fmt(preset)}), {fmt(agg)})", ev(preset), preset="ms_swift", kwargs=preset))
    if variant:
        kw = {**asked, **variant}
        cands.append(Candidate(fmt(variant), f"aggregate({function}({fmt(kw)}), {fmt(agg)})", ev(kw), kwargs=variant))
    rid = f"ms_swift.loss[{loss_type}{''.join(f',{k}={v}' for k, v in settings.items())}{label}]"
    return composition_row(rid, SPEC_ID[function], "ms_swift.loss", adapter,
                           lambda: _got(adapter, _arrays(b), _settings(loss_type, **settings)), cands,
                           loss_tolerances(DTYPE, SPEC_ID[function]), seed=seed)


def loss_rows(adapter: MsSwiftAdapter, seed: int) -> list[RowResult]:
    rows = [loss_row(adapter, seed, lt) for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")]
    rows += [
        loss_row(adapter, seed, "bnpo", settings={"epsilon_high": 0.28}, asked={"eps_high": 0.28}),
        # delta caps the unclipped ratio (:1053-1054): the dual clip for delta >= 1 + epsilon_high
        loss_row(adapter, seed, "grpo", settings={"delta": 3.0}, asked={"dual_clip": 3.0}),
        loss_row(adapter, seed, "grpo", per_token_advantages=True, label=",A=[B,T]"),
        loss_row(adapter, seed, "cispo", settings={"epsilon_high": 5.0}, asked={"bound": "absolute", "eps_high": 5.0}),
        loss_row(adapter, seed, "sapo", settings={"tau_pos": 0.5, "tau_neg": 2.0}, asked={"tau_pos": 0.5, "tau_neg": 2.0}),
        # GSPO (:1011-1019): the sequence ratio exp(mean log-ratio), clipped with epsilon (0.2 here); "sequence_token"
        # is GSPO-token, the per-token stop-gradient form (the same value)
        loss_row(adapter, seed, "bnpo", settings={"importance_sampling_level": "sequence"},
                 asked={"eps_low": 0.2, "eps_high": 0.2}, function="gspo_token_loss", variant={"form": "token_sg"}),
        loss_row(adapter, seed, "bnpo", settings={"importance_sampling_level": "sequence_token"},
                 asked={"eps_low": 0.2, "eps_high": 0.2}, function="gspo_token_loss", variant={"form": "token_sg"}),
    ]
    rows += [not_implemented_row(f"ms_swift.loss[{lt}]", "loss.policy", "ms_swift.loss", adapter,
                                 f"no spec quantity: {why}") for lt, why in NO_SPEC_LOSS.items()]
    return rows


# ---------------------------------------------------------------------------------------------
# the KL term and the top-entropy mask in the loss
# ---------------------------------------------------------------------------------------------


def kl_row(adapter: MsSwiftAdapter, seed: int, loss_type: str, *, entropy: float | None = None) -> RowResult:
    """``beta = 0.04``: ``aggregate(ppo·keep + 0.04·k3, mode)`` (the KL added after the entropy mask, :1061-1064),
    canonical k3 then ms-swift's clamps (kl_penalty's ``ms_swift`` preset)."""
    b = _batch(seed)
    m = b["mask"]
    agg = _agg(loss_type, m)
    keep = np.ones(m.shape) if entropy is None else oracle.entropy_top_mask(b["entropy"], m, rho=entropy).astype(float)

    def ev(kl: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: compose(_plus(scaled(policy_piece("ppo_token_loss", b["logp"], b), keep), _kl_piece(b, **kl), BETA),
                               m, agg, "grad[logp]")

    preset = {k: v for k, v in preset_kwargs("ms_swift", "kl_penalty").items() if k != "estimator"}
    masked = "" if entropy is None else f" · entropy_top_mask(H, rho={entropy})"
    cands = [Candidate("canonical", f"aggregate(ppo_token_loss(){masked} + {BETA}·kl_penalty(k3), {fmt(agg)})", ev({})),
             Candidate(fmt(preset), f"aggregate(ppo_token_loss(){masked} + {BETA}·kl_penalty(k3, {fmt(preset)}), {fmt(agg)})",
                       ev(preset), preset="ms_swift", kwargs=preset)]
    settings = {"beta": BETA} if entropy is None else {"beta": BETA, "top_entropy_quantile": entropy}
    rid = f"ms_swift.loss[{loss_type}{''.join(f',{k}={v}' for k, v in settings.items())}]"
    return composition_row(rid, "loss.policy", "ms_swift.loss", adapter,
                           lambda: _got(adapter, _arrays(b, ref=True, entropy=True), _settings(loss_type, **settings)),
                           cands, loss_tolerances(DTYPE), seed=seed)


def entropy_loss_row(adapter: MsSwiftAdapter, seed: int, loss_type: str, rho: float) -> RowResult:
    """``top_entropy_quantile = rho``: the policy term times the mask (:1061-1062); masked tokens stay counted."""
    b = _batch(seed)
    m = b["mask"]
    agg = _agg(loss_type, m)
    keep = oracle.entropy_top_mask(b["entropy"], m, rho=rho).astype(float)
    cand = Candidate("canonical", f"aggregate(ppo_token_loss() · entropy_top_mask(H, mask, rho={rho}), {fmt(agg)})",
                     lambda: compose(scaled(policy_piece("ppo_token_loss", b["logp"], b), keep), m, agg, "grad[logp]"))
    rid = f"ms_swift.loss[{loss_type},top_entropy_quantile={rho}]"
    return composition_row(rid, "entropy.top_mask", "ms_swift.loss", adapter,
                           lambda: _got(adapter, _arrays(b, entropy=True), _settings(loss_type, top_entropy_quantile=rho)),
                           [cand], loss_tolerances(DTYPE), seed=seed)


def entropy_rank_row(adapter: MsSwiftAdapter, seed: int, rho: float, parts: int = 2) -> RowResult:
    """The top-entropy mask of a batch split over ``parts`` ranks, each rank's ``entropy_mask`` (:958-962) joined:
    canonical is the batch's quantile (each part given the pooled entropies); ms-swift's is each rank's own."""
    b = _batch(seed)
    m, H = b["mask"], b["entropy"]
    splits = np.array_split(np.arange(m.shape[0]), parts)

    def got() -> dict[str, Any]:
        out = np.zeros(m.shape)
        for rows in splits:
            r = adapter.loss(_arrays(b, rows, entropy=True), _settings("grpo", top_entropy_quantile=rho))["outputs"]
            out[rows] = np.asarray(r["entropy_mask"], dtype=bool) & m[rows]
        return {"value": out}

    def joined(pooled: bool) -> Callable[[], dict[str, Any]]:
        def ev() -> dict[str, Any]:
            out = np.zeros(m.shape)
            for rows in splits:
                out[rows] = oracle.entropy_top_mask(H[rows], m[rows], rho=rho, pooled_entropy=H[m] if pooled else None)
            return {"value": out}
        return ev

    cands = [Candidate("canonical", f"entropy_top_mask(H_rank, rho={rho}, pooled_entropy=H of the batch), joined", joined(True)),
             Candidate("each rank's own quantile", f"entropy_top_mask(H_rank, rho={rho}) per rank, joined", joined(False),
                       kwargs={"pooled_entropy": "the rank's own tokens (grpo_trainer.py:960)"})]
    return composition_row(f"ms_swift.entropy_mask[rho={rho},ranks={parts}]", "entropy.top_mask", "ms_swift.loss", adapter,
                           got, cands, loss_tolerances(DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# the rollout importance correction and the off-policy sequence mask in the loss
# ---------------------------------------------------------------------------------------------

IS_MODES = {  # rollout_importance_sampling_mode -> the spec weights (ms-swift's +-20 log clamp, :2362)
    "token_truncate": lambda o, r, m: oracle.rollout_is_weights(o, r, m, hi=IS_THRESHOLD, log_ratio_clamp=20.0),
    "token_mask": lambda o, r, m: oracle.rollout_is_weights(o, r, m, mode="mask", hi=IS_THRESHOLD, log_ratio_clamp=20.0),
    "sequence_truncate": lambda o, r, m: oracle.rollout_is_weights(o, r, m, level="sequence", seq_stat="geometric",
                                                                   hi=IS_THRESHOLD, log_ratio_clamp=20.0),
    # each kept row keeps its tokens' own ratios (:2382-2388)
    "sequence_mask": lambda o, r, m: oracle.rollout_is_weights(o, r, m, mode="none", log_ratio_clamp=20.0)
    * oracle.rollout_rejection_mask(o, r, m, level="seq_mean", hi=IS_THRESHOLD),
}
IS_FORMULA = {
    "token_truncate": f"rollout_is_weights(hi={IS_THRESHOLD}, log_ratio_clamp=20)",
    "token_mask": f"rollout_is_weights(mode='mask', hi={IS_THRESHOLD}, log_ratio_clamp=20)",
    "sequence_truncate": f"rollout_is_weights(level='sequence', seq_stat='geometric', hi={IS_THRESHOLD}, log_ratio_clamp=20)",
    "sequence_mask": f"rollout_is_weights(mode='none', log_ratio_clamp=20) · rollout_rejection_mask(level='seq_mean', hi={IS_THRESHOLD})",
}


def is_weights_row(adapter: MsSwiftAdapter, seed: int, mode: str) -> RowResult:
    """``_apply_rollout_importance_sampling`` for ``mode`` (the four modes as spec compositions)."""
    b = _batch(seed)
    m, old, roll = b["mask"], b["old_logp"], b["rollout_logp"]
    cand = Candidate("canonical", IS_FORMULA[mode], lambda: {"value": IS_MODES[mode](old, roll, m)})
    return composition_row(f"ms_swift.rollout_is[{mode}]", "offpolicy.is_weights", "ms_swift.rollout_is", adapter,
                           lambda: {"value": adapter.rollout_weights(old.astype(np.float32), roll.astype(np.float32), m, mode, IS_THRESHOLD)},
                           [cand], value_and_grad_tolerances("offpolicy.is_weights", DTYPE), seed=seed)


def _corrected(b: dict[str, np.ndarray], w: np.ndarray, keep: np.ndarray, kw: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    args = (b["logp"], b["old_logp"], b["ref_logp"], b["advantages"], w, keep, b["mask"])
    return lambda: {"value": oracle.corrected_policy_loss(*args, **kw),
                    "grad[logp]": oracle.corrected_policy_loss_grad(*args, 1.0, **kw)}


def corrected_row(adapter: MsSwiftAdapter, seed: int, loss_type: str, *, is_mode: str | None = None, opsm: bool = False,
                  beta: float = 0.0) -> RowResult:
    """The rollout correction (``is_mode``) and/or the off-policy sequence mask (``opsm``) in the loss:
    ``corrected_policy_loss`` with the spec's weights and keep mask; canonical, then the ``ms_swift`` preset
    (the KL weighted, :1066-1067), then rejected tokens kept in the count (``num_items_in_batch`` is counted
    before the mask is edited, :795-801)."""
    b = _mild_ref(_batch(seed))
    m = b["mask"]
    old_policy = b["rollout_logp"] if is_mode else b["old_logp"]  # OPSM's sampler (:1071-1073)
    delta = _opsm_delta(b, old_policy)
    w = IS_MODES[is_mode](b["old_logp"], b["rollout_logp"], m) if is_mode else m.astype(float)
    keep = oracle.off_policy_sequence_mask(b["logp"], old_policy, b["advantages"], m, threshold=delta) if opsm else m
    base = {"kl_coef": beta, **_agg(loss_type, m)}
    preset = {**base, **preset_kwargs("ms_swift", "corrected_policy_loss")}
    what = " · ".join(x for x in (IS_FORMULA[is_mode] if is_mode else "",
                                   f"off_policy_sequence_mask(threshold=δ={delta:.4g})" if opsm else "") if x)
    cands = [Candidate("canonical", f"corrected_policy_loss(w, keep = {what}; {fmt(base)})", _corrected(b, w, keep, base))]
    if preset != base:
        cands.append(Candidate(fmt({k: v for k, v in preset.items() if k not in base}), f"corrected_policy_loss({fmt(preset)})",
                               _corrected(b, w, keep, preset), preset="ms_swift", kwargs=preset))
    zero = {**preset, "rejected": "zero"}
    cands.append(Candidate("rejected='zero'", f"corrected_policy_loss({fmt(zero)})", _corrected(b, w, keep, zero),
                           kwargs={"rejected": "zero (num_items_in_batch counts the tokens the mask removes)"}))
    settings: dict[str, Any] = {}
    if is_mode:
        settings["rollout_importance_sampling_mode"] = is_mode
    if beta:
        settings["beta"] = beta
    rid = f"ms_swift.loss[{loss_type}{''.join(f',{k}={v}' for k, v in settings.items())}{',off_policy_sequence_mask_delta=δ' if opsm else ''}]"
    if opsm:  # δ drops some negative-advantage rows of this batch and keeps others (_opsm_delta)
        settings["off_policy_sequence_mask_delta"] = delta
    return composition_row(rid, "offpolicy.loss", "ms_swift.loss", adapter,
                           lambda: _got(adapter, _arrays(b, ref=True, rollout=bool(is_mode)), _settings(loss_type, **settings)),
                           cands, loss_tolerances(DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# a batch split over ranks and gradient-accumulation micro-batches
# ---------------------------------------------------------------------------------------------


def parts_row(adapter: MsSwiftAdapter, seed: int, loss_type: str, ranks: int, micro: int) -> RowResult:
    """The batch's rows over ``ranks`` x ``micro`` parts, each rank's loss summed over its micro-batches and
    divided by the steps (``Trainer.training_step``), averaged over the ranks (DDP): must equal the whole
    batch's aggregate. The variant: the mean of each part's own aggregate (a micro-batch-local normaliser)."""
    b = _batch(seed)
    m = b["mask"]
    agg = _agg(loss_type, m)
    parts = np.array_split(np.arange(m.shape[0]), ranks * micro)
    tokens = float(m.sum())

    def got() -> dict[str, Any]:
        value, grad = 0.0, np.zeros(m.shape)
        for k, rows in enumerate(parts):
            r = _got(adapter, _arrays(b, rows, tokens=tokens), _settings(loss_type), num_processes=ranks, grad_accum=micro)
            value += float(r["value"]) / (micro * ranks)
            grad[rows] = r["grad[logp]"] / (micro * ranks)
        return {"value": value, "grad[logp]": grad}

    def whole() -> dict[str, Any]:
        return compose(policy_piece("ppo_token_loss", b["logp"], b), m, agg, "grad[logp]")

    def local() -> dict[str, Any]:
        value, grad = 0.0, np.zeros(m.shape)
        for rows in parts:
            sub = {k: v[rows] for k, v in b.items()}
            r = compose(policy_piece("ppo_token_loss", sub["logp"], sub), sub["mask"], _agg(loss_type, sub["mask"]), "grad[logp]")
            value += r["value"] / len(parts)
            grad[rows] = r["grad[logp]"] / len(parts)
        return {"value": value, "grad[logp]": grad}

    cands = [Candidate("canonical", f"aggregate(ppo_token_loss(), {fmt(agg)}) of the whole batch", whole),
             Candidate("mean of the parts' own aggregates", f"mean over the {len(parts)} parts of aggregate(part, {fmt(agg)})", local,
                       kwargs={"num_tokens": "each micro-batch's own (grpo_trainer.py:1085-1086)"})]
    return composition_row(f"ms_swift.loss[{loss_type},ranks={ranks},micro_batches={micro}]", "agg", "ms_swift.loss", adapter,
                           got, cands, loss_tolerances(DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# the path from logits: the trainer's own log-probs and entropies (_get_per_token_logps_and_entropies)
# ---------------------------------------------------------------------------------------------


def logits_row(adapter: MsSwiftAdapter, seed: int, *, temperature: float = 0.7, rho: float = 0.5) -> RowResult:
    """``grpo`` with the real ``_get_per_token_logps_and_entropies`` (the stand-in model returns the logits):
    ``aggregate(ppo_token_loss(token_logprobs(logits, τ)) · entropy_top_mask(token_entropy(logits, τ)))``,
    value and gradient w.r.t. the logits."""
    rng = np.random.default_rng(seed + 7)
    b = _batch(seed)
    m = b["mask"]
    B, T, V = m.shape[0], m.shape[1], 11
    logits = cases.round_to(rng.normal(0.0, 2.0, size=(B, T, V)), DTYPE)
    ids = rng.integers(0, V, size=(B, T))
    agg = {"mode": "seq_mean_token_mean"}

    def got() -> dict[str, Any]:
        arrays = {"logits": logits.astype(np.float32), "input_ids": ids.astype(np.int64),
                  "old_per_token_logps": b["old_logp"][:, 1:].astype(np.float32),
                  "advantages": broadcast_advantages(b)[:, 1:].astype(np.float32), "completion_mask": m[:, 1:]}
        r = adapter.loss(arrays, _settings("grpo", temperature=temperature, top_entropy_quantile=rho), wrt="logits",
                         upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logits]": r["grads"]["logits"]}

    def ev() -> dict[str, Any]:
        lp = oracle.token_logprobs(logits, ids, m, temperature=temperature)
        keep = oracle.entropy_top_mask(oracle.token_entropy(logits, m, temperature=temperature), m, rho=rho).astype(float)
        A, old = broadcast_advantages(b), np.where(m, b["old_logp"], 0.0)
        piece = oracle.ppo_token_loss(lp, old, A, m) * keep
        w = oracle.aggregate_grad(piece, m, 1.0, **agg)
        up = oracle.ppo_token_loss_grad(lp, old, A, m, w * keep)
        return {"value": oracle.aggregate(piece, m, **agg),
                "grad[logits]": oracle.token_logprobs_grad(logits, ids, m, up, temperature=temperature)}

    formula = (f"aggregate(ppo_token_loss(token_logprobs(logits, τ={temperature})) · entropy_top_mask(token_entropy(logits, "
               f"τ={temperature}), rho={rho}), {fmt(agg)})")
    return composition_row(f"ms_swift.loss[grpo,logits,temperature={temperature},top_entropy_quantile={rho}]", "loss.policy",
                           "ms_swift.loss", adapter, got, [Candidate("canonical", formula, ev)], loss_tolerances(DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# advantages: compute_advantages settings that are compositions, and the KL in the reward
# ---------------------------------------------------------------------------------------------


def _rewards(seed: int, B: int = 8, K: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed + 11)
    return cases.round_to(rng.normal(0.0, 1.0, size=(B, K)), DTYPE)


def _one_token(B: int) -> np.ndarray:
    """A mask of one valid token per row (column 1): a per-sequence advantage read at that token."""
    m = np.zeros((B, 2), dtype=bool)
    m[:, 1] = True
    return m


def advantage_row(adapter: MsSwiftAdapter, seed: int, estimator: str, scale: str, G: int = 4) -> RowResult:
    """``compute_advantages(estimator, scale_rewards=scale)`` on one reward function, as spec compositions."""
    r = _rewards(seed)[:, :1]
    x = r[:, 0].astype(np.float64)
    rloo = G / (G - 1) if estimator == "rloo" else 1.0  # r*K/(K-1) - mean*K/(K-1) (advantage.py:67-68)
    what = {"group": "group", "batch": "batch", "none": "none"}[scale]
    # REINFORCE++'s batch std is of the centred rewards (advantage.py:74-75); grpo's and RLOO's of the rewards (:80)
    centred = estimator == "reinforce_plus_plus" and scale == "batch"

    def ev() -> dict[str, Any]:
        if centred:
            return {"value": oracle.reinforce_pp_baseline_advantages(x, G, _one_token(x.shape[0]), level="sequence",
                                                                     eps=1e-4)[:, 1]}
        return {"value": rloo * oracle.grpo_advantages(x, G, scale=what, eps=1e-4)}

    formula = ("reinforce_pp_baseline_advantages(level='sequence', eps=1e-4)" if centred else
               f"{'(G/(G-1)) · ' if estimator == 'rloo' else ''}grpo_advantages(scale={what!r}, eps=1e-4)")
    return composition_row(f"ms_swift.advantages[{estimator},scale_rewards={scale}]", "adv.grpo", "ms_swift.advantages", adapter,
                           lambda: {"value": adapter.advantages(r, G, estimator=estimator, scale=scale)["advantages"]},
                           [Candidate("canonical", formula, ev)], value_and_grad_tolerances("adv.grpo", DTYPE), seed=seed)


def weighted_rewards_row(adapter: MsSwiftAdapter, seed: int, weights: tuple[float, ...] = (1.0, 0.5), G: int = 4) -> RowResult:
    """Several reward functions (``scale_rewards='group'``): the weighted sum first (advantage.py:58), then GRPO."""
    r = _rewards(seed)
    s = (r.astype(np.float64) * np.asarray(weights, dtype=np.float32)).sum(axis=1)
    cand = Candidate("canonical", f"grpo_advantages(Σ_k w_k·r_k, w={weights}, eps=1e-4)",
                     lambda: {"value": oracle.grpo_advantages(s, G, eps=1e-4)})
    return composition_row(f"ms_swift.advantages[grpo,reward_weights={weights}]", "adv.grpo", "ms_swift.advantages", adapter,
                           lambda: {"value": adapter.advantages(r, G, estimator="grpo", scale="group", reward_weights=weights)["advantages"]},
                           [cand], value_and_grad_tolerances("adv.grpo", DTYPE), seed=seed)


def kl_reward_row(adapter: MsSwiftAdapter, seed: int, estimator: str, G: int = 3) -> RowResult:
    """``_compute_advantages`` with ``kl_in_reward`` (its default for rloo and reinforce_plus_plus) and beta 0.04:
    each reward minus beta · Σ_t (old - ref) over the row (grpo_trainer.py:436-446, advantage.py:60-61), then the
    estimator under its default ``scale_rewards``."""
    b = _batch(seed)
    m = b["mask"]
    r = _rewards(seed, B=m.shape[0], K=1)
    kl = oracle.kl_penalty(b["old_logp"], b["ref_logp"], m, estimator="k1").sum(axis=1)
    shaped = r[:, 0].astype(np.float64) - BETA * kl
    scale = SCALE_DEFAULT[estimator]

    def ev() -> dict[str, Any]:
        if estimator == "reinforce_plus_plus":
            return {"value": oracle.reinforce_pp_baseline_advantages(shaped, G, _one_token(m.shape[0]), level="sequence",
                                                                     eps=1e-4)[:, 1]}
        if estimator == "rloo":
            return {"value": oracle.rloo_advantages(shaped, G)}
        return {"value": oracle.grpo_advantages(shaped, G, eps=1e-4)}

    est = {"grpo": "grpo_advantages(eps=1e-4)", "rloo": "rloo_advantages",
           "reinforce_plus_plus": "reinforce_pp_baseline_advantages(level='sequence', eps=1e-4)"}[estimator]
    formula = f"{est}(r − {BETA}·Σ_t kl_penalty(old_logp, ref_logp, k1))"
    settings = {"advantage_estimator": estimator, "scale_rewards": scale, "kl_in_reward": True, "beta": BETA,
                "num_generations": G}

    def got() -> dict[str, Any]:
        arrays = {"rewards_per_func": r, "completion_mask": m, "old_per_token_logps": b["old_logp"].astype(np.float32),
                  "ref_per_token_logps": b["ref_logp"].astype(np.float32)}
        return {"value": adapter.call("trainer_advantages", arrays, {"settings": settings})["outputs"]["advantages"]}

    return composition_row(f"ms_swift._compute_advantages[{estimator},kl_in_reward,beta={BETA}]", "adv.grpo",
                           "ms_swift._compute_advantages", adapter, got, [Candidate("canonical", formula, ev)],
                           value_and_grad_tolerances("adv.grpo", DTYPE), seed=seed)


def advantage_rows(adapter: MsSwiftAdapter, seed: int) -> list[RowResult]:
    rows = [advantage_row(adapter, seed, est, scale) for est, scale in
            (("rloo", "group"), ("rloo", "batch"), ("reinforce_plus_plus", "group"), ("reinforce_plus_plus", "none"),
             ("reinforce_plus_plus", "batch"))]
    rows.append(weighted_rewards_row(adapter, seed))
    rows += [kl_reward_row(adapter, seed, est) for est in ("grpo", "rloo", "reinforce_plus_plus")]
    return rows


# ---------------------------------------------------------------------------------------------


def extra_rows(adapter: MsSwiftAdapter, seed: int) -> list[RowResult]:
    rows = loss_rows(adapter, seed)
    rows += [kl_row(adapter, seed, "grpo"), kl_row(adapter, seed, "dapo"), kl_row(adapter, seed, "grpo", entropy=0.5)]
    rows += [entropy_loss_row(adapter, seed, "grpo", 0.5), entropy_loss_row(adapter, seed, "dapo", 0.2),
             entropy_rank_row(adapter, seed, 0.5)]
    rows += [is_weights_row(adapter, seed, mode) for mode in IS_MODES]
    rows += [corrected_row(adapter, seed, "dapo", is_mode=mode, beta=BETA) for mode in IS_MODES]
    rows += [corrected_row(adapter, seed, lt, opsm=True) for lt in ("grpo", "bnpo", "dapo")]
    rows.append(corrected_row(adapter, seed, "grpo", is_mode="token_truncate", opsm=True, beta=BETA))
    rows += [parts_row(adapter, seed, lt, ranks, micro) for lt in ("grpo", "bnpo", "dr_grpo", "dapo")
             for ranks, micro in ((2, 1), (1, 2))]
    rows.append(logits_row(adapter, seed))
    rows += advantage_rows(adapter, seed)
    return rows


__all__ = ["extra_rows"]
