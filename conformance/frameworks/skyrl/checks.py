"""SkyRL rows that are not single core-API calls: the trainer's loss reductions and every registered policy
loss on the trainer's path, the off-policy correction inside the losses, the worker's KL term, the critic
loss, GAE as SkyRL returns it and the trainer's advantage normalisation.

The trainer's path. SkyRL never reduces a policy loss by dividing it: the trainer scales the *advantages*
of each mini-batch by the loss reduction's counts (``RayPPOTrainer._normalize_advantages``, TR:1439-1478,
with ``apply_loss_reduction_to_advantages_minibatch``, S:1095-1164) and every loss ends in ``reduce_loss``,
a plain sum (S:1088-1092). The ``policy_loss`` op of ``ops.py`` runs exactly that: the trainer method (on
a namespace holding the ``cfg`` it reads), then the registered loss with the scaled advantages, then, with
``kl``, the worker's KL term (workers/worker.py:970-989). Each row compares SkyRL's scalar and its autograd
gradient w.r.t. the log-probs with the oracle's composition of spec pieces: ``aggregate(<token loss>,
<mode>)`` (``token_mean``, ``sequence_mean`` = ``seq_mean_token_mean``, ``seq_mean_token_sum_norm`` with
``max_seq_len``), the mean over prompt groups or micro-batches of each part's token mean (``prompt_mean``,
``token_mean_legacy``). A loss linear in the advantage is unchanged by scaling it first; Clip-Cov and
KL-Cov read the advantages' covariance, so their rows show what the scaling does (the findings).

A row that matches no candidate is a FAIL; a "diagnosis" then names the composition SkyRL's numbers do
equal (checked at the row's tolerance), as the message's last line.

Batches: ``conformance.frameworks.loss_batch.loss_batch`` (float32: ragged rows, left padding, a masked tool
token, an empty row, finite garbage at every masked position), redrawn until every decision the row
depends on is off its bound (the registry's ``well_conditioned``).

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]``. Row ids look like
``skyrl.policy_loss[regular,token_mean]``, ``skyrl.policy_loss[regular,token_mean,tis_ratio_type=token]``.

Sources (skyrl 0.3.0): ``S`` = ``skyrl/backends/skyrl_train/utils/ppo_utils.py``, ``SO`` =
``.../off_policy_correction_utils.py``, ``TR`` = ``skyrl/train/trainer.py``, ``C`` =
``skyrl/train/config/config.py``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.frameworks.loss_batch import NP, loss_batch, round_batch, value_loss_candidates
from conformance.frameworks.skyrl.layout import response_layout
from conformance.runner.composite import Candidate, composition_row, loss_tolerances, preset_candidates
from conformance.records.pieces import Piece, broadcast_advantages, fmt, policy_piece, scaled
from conformance.runner.rows import not_implemented_row
from conformance.records import BY_FUNCTION
from conformance.runner.rows import RowResult
from conformance.tolerances import tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.skyrl.adapter import SkyRLAdapter

DTYPE = "float32"  # the rows run in float32, the dtype SkyRL's losses see under its bf16 autocast
MAX_SEQ_LEN = 16  # algorithm.max_seq_len for seq_mean_token_sum_norm (C:653-656: set it explicitly)
GROUP = 2  # rows per prompt (the uids of prompt_mean)
MICRO = 2  # micro_train_batch_size_per_gpu (token_mean_legacy's micro-batches)
# log-ratio kinks: PPO 1 -+ 0.2, dual clip 3, CISPO's [1, 6], SAPO none, the TIS caps 2 and 5
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 3.0, 6.0))
SPEC_MODES = {"token_mean": {"mode": "token_mean"}, "sequence_mean": {"mode": "seq_mean_token_mean"},
              "seq_mean_token_sum_norm": {"mode": "seq_mean_token_sum_norm", "norm_length": float(MAX_SEQ_LEN)}}
REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean", "token_mean_legacy")


# ---------------------------------------------------------------------------------------------
# Reductions: the spec composition of each loss_reduction, and the scaled advantages it implies
# ---------------------------------------------------------------------------------------------


def _parts(reduction: str, B: int) -> list[np.ndarray]:
    """The row groups a part-wise reduction averages over: prompts (``GROUP`` rows) or micro-batches (``MICRO``)."""
    size = GROUP if reduction == "prompt_mean" else MICRO
    return [np.arange(s, min(s + size, B)) for s in range(0, B, size)]


def reduced(piece: Piece, m: np.ndarray, reduction: str) -> dict[str, Any]:
    """``{"value", "grad[logp]"}`` of ``piece`` reduced as SkyRL's ``loss_reduction`` documents it: a spec
    ``aggregate`` mode, or (``prompt_mean``, ``token_mean_legacy``) the mean over the parts of each part's
    ``aggregate(mode="token_mean")`` (a part without valid tokens adds 0 and counts)."""
    if reduction in SPEC_MODES:
        agg = SPEC_MODES[reduction]
        w = oracle.aggregate_grad(piece.value, m, 1.0, **agg)
        return {"value": oracle.aggregate(piece.value, m, **agg), "grad[logp]": piece.vjp(w)}
    parts = _parts(reduction, m.shape[0])
    value, w = 0.0, np.zeros(m.shape)
    for rows in parts:
        value += oracle.aggregate(piece.value[rows], m[rows], mode="token_mean") / len(parts)
        w[rows] = oracle.aggregate_grad(piece.value[rows], m[rows], 1.0 / len(parts), mode="token_mean")
    return {"value": value, "grad[logp]": piece.vjp(w)}


def reduction_label(reduction: str) -> str:
    if reduction in SPEC_MODES:
        return fmt(SPEC_MODES[reduction])
    part = f"prompt groups of {GROUP} rows" if reduction == "prompt_mean" else f"micro-batches of {MICRO} rows"
    return f"mean over {part} of aggregate(mode='token_mean')"


def scaled_advantages(A: np.ndarray, m: np.ndarray, reduction: str) -> np.ndarray:
    """The advantages as the trainer hands them to the loss (the hand formulas of S:1123-1158):
    ``token_mean`` A/N, ``sequence_mean`` A/(B n_b), ``seq_mean_token_sum_norm`` A/(B L), the part-wise ones
    A/(P N_p) (a count of 0 read as 1, as SkyRL's ``clamp(min=1)``)."""
    B = m.shape[0]
    if reduction == "token_mean":
        return A / max(int(m.sum()), 1)
    if reduction == "sequence_mean":
        return A / (B * np.maximum(m.sum(axis=1, keepdims=True), 1))
    if reduction == "seq_mean_token_sum_norm":
        return A / (B * MAX_SEQ_LEN)
    out = np.zeros(A.shape)
    parts = _parts(reduction, B)
    for rows in parts:
        out[rows] = A[rows] / (len(parts) * max(int(m[rows].sum()), 1))
    return out


# ---------------------------------------------------------------------------------------------
# The trainer's policy loss: SkyRL's call, the oracle's pieces
# ---------------------------------------------------------------------------------------------


def _conditioned(make: Callable[[int], dict[str, np.ndarray]], accept: Callable[[dict[str, np.ndarray]], bool], seed: int,
                 tries: int = 200) -> dict[str, np.ndarray]:
    """The first of ``make(seed + 7919 k)`` that ``accept`` takes."""
    for k in range(tries):
        batch = make(seed + 7919 * k)
        if accept(batch):
            return batch
    raise RuntimeError(f"no well-conditioned batch in {tries} tries from seed {seed}")


def _batch(seed: int, per_token_advantages: bool = False, rollout: bool = False, probabilities: bool = False) -> dict[str, np.ndarray]:
    """The float32-rounded loss batch, with ``draws`` (Clip-Cov) and, for ``rollout``, ``rollout_logp`` =
    ``old_logp - e``, e ~ N(0, 0.5) (pi_old/pi_rollout = e^e), garbage at masked positions. ``probabilities``:
    every valid log-prob at most -0.05 (DPPO reads the probabilities themselves; the loss batch's old
    log-probs, logp minus a log-ratio, may exceed 0)."""
    b = loss_batch(seed, per_token_advantages=per_token_advantages, kinks=KINKS)
    rng = np.random.default_rng(seed + 1)
    b["draws"] = rng.random(b["mask"].shape)
    if rollout:
        e = rng.normal(0.0, 0.5, size=b["mask"].shape)
        b["rollout_logp"] = np.where(b["mask"], b["old_logp"] - e, rng.uniform(-3.0, 0.0, size=e.shape))
    if probabilities:
        for name in ("old_logp", "rollout_logp") if rollout else ("old_logp",):
            b[name] = np.where(b["mask"], np.minimum(b[name], -rng.uniform(0.05, 0.5, size=b[name].shape)), b[name])
    return round_batch(b, DTYPE)


def _arrays(b: dict[str, np.ndarray], *, rollout: str | None = None, draws: bool = False, base: bool = False) -> dict[str, np.ndarray]:
    """SkyRL's arrays for a loss call (float32, its names); garbage at masked positions is sent as is."""
    f = NP[DTYPE]
    arrays = {"log_probs": b["logp"].astype(f), "old_log_probs": b["old_logp"].astype(f),
              "advantages": broadcast_advantages(b).astype(f), "loss_mask": b["mask"].astype(f)}
    if rollout is not None:
        arrays["rollout_logprobs"] = b[rollout].astype(f)
    if draws:
        arrays["clip_cov_draws"] = b["draws"].astype(f)
    if base:
        arrays["base_log_probs"] = b["ref_logp"].astype(f)
    return arrays


def trainer_loss(adapter: SkyRLAdapter, b: dict[str, np.ndarray], name: str, reduction: str, *, config: dict[str, Any] | None = None,
                 rollout: str | None = None, kl: dict[str, Any] | None = None) -> Callable[[], dict[str, Any]]:
    """SkyRL's scalar (and its gradient w.r.t. the log-probs) on the trainer's path: ``_normalize_advantages``
    with ``loss_reduction=reduction``, the registered loss ``name`` with ``AlgorithmConfig(**config)``, the
    worker's KL term with ``kl``."""
    cfg = {"loss_reduction": reduction, **(config or {})}
    if reduction == "seq_mean_token_sum_norm":
        cfg["max_seq_len"] = MAX_SEQ_LEN
    normalize: dict[str, Any] = {"micro_batch_size": MICRO}
    if reduction == "prompt_mean":
        normalize["uids"] = [str(r // GROUP) for r in range(b["mask"].shape[0])]
    params: dict[str, Any] = {"name": name, "config": cfg, "normalize": normalize}
    if kl is not None:
        params["kl"] = kl

    def got() -> dict[str, Any]:
        arrays = _arrays(b, rollout=rollout, draws=name == "clip_cov", base=kl is not None)
        r = adapter.call("policy_loss", arrays, params, wrt=["log_probs"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_probs"]}

    return got


def _piece(function: str, b: dict[str, np.ndarray], *, advantages: np.ndarray | None = None, **kw: Any) -> Piece:
    """The oracle's ``function`` on the batch (``advantages`` in place of the batch's when given)."""
    if advantages is not None:
        b = {**b, "advantages": advantages}
    if function == "clip_cov":  # ppo_token_loss(dual_clip=None) * clip_cov_mask(draws): verl's and SkyRL's Clip-Cov
        A, m, lp, old = broadcast_advantages(b), b["mask"], b["logp"], b["old_logp"]
        ppo = {k: kw[k] for k in ("eps_low", "eps_high") if k in kw}
        keep = oracle.clip_cov_mask(lp, old, A, m, b["draws"], **kw)
        return scaled(Piece(oracle.ppo_token_loss(lp, old, A, m, **ppo), lambda u: oracle.ppo_token_loss_grad(lp, old, A, m, u, **ppo)),
                      keep.astype(float))
    if function == "pg_token_loss":
        A, m = b["advantages"], b["mask"]
        return Piece(oracle.pg_token_loss(b["logp"], A, m), lambda u: oracle.pg_token_loss_grad(b["logp"], A, m, u))
    return policy_piece(function, b["logp"], b, **kw)


def _diagnosed(candidates: list[Candidate], label: str, evaluate: Callable[[], dict[str, Any]]) -> list[Candidate]:
    """The candidates with what SkyRL may compute instead as the canonical one's contrast (a FAIL names it
    when SkyRL's numbers equal it)."""
    reading = Candidate("what SkyRL computes", label, evaluate)
    return [dataclasses.replace(candidates[0], contrasts=[*candidates[0].contrasts, reading]), *candidates[1:]]


def policy_batch(seed: int, function: str, keywords: list[dict[str, Any]], reduction: str, per_token_advantages: bool = False,
                 rollout: bool = False) -> dict[str, np.ndarray]:
    """The row's batch: ``_batch`` redrawn until ``function``'s conditioning holds under every keyword set, for
    the advantages and for the advantages the trainer scales for ``reduction`` (the ratio against the rollout
    log-probs when ``rollout``)."""
    cond = BY_FUNCTION[function].well_conditioned
    mu = "rollout_logp" if rollout else "old_logp"

    def accept(b: dict[str, np.ndarray]) -> bool:
        if cond is None:
            return True
        for A in (broadcast_advantages(b), scaled_advantages(broadcast_advantages(b), b["mask"], reduction)):
            args = {"logp": b["logp"], "old_logp": b[mu], "advantages": A, "mask": b["mask"]}
            if not all(cond(args, kw) for kw in keywords):
                return False
        return True

    return _conditioned(lambda s: _batch(s, per_token_advantages, rollout, function == "dppo_token_loss"), accept, seed)


def policy_row(adapter: SkyRLAdapter, seed: int, name: str, reduction: str, function: str, spec_id: str, *,
               config: dict[str, Any] | None = None, asked: dict[str, Any] | None = None, per_token_advantages: bool = False,
               rollout: bool = False, surrogate: bool = False) -> RowResult:
    """The registered loss ``name`` under ``reduction`` on the trainer's path against ``aggregate(function(asked))``
    (canonical), with SkyRL's preset keywords (``preset``); ``surrogate``: DPPO's ratio surrogate as a variant.
    For ``clip_cov`` and ``kl_cov`` a FAIL is diagnosed against the same composition on the scaled advantages."""
    config, asked = dict(config or {}), dict(asked or {})
    preset_fn = "clip_cov_mask" if function == "clip_cov" else function
    preset = {**preset_kwargs("skyrl", preset_fn), **asked}
    mu = "rollout_logp" if rollout else "old_logp"
    b = policy_batch(seed, preset_fn, [asked, preset], reduction, per_token_advantages, rollout)
    m = b["mask"]
    ev_b = {**b, "old_logp": b[mu]}

    def ev(kw: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: reduced(_piece(function, ev_b, **kw), m, reduction)

    label = reduction_label(reduction)
    cands = [Candidate("canonical", f"{function}({fmt(asked)}) reduced by {label}", ev(asked))]
    cands += preset_candidates("skyrl", preset_fn, asked, ev, lambda kw: f"{function}({fmt(kw)}) reduced by {label}")
    if surrogate:  # -A*r*keep: the value of DPPO's gradient with upstream 1 (ratio_cap None), the same gradient
        def ratio_surrogate() -> dict[str, Any]:
            A = broadcast_advantages(ev_b)

            def grad(u: np.ndarray) -> np.ndarray:
                return oracle.dppo_token_loss_grad(b["logp"], b[mu], A, m, u, **asked)

            return reduced(Piece(grad(np.ones(m.shape)), grad), m, reduction)

        cands.append(Candidate("the ratio surrogate -A*r*keep, r on the graph (S:833, :866)",
                               f"-A*r*keep, keep of dppo_token_loss({fmt(asked)}), reduced by {label}: dppo_token_loss's "
                               "gradient, another value", ratio_surrogate, kwargs={"surrogate": "ratio (no spec keyword)"}))
    got = trainer_loss(adapter, b, name, reduction, config=config, rollout="rollout_logp" if rollout else None)
    parts = [name, reduction] + [f"{k}={v}" for k, v in _flat(config).items()] + (["rollout_logprobs"] if rollout else []) \
        + (["A=[B,T]"] if per_token_advantages else [])
    tol = loss_tolerances(DTYPE, spec_id)
    if function in ("clip_cov", "kl_cov_token_loss"):
        As = scaled_advantages(broadcast_advantages(b), m, reduction)
        kw = preset if function == "kl_cov_token_loss" else asked

        def on_scaled() -> dict[str, Any]:
            piece = _piece(function, ev_b, advantages=As, **kw)
            w = oracle.aggregate_grad(piece.value, m, 1.0, mode="token_sum")
            return {"value": oracle.aggregate(piece.value, m, mode="token_sum"), "grad[logp]": piece.vjp(w)}

        label = (f"aggregate({function}(A_s, {fmt(kw)}), mode='token_sum') with A_s the advantages the trainer scaled for "
                 f"{reduction} (TR:1456-1478): the selection (and KL-Cov's |d| term, unscaled) read the scaled advantages")
        cands = _diagnosed(cands, label, on_scaled)
    row = composition_row(f"skyrl.policy_loss[{','.join(parts)}]", f"{spec_id}+agg", f"skyrl.{name}", adapter, got, cands, tol,
                          seed=seed)
    return row


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def loss_rows(adapter: SkyRLAdapter, seed: int) -> list[RowResult]:
    rows = [policy_row(adapter, seed, "regular", r, "ppo_token_loss", "loss.ppo") for r in REDUCTIONS]
    rows += [
        policy_row(adapter, seed, "regular", "token_mean", "ppo_token_loss", "loss.ppo", per_token_advantages=True),
        policy_row(adapter, seed, "regular", "token_mean", "ppo_token_loss", "loss.ppo", config={"eps_clip_high": 0.28},
                   asked={"eps_high": 0.28}),
        policy_row(adapter, seed, "dual_clip", "token_mean", "ppo_token_loss", "loss.ppo", asked={"dual_clip": 3.0}),
        policy_row(adapter, seed, "gspo", "sequence_mean", "gspo_token_loss", "loss.gspo", asked={"eps_low": 0.2, "eps_high": 0.2}),
        policy_row(adapter, seed, "gspo", "sequence_mean", "gspo_token_loss", "loss.gspo", asked={"eps_low": 0.2, "eps_high": 0.2},
                   per_token_advantages=True),
        policy_row(adapter, seed, "cispo", "token_mean", "cispo_token_loss", "loss.cispo"),
        policy_row(adapter, seed, "cispo", "sequence_mean", "cispo_token_loss", "loss.cispo",
                   config={"cispo": {"cispo_eps_clip_low": 0.2, "cispo_eps_clip_high": 0.2}}, asked={"eps_low": 0.2, "eps_high": 0.2}),
        policy_row(adapter, seed, "sapo", "sequence_mean", "sapo_token_loss", "loss.sapo"),
        policy_row(adapter, seed, "sapo", "token_mean", "sapo_token_loss", "loss.sapo", config={"sapo": {"tau_pos": 2.0, "tau_neg": 3.0}},
                   asked={"tau_pos": 2.0, "tau_neg": 3.0}, per_token_advantages=True),
    ]
    for dppo_type, divergence in (("binary_tv", "tv"), ("binary_kl", "kl")):
        for rollout in (False, True):
            rows.append(policy_row(adapter, seed, "dppo", "token_mean", "dppo_token_loss", "loss.dppo",
                                   config={"dppo": {"dppo_type": dppo_type}}, asked={"divergence": divergence}, rollout=rollout,
                                   surrogate=True))
    for reduction in ("token_mean", "sequence_mean"):
        rows.append(policy_row(adapter, seed, "clip_cov", reduction, "clip_cov", "select.clip_cov",
                               config={"clip_cov": {"clip_ratio": 0.2, "clip_cov_lb": 0.2, "clip_cov_ub": 3.0}},
                               asked={"fraction": 0.2, "cov_low": 0.2, "cov_high": 3.0}))
        rows.append(policy_row(adapter, seed, "kl_cov", reduction, "kl_cov_token_loss", "loss.kl_cov"))
    rows += [rollout_is_row(adapter, seed), importance_sampling_row(adapter, seed), cross_entropy_row(adapter, seed)]
    return rows


def rollout_is_row(adapter: SkyRLAdapter, seed: int, reduction: str = "token_mean") -> RowResult:
    """``rollout_is_policy_loss`` (S:767-806): -sg(rho * 1[1 - eps_low < rho < 1 + eps_high]) * A * logp with
    rho = pi_theta / pi_rollout, i.e. ``pg_token_loss`` times the masked IS weight of the *current* log-probs
    against the rollout's (``rollout_is_weights(logp, rollout, mode="mask", lo=0.8, hi=1.2)``, a constant;
    SkyRL's bounds are strict, the spec's inclusive: the batch keeps every ratio off them)."""
    b = _batch(seed)  # the rollout log-probs: old_logp (its log-ratios to logp avoid the kinks 0.8 and 1.2)
    m, lp, ro = b["mask"], b["logp"], b["old_logp"]
    kw = {"mode": "mask", "lo": 0.8, "hi": 1.2}

    def ev() -> dict[str, Any]:
        w = oracle.rollout_is_weights(lp, ro, m, **kw)
        return reduced(scaled(_piece("pg_token_loss", b), w), m, reduction)

    cands = [Candidate("canonical", f"pg_token_loss * rollout_is_weights(logp, rollout, {fmt(kw)}) reduced by "
                       f"{reduction_label(reduction)}", ev)]
    got = trainer_loss(adapter, b, "rollout_is", reduction, rollout="old_logp")
    return composition_row(f"skyrl.policy_loss[rollout_is,{reduction}]", "loss.pg+offpolicy.is_weights+agg", "skyrl.rollout_is",
                           adapter, got, cands, loss_tolerances(DTYPE, "loss.pg"), seed=seed)


def importance_sampling_row(adapter: SkyRLAdapter, seed: int, reduction: str = "token_mean") -> RowResult:
    """``importance_sampling_loss`` (S:1038-1085, Tinker's): -(exp(logp - old) * A) summed over the mask; with
    the trainer's scaled advantages, ``aggregate(-A*r, mode)``; -A*r is ``kl_cov_token_loss(coef=0)``."""
    b = _batch(seed)
    m = b["mask"]
    cands = [Candidate("canonical", f"kl_cov_token_loss(coef=0.0) = -A*r reduced by {reduction_label(reduction)}",
                       lambda: reduced(_piece("kl_cov_token_loss", b, coef=0.0), m, reduction))]
    got = trainer_loss(adapter, b, "importance_sampling", reduction)
    return composition_row(f"skyrl.policy_loss[importance_sampling,{reduction}]", "loss.kl_cov+agg", "skyrl.importance_sampling",
                           adapter, got, cands, loss_tolerances(DTYPE, "loss.kl_cov"), seed=seed)


def cross_entropy_row(adapter: SkyRLAdapter, seed: int) -> RowResult:
    """``cross_entropy_loss`` (S:999-1035, SFT): -logp summed over the mask, the advantages unread (so unscaled):
    ``aggregate(pg_token_loss(logp, A=1), mode="token_sum")``."""
    b = _batch(seed)
    m = b["mask"]
    ones = {**b, "advantages": np.ones(m.shape[0])}
    cands = [Candidate("canonical", "aggregate(pg_token_loss(logp, A=1), mode='token_sum')",
                       lambda: _token_sum(_piece("pg_token_loss", ones), m))]
    got = trainer_loss(adapter, b, "cross_entropy", "token_mean")
    return composition_row("skyrl.policy_loss[cross_entropy,token_mean]", "loss.pg+agg", "skyrl.cross_entropy", adapter, got, cands,
                           loss_tolerances(DTYPE, "loss.pg"), seed=seed)


def _token_sum(piece: Piece, m: np.ndarray) -> dict[str, Any]:
    return {"value": oracle.aggregate(piece.value, m, mode="token_sum"),
            "grad[logp]": piece.vjp(oracle.aggregate_grad(piece.value, m, 1.0, mode="token_sum"))}


# ---------------------------------------------------------------------------------------------
# The off-policy correction inside the losses (SO:257-385): weights and masks against the composition
# ---------------------------------------------------------------------------------------------

# OffPolicyCorrectionConfig settings -> the spec's weight and keep criteria (rollout_is_weights /
# rollout_rejection_mask keywords on (old, rollout)); "chained": SkyRL computes the later criteria on the
# mask the earlier ones left (SO:315-345)
CORRECTIONS: dict[str, tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]]]] = {
    "tis_ratio_type=token": ({"tis_ratio_type": "token"}, {"hi": 2.0}, []),
    "tis_ratio_type=sequence": ({"tis_ratio_type": "sequence"}, {"level": "sequence", "hi": 5.0}, []),
    "sequence_mask_metric=geometric": ({"sequence_mask_metric": "geometric", "geo_mask_low": 0.9, "geo_mask_high": 1.1}, None,
                                       [{"level": "seq_mean", "lo": 0.9, "hi": 1.1}]),
    "sequence_mask_metric=product": ({"sequence_mask_metric": "product"}, None, [{"level": "seq_sum", "lo": 0.5, "hi": 2.0}]),
    "outlier_token_is_threshold=0.5,2.0": ({"outlier_token_is_threshold_low": 0.5, "outlier_token_is_threshold_high": 2.0}, None,
                                           [{"level": "seq_all", "lo": 0.5, "hi": 2.0}]),
    "token_mask_is_threshold=0.6,1.6": ({"token_mask_is_threshold_low": 0.6, "token_mask_is_threshold_high": 1.6}, None,
                                        [{"level": "token", "lo": 0.6, "hi": 1.6}]),
    "token_mask+geometric+tis=token": ({"token_mask_is_threshold_low": 0.6, "token_mask_is_threshold_high": 1.6,
                                        "sequence_mask_metric": "geometric", "geo_mask_low": 0.9, "geo_mask_high": 1.1,
                                        "tis_ratio_type": "token"}, {"hi": 2.0},
                                       [{"level": "token", "lo": 0.6, "hi": 1.6}, {"level": "seq_mean", "lo": 0.9, "hi": 1.1}]),
}


def correction_row(adapter: SkyRLAdapter, seed: int, label: str, reduction: str = "token_mean") -> RowResult:
    """``ppo_policy_loss`` (``regular``) with ``off_policy_correction`` set and ``rollout_logprobs`` given, on the
    trainer's path: against ``corrected_policy_loss`` (kl_coef 0) with the oracle's weights and keep mask
    (``rejected="drop"`` canonical; SkyRL's ``"zero"``: the trainer scaled the advantages by the uncorrected
    counts, so a rejected token still counts, preset skyrl). With several masks, SkyRL's chaining (each later
    criterion on the tokens the earlier ones kept) is a variant."""
    correction, weight_kw, keep_kws = CORRECTIONS[label]

    def accept(b: dict[str, np.ndarray]) -> bool:
        """Every decision off its bound; each mask keeps some valid tokens and rejects others; the TIS cap binds
        on some valid token (so drop vs zero, and the cap, decide the row)."""
        m = b["mask"]
        args = {"old_logp": b["old_logp"], "rollout_logp": b["rollout_logp"], "mask": m}
        if not all(BY_FUNCTION["rollout_rejection_mask"].well_conditioned(args, kw) for kw in keep_kws):
            return False
        for kw in keep_kws:
            kept = int((oracle.rollout_rejection_mask(*args.values(), **kw) & m).sum())
            if not 0 < kept < int(m.sum()):
                return False
        if weight_kw is None:
            return True
        if not BY_FUNCTION["rollout_is_weights"].well_conditioned(args, weight_kw):
            return False
        capped = oracle.rollout_is_weights(*args.values(), **weight_kw)
        raw = oracle.rollout_is_weights(*args.values(), **{**weight_kw, "mode": "none"})
        return bool((m & (capped < raw)).any())

    b = _conditioned(lambda s: _batch(s, rollout=True), accept, seed)
    m, lp, old, ro = b["mask"], b["logp"], b["old_logp"], b["rollout_logp"]
    A = broadcast_advantages(b)
    agg = SPEC_MODES[reduction]

    def criteria(chained: bool) -> tuple[np.ndarray, np.ndarray]:
        keep = m.copy()
        for kw in keep_kws:
            keep &= oracle.rollout_rejection_mask(old, ro, keep if chained else m, **kw)
        base = keep if chained else m
        w = np.ones(m.shape) if weight_kw is None else oracle.rollout_is_weights(old, ro, base, **weight_kw)
        return w, keep

    def ev(rejected: str, chained: bool = False) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            w, keep = criteria(chained)
            args = (lp, old, b["ref_logp"], A, w, keep, m)
            return {"value": oracle.corrected_policy_loss(*args, rejected=rejected, **agg),
                    "grad[logp]": oracle.corrected_policy_loss_grad(*args, 1.0, rejected=rejected, **agg)}
        return run

    formula = "corrected_policy_loss(is_weights={}, keep_mask={}, rejected={!r}, {})"
    w_text = "1" if weight_kw is None else f"rollout_is_weights(old, rollout, {fmt(weight_kw)})"
    k_text = " & ".join(f"rollout_rejection_mask(old, rollout, {fmt(kw)})" for kw in keep_kws) or "mask"
    cands = [Candidate("canonical", formula.format(w_text, k_text, "drop", fmt(agg)), ev("drop")),
             Candidate("rejected='zero'", formula.format(w_text, k_text, "zero", fmt(agg)), ev("zero"), preset="skyrl",
                       kwargs={"rejected": "zero"})]
    if len(keep_kws) > 1 or (keep_kws and weight_kw is not None):
        cands.append(Candidate("chained masks (SO:315-345): each later criterion and the TIS weight on the tokens the earlier "
                               "masks kept", formula.format(w_text + " on the kept tokens", k_text + ", chained", "zero", fmt(agg)),
                               ev("zero", chained=True), kwargs={"rejected": "zero", "masks": "chained"}))
    got = trainer_loss(adapter, b, "regular", reduction, config={"off_policy_correction": correction}, rollout="rollout_logp")
    return composition_row(f"skyrl.policy_loss[regular,{reduction},{label}]", "offpolicy.loss", "skyrl.apply_off_policy_correction",
                           adapter, got, cands, loss_tolerances(DTYPE, "offpolicy.loss"), seed=seed)


def correction_rows(adapter: SkyRLAdapter, seed: int) -> list[RowResult]:
    rows = [correction_row(adapter, seed, label) for label in CORRECTIONS]
    return rows + [correction_row(adapter, seed, "tis_ratio_type=token", "sequence_mean"),
                   correction_row(adapter, seed, "sequence_mask_metric=product", "sequence_mean")]


# ---------------------------------------------------------------------------------------------
# The worker's loss: the policy loss plus the KL term (workers/worker.py:970-989)
# ---------------------------------------------------------------------------------------------

KL_COEF = 0.1


def worker_loss_row(adapter: SkyRLAdapter, seed: int, reduction: str, estimator: str) -> RowResult:
    """``regular`` plus ``kl_loss_coef * masked_mean(compute_approx_kl(...), dim=-1).mean()`` (one micro-batch, one
    rank) against ``policy_loss(kl_coef, kl_estimator, mode)`` (canonical: one aggregation for both terms),
    then SkyRL's composition: ``aggregate(ppo_token_loss, mode) + kl_coef * aggregate(kl_penalty, mode=
    'seq_mean_token_mean')`` with its presets (preset skyrl; NOT_EXPRESSIBLE["skyrl"]["policy_loss"])."""
    b = _batch(seed)
    m, lp, old, ref = b["mask"], b["logp"], b["old_logp"], b["ref_logp"]
    A = broadcast_advantages(b)
    agg = SPEC_MODES[reduction]

    def canonical() -> dict[str, Any]:
        kw = {"kl_coef": KL_COEF, "kl_estimator": estimator, **agg}
        return {"value": oracle.policy_loss(lp, old, ref, A, m, **kw), "grad[logp]": oracle.policy_loss_grad(lp, old, ref, A, m, 1.0, **kw)}

    def skyrl() -> dict[str, Any]:
        ppo = reduced(_piece("ppo_token_loss", b, **preset_kwargs("skyrl", "ppo_token_loss")), m, reduction)
        kl_kw = {**preset_kwargs("skyrl", "kl_penalty"), "estimator": estimator}
        if estimator != "k3":
            kl_kw = {"estimator": estimator}
        kl = oracle.kl_penalty(lp, ref, m, **kl_kw)
        w = oracle.aggregate_grad(kl, m, KL_COEF, mode="seq_mean_token_mean")
        return {"value": ppo["value"] + KL_COEF * oracle.aggregate(kl, m, mode="seq_mean_token_mean"),
                "grad[logp]": ppo["grad[logp]"] + oracle.kl_penalty_grad(lp, ref, m, w, **kl_kw)}

    cands = [Candidate("canonical", f"policy_loss(kl_coef={KL_COEF}, kl_estimator={estimator!r}, {fmt(agg)})", canonical),
             Candidate("the KL term by seq_mean_token_mean (worker.py:980)",
                       f"aggregate(ppo_token_loss(preset skyrl), {fmt(agg)}) + {KL_COEF} * aggregate(kl_penalty({estimator!r}, "
                       "preset skyrl), mode='seq_mean_token_mean')", skyrl, preset="skyrl",
                       kwargs={"aggregate": {"kl term": "seq_mean_token_mean"}})]
    got = trainer_loss(adapter, b, "regular", reduction, kl={"coef": KL_COEF, "estimator": estimator})
    return composition_row(f"skyrl.worker_loss[regular,{reduction},kl_estimator_type={estimator}]", "loss.policy", "skyrl.worker.loss",
                           adapter, got, cands, loss_tolerances(DTYPE, "loss.policy"), seed=seed)


def worker_rows(adapter: SkyRLAdapter, seed: int) -> list[RowResult]:
    return [worker_loss_row(adapter, seed, "token_mean", "k3"), worker_loss_row(adapter, seed, "sequence_mean", "k3"),
            worker_loss_row(adapter, seed, "sequence_mean", "k1"), worker_loss_row(adapter, seed, "token_mean", "k2")]


# ---------------------------------------------------------------------------------------------
# The critic loss (S:155-173): 0.5 * max(...) then masked_mean(dim=-1).mean()
# ---------------------------------------------------------------------------------------------


def value_row(adapter: SkyRLAdapter, seed: int, value_clip: float | None) -> RowResult:
    b = _batch(seed)
    m = b["mask"]
    f = NP[DTYPE]

    def got() -> dict[str, Any]:
        arrays = {"values": b["values"].astype(f), "old_values": b["old_values"].astype(f), "returns": b["returns"].astype(f),
                  "loss_mask": m.astype(f)}
        r = adapter.call("value_loss", arrays, {"value_clip": value_clip}, wrt=["values"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[values]": r["grads"]["values"]}

    asked = {} if value_clip is None else {"clip": value_clip}
    cands = value_loss_candidates("skyrl", b, {"mode": "seq_mean_token_mean"}, asked)
    return composition_row(f"skyrl.ppo_critic_loss[value_clip={value_clip}]", "loss.value+agg", "skyrl.ppo_critic_loss", adapter,
                           got, cands, loss_tolerances(DTYPE, "loss.value"), seed=seed)


# ---------------------------------------------------------------------------------------------
# Advantages as the trainer gets them
# ---------------------------------------------------------------------------------------------


def gae_row(adapter: SkyRLAdapter, seed: int, gamma: float, lam: float, garbage: bool) -> RowResult:
    """``compute_gae_advantage_return`` (S:1256-1283) on the loss batch laid out as SkyRL's trainer lays it out
    (``response_layout``: each response right-aligned, ``response_mask`` 1 over the whole response): SkyRL's
    (whitened advantages, returns), mapped back, against ``(whiten(gae(...).advantages, mask), gae(...).returns)``
    at the valid positions. ``garbage``: the masked tool tokens inside a response hold the batch's values (the
    critic's output there), else 0. A FAIL is diagnosed against the recursion and the whitening over the whole
    response, its masked tokens included as steps (S:1274-1282)."""
    b = _batch(seed)
    m = b["mask"]
    r = np.where(m, b["token_rewards"], 0.0)  # SkyRL's rewards are 0 off the response's last token (TR:1088-1091)
    v = b["values"] if garbage else np.where(m, b["values"], 0.0)
    f = NP[DTYPE]
    layout = response_layout(m)
    span = layout.back(layout.response_mask)  # the whole response, in the spec's columns
    v = np.where(span, v, 0.0)  # the leading padding feeds no response position (S:1274-1278 runs backwards)

    def got() -> dict[str, Any]:
        arrays = {"token_level_rewards": layout.place(r).astype(f), "values": layout.place(v, inside=True).astype(f),
                  "response_mask": layout.response_mask.astype(f)}
        out = adapter.call("advantages", arrays, {"name": "gae", "gamma": gamma, "lambd": lam})["outputs"]
        return {"value": np.where(m, layout.back(out["advantages"]), 0.0),
                "returns": np.where(m, layout.back(out["returns"]), 0.0)}

    def expected(steps: np.ndarray) -> dict[str, Any]:
        adv, ret = oracle.gae(r, v, steps, gamma=gamma, lam=lam)
        return {"value": np.where(m, oracle.whiten(np.where(steps, adv, 0.0), steps), 0.0), "returns": np.where(m, ret, 0.0)}

    tol = {"value": tolerance("adv.whiten", DTYPE, "value"), "returns": tolerance("adv.gae", DTYPE, "value")}
    cands = [Candidate("canonical", f"(whiten(gae(gamma={gamma:g}, lam={lam:g}).advantages, mask), gae(...).returns)",
                       lambda: expected(m))]
    rid = f"skyrl.compute_gae_advantage_return[gamma={gamma:g},lambd={lam:g},{'garbage' if garbage else 'zeros'} at masked positions]"
    label = ("the recursion and the whitening over the whole response, its masked tool tokens included as steps with "
             "their values and reward 0: (whiten(gae(r, v, response_mask).advantages, response_mask), its returns) "
             "(S:1274-1282, response_mask TR:917)")
    return composition_row(rid, "adv.gae+adv.whiten", "skyrl.compute_gae_advantage_return", adapter, got,
                           _diagnosed(cands, label, lambda: expected(span)), tol, seed=seed)


def reinforce_pp_row(adapter: SkyRLAdapter, seed: int, gamma: float) -> RowResult:
    """``reinforce++`` (S:1167-1199) on the loss batch laid out as SkyRL's trainer lays it out (``response_layout``:
    each response right-aligned, ``response_mask`` 1 over the whole response, TR:1168-1170), with finite garbage in
    the rewards at the padding and 0 at the masked tool token inside row 3's response (the multi-turn generator puts
    each turn's reward on its last response token, train/generators/skyrl_gym_generator.py:636-648): against
    ``reinforce_pp_advantages`` and its gap variants at the valid positions. SkyRL's reset at a masked position
    (:1194) only meets the leading padding there, so the masked tool token is a step of the return and of the
    whitening; a FAIL is diagnosed against that reading."""
    b = _batch(seed)
    m = b["mask"]
    f = NP[DTYPE]
    layout = response_layout(m)
    span = layout.back(layout.response_mask)  # the whole response, in the spec's columns
    r = np.where(span & ~m, 0.0, b["token_rewards"])  # 0 at the tool token, the batch's garbage at the padding

    def got() -> dict[str, Any]:
        arrays = {"token_level_rewards": layout.place(r).astype(f), "response_mask": layout.response_mask.astype(f)}
        out = adapter.call("advantages", arrays, {"name": "reinforce++", "gamma": gamma})["outputs"]
        return {"value": np.where(m, layout.back(out["advantages"]), 0.0), "returns": np.where(m, layout.back(out["returns"]), 0.0)}

    def ev(kw: dict[str, Any], steps: np.ndarray = m) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            adv, ret = oracle.reinforce_pp_advantages(np.where(steps, r, 0.0), steps, gamma=gamma, **kw)
            return {"value": np.where(m, adv, 0.0), "returns": np.where(m, ret, 0.0)}
        return run

    cands = [Candidate("canonical", f"reinforce_pp_advantages(gamma={gamma:g})", ev({}))]
    cands += [Candidate(f"gap={gap!r}", f"reinforce_pp_advantages(gamma={gamma:g}, gap={gap!r})", ev({"gap": gap}),
                        kwargs={"gap": gap}) for gap in ("reset", "discount")]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value"), "returns": tolerance("adv.gae", DTYPE, "value")}
    label = ("the return over every response position, its masked tool tokens included as steps with reward 0, whitened "
             "over the whole response: reinforce_pp_advantages(r, response_mask) at the valid positions (S:1190-1196, "
             "response_mask TR:917, TR:1168-1170)")
    return composition_row(f"skyrl.reinforce++[gamma={gamma:g},loss batch]", "adv.reinforce_pp",
                           "skyrl.compute_reinforce_plus_plus_outcome_advantage", adapter, got,
                           _diagnosed(cands, label, ev({}, span)), tol, seed=seed)


def batch_normalize_row(adapter: SkyRLAdapter, seed: int) -> RowResult:
    """``RayPPOTrainer._normalize_advantages`` with ``advantage_batch_normalize`` (TR:1448-1454) and
    ``loss_reduction="token_mean"``, on per-token advantages as the estimators return them (0 at masked
    positions, S:1334): against ``whiten(A, mask) / N`` at the valid positions (N the valid tokens), then the
    biased variance. A FAIL is diagnosed against SkyRL's mean over all B*T positions."""
    b = _batch(seed, per_token_advantages=True)
    m = b["mask"]
    A = np.where(m, b["advantages"], 0.0)
    N = int(m.sum())

    def got() -> dict[str, Any]:
        f = NP[DTYPE]
        out = adapter.call("normalize_advantages", {"advantages": A.astype(f), "loss_mask": m.astype(f)},
                           {"config": {"advantage_batch_normalize": True, "loss_reduction": "token_mean"}})["outputs"]
        return {"value": np.where(m, out["advantages"], 0.0)}

    def whitened(**kw: Any) -> Callable[[], dict[str, Any]]:
        return lambda: {"value": oracle.whiten(A, m, **kw) / N}

    def all_positions() -> dict[str, Any]:  # the hand formula of TR:1450-1454
        mean = A.mean()
        var = float((((A - mean) ** 2) * m).sum() / N)
        return {"value": np.where(m, (A - mean) / math.sqrt(max(var, 1e-8)), 0.0) / N}

    cands = [Candidate("canonical", "whiten(A, mask) / N", whitened()),
             Candidate("std_ddof=0", "whiten(A, mask, std_ddof=0) / N", whitened(std_ddof=0), kwargs={"std_ddof": 0})]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value")}
    label = ("(A - mean(A over all B*T positions, the masked zeros included)) / sqrt(sum over valid positions of (A - that "
             "mean)^2 / N) / N (TR:1450-1454: advantages.mean() is unmasked)")
    return composition_row("skyrl.normalize_advantages[advantage_batch_normalize,token_mean]", "adv.whiten+agg",
                           "skyrl.RayPPOTrainer._normalize_advantages", adapter, got, _diagnosed(cands, label, all_positions),
                           tol, seed=seed)


def advantage_rows(adapter: SkyRLAdapter, seed: int) -> list[RowResult]:
    rows = [gae_row(adapter, seed, gamma, lam, garbage) for gamma, lam in ((1.0, 1.0), (0.99, 0.95)) for garbage in (False, True)]
    rows += [reinforce_pp_row(adapter, seed, gamma) for gamma in (1.0, 0.9)]
    if adapter.has_trainer:
        rows.append(batch_normalize_row(adapter, seed))
    return rows


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


# every name SkyRL's registries hold (PolicyLossRegistry S:478-514, AdvantageEstimatorRegistry S:413-442) -> where it
# is checked; a registered name missing here gets a "not implemented" row (a newer SkyRL)
POLICY_LOSSES = {
    "regular": "core ppo_token_loss, decoupled_ppo_token_loss, policy_loss; skyrl.policy_loss[regular,*], skyrl.worker_loss[*]",
    "dual_clip": "core ppo_token_loss (dual_clip), policy_loss; skyrl.policy_loss[dual_clip,*]",
    "gspo": "core gspo_token_loss; skyrl.policy_loss[gspo,*]",
    "cispo": "core cispo_token_loss; skyrl.policy_loss[cispo,*]",
    "sapo": "core sapo_token_loss; skyrl.policy_loss[sapo,*]",
    "dppo": "skyrl.policy_loss[dppo,*] (the core dppo_token_loss is not implemented: another surrogate)",
    "clip_cov": "core clip_cov_mask; skyrl.policy_loss[clip_cov,*]",
    "kl_cov": "core kl_cov_token_loss; skyrl.policy_loss[kl_cov,*]",
    "rollout_is": "skyrl.policy_loss[rollout_is,*]",
    "importance_sampling": "skyrl.policy_loss[importance_sampling,*]",
    "cross_entropy": "skyrl.policy_loss[cross_entropy,*]",
}
ESTIMATORS = {
    "gae": "core gae; skyrl.compute_gae_advantage_return[*]",
    "grpo": "core grpo_advantages",
    "rloo": "core rloo_advantages",
    "reinforce++": "core reinforce_pp_advantages; skyrl.reinforce++[*]",
    "maxrl": "core maxrl_advantages",
}


def registry_rows(adapter: SkyRLAdapter) -> list[RowResult]:
    """A "not implemented" row for each registered loss or estimator this module does not know."""
    rows = []
    for kind, known, names in (("policy loss", POLICY_LOSSES, adapter.policy_losses()),
                               ("advantage estimator", ESTIMATORS, adapter.advantage_estimators())):
        rows += [not_implemented_row(f"skyrl.{name}", "loss.*" if kind == "policy loss" else "adv.*", f"skyrl.{name}", adapter,
                                     f"{kind} {name!r} is registered by this SkyRL but has no row in "
                                     "conformance/frameworks/skyrl/checks.py") for name in names if name not in known]
    return rows


def extra_rows(adapter: SkyRLAdapter, seed: int = 0) -> list[RowResult]:
    """Every SkyRL-specific row (the trainer-path rows need ``skyrl.train.trainer``; without it they are errors
    that say why)."""
    return (loss_rows(adapter, seed) + correction_rows(adapter, seed) + worker_rows(adapter, seed)
            + [value_row(adapter, seed, clip) for clip in (0.2, None)] + advantage_rows(adapter, seed) + registry_rows(adapter))


__all__ = ["CORRECTIONS", "ESTIMATORS", "POLICY_LOSSES", "REDUCTIONS", "advantage_rows", "batch_normalize_row",
           "correction_row", "correction_rows", "extra_rows", "gae_row", "loss_rows", "policy_batch", "policy_row",
           "reduced", "registry_rows", "reinforce_pp_row", "scaled_advantages", "trainer_loss", "value_row",
           "worker_loss_row", "worker_rows"]
