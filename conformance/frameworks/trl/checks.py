"""TRL checks that are not single core-API functions: the GRPO loss of every ``loss_type`` (value and
gradient), TRL's bfloat16 paths, and TRL's free helpers (``nanstd``, ``selective_log_softmax_and_entropy``)
and reward functions (``get_soft_overlong_punishment`` at every length around DAPO eq. 13's boundaries,
``trl.get_soft_overlong_punishment``; spec v1.1 reward.overlong).

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.frameworks.trl.adapter.TRLAdapter``), rows with ids like ``trl.grpo_loss[dapo,beta=0.04]``,
``trl.rloo_loss[beta=0]``, ``trl.token_logprobs[bfloat16]``, ``trl.nanstd``,
``trl.get_high_entropy_mask[ranks=3,rho=0.2]``, ``trl.adaptive_entropy[rises,applied]``.

How a GRPO loss row is checked
------------------------------
1. A seeded batch in TRL's layout: 5 rows, left-padded prompts, right-padded completions of lengths
   5, 3 (EOS), 1, 4 (EOS, one tool token masked out through ``tool_mask``) and 0 (a masked-out,
   e.g. truncated, completion); ``max_completion_length`` 7 (> the completion width 5, so Dr. GRPO's
   constant is told apart from the padded width).
2. TRL's current per-token log-probs (``adapter.grpo_current_logps``) give ``old = logp - d`` and
   ``ref = logp - k``, with seeded log-ratios ``d`` both inside and far outside every clip range in
   use, kept 0.02 away from every clip boundary (also for the sequence-level ratios).
3. ``adapter.grpo_loss`` runs ``GRPOTrainer._compute_loss`` (trl 1.16.0 ``trainer/grpo_trainer.py:3020``)
   with the configuration and returns the loss, the LM-head inputs it saw (final hidden states, head
   weight), and the gradients of the loss w.r.t. the per-token log-probs of the fused head, the hidden
   states and the head weight.
4. The oracle (float64, on exactly those hidden states and weight) recomputes the log-probs with
   ``token_logprobs_from_hidden`` and composes the loss from spec pieces, e.g. ``dapo`` =
   ``aggregate(ppo_token_loss(...), mode="token_mean", num_tokens=num_items_in_batch)``; its gradient
   is the chain of the pieces' ``_grad`` functions, ending in ``token_logprobs_from_hidden_grad``
   (dL/d logits chained through the LM-head GEMM, since TRL never materialises the logits).
5. The first composition that matches value and every gradient decides the status: the canonical
   one (``pass``), else a named variant (``preset``, e.g. CISPO's absolute bound, TRL's KL times the
   importance ratio: spec v1.1 ``kl_loss_term(gradient="bias_corrected")``, or k3 times GSPO's s_b at
   ``importance_sampling_level="sequence"``), else ``fail`` with the canonical mismatch.

Spec v1.1 policy losses in the loss
-----------------------------------
``loss_type="sapo"`` (``grpo_trainer.py:3121-3124``) is ``sapo_token_loss(tau_pos=sapo_temperature_pos,
tau_neg=sapo_temperature_neg)`` (``grpo_config.py:714-729``), reduced like ``grpo``
(``seq_mean_token_mean``, :3153-3157); with ``importance_sampling_level="sequence"`` the gate acts on
GSPO's s_b (:3086-3088), i.e. ``sapo_token_loss`` at the row means of logp and old_logp
(``sapo_sequence_piece``). ``luspo`` is ``gspo_token_loss`` (or ``ppo_token_loss`` at the default token
level) with ``seq_mean_token_sum`` (:3175-3181). ``vespo`` (:3125-3137) is ``vespo_token_loss`` with
GRPOConfig's ``vespo_*`` (its gamma weight phi(w), :2972-3018; TRL's log-ratio clamps are preset trl);
on-policy phi(1) = 1 and it is ``pg_token_loss``. The installed TRL's loss types are ``adapter.grpo_loss_types()`` (the
``GRPOConfig`` help and the branches of ``_compute_loss``); one without a configuration here gets a
"not implemented" row saying so (``extra_rows``).

Entropy terms and the adaptive entropy controller (spec v1.1)
--------------------------------------------------------------
With ``entropy_coef`` the loss gets ``entropy_bonus(H, mask, mode="token_mean")`` whatever ``loss_type``
(``grpo_trainer.py:3186-3211``; H = ``token_entropy_from_hidden`` of the hidden states TRL saw); with
``top_entropy_quantile < 1`` the policy token loss (not the KL term) is multiplied by
``entropy_top_mask(H, mask, rho=top_entropy_quantile)`` (:3049-3052, :3143-3144) and the bonus acts on
``mask & keep`` only (``entropy_terms``). ``trl.get_high_entropy_mask[ranks=3,rho=*]`` rows call
``get_high_entropy_mask`` as each of three simulated data-parallel ranks (its accelerator gathers the other
ranks' ``entropies[mask].float()``, ``SimulatedRanks`` of the adapter) and compare the joined masks with
``entropy_top_mask`` of the whole batch; the batches are built so that per-rank quantiles give other
masks. ``trl.get_high_entropy_mask[pool>2^24]`` gathers a pool beyond ``torch.quantile``'s 2**24
elements. ``trl.adaptive_entropy[*]`` rows run ``_compute_loss`` with ``use_adaptive_entropy=True`` from a
set controller state and compare the coefficient TRL stores with ``entropy_coef_update`` and the one it
applies (read from the gradient w.r.t. the entropies) with ``entropy_coef_applied``.

Rollout corrections (spec v1.1) in the loss
-------------------------------------------
Rows with ``is=<vllm_importance_sampling_mode>`` and/or ``opsm`` drive the same ``_compute_loss`` with
TRL's rollout corrections on (``grpo_trainer.py:3068-3081``, ``:3140-3150``): the per-token loss times the
OPSM keep mask, times ``inputs["importance_sampling_ratio"]`` (read only with ``use_vllm=True``, so the
adapter builds those trainers around its stubbed vLLM backend), then ``+ beta * per_token_kl``. The batch
gains the rollout engine's log-probs ``sampling_per_token_logps`` (``add_rollout``: each row's mean
``sampling - logp`` is set, so OPSM's statistic is off any threshold) and the ratio tensor TRL would
have computed for the configured mode: ``rollout_is_weights`` of the oracle on ``old`` vs ``sampling``,
``(B, 1)`` for ``sequence_*`` modes and ``(B, C)`` for ``token_*`` (``grpo_trainer.py:2676-2678``). TRL's
composition is ``aggregate(keep*w*policy_token_loss + beta*kl_penalty, mask, mode)`` with
``w = rollout_is_weights(old_logp, sampling_logp, **TRL's mode)`` and ``keep =
off_policy_sequence_mask(logp, sampling_logp (else old_logp), A, threshold)``: the KL term unweighted and
every valid token (rejected or not) in the denominator, i.e. spec offpolicy.loss's
``corrected_policy_loss(weight_kl=False, rejected="zero")``. Without OPSM that is canonical (a zero weight
``w`` is not a rejection: it counts under ``"drop"`` too); with OPSM the canonical composition is
``rejected="drop"`` (OPSM's rejected tokens leave the loss and its count, ``opsm_keep``), tried first, and
TRL's is preset trl (``rejected='zero'``). Two contrasts of TRL's composition, reported in the row's
message: the correction also on the KL term (ms-swift's placement per offpolicy.is_weights.md, not
verified here), and every token with keep*w = 0 removed from the loss mask, numerator and denominator.

The overflow class (``overflow_configs``, spec v1.1 ``0·inf := 0``): a zero-advantage row whose log-ratio
is 800 (``add_overflow``), judged like every framework's ``ppo_token_loss`` / ``gspo_token_loss`` /
``sapo_token_loss`` golden vectors of that class.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import oracle
from conformance.records.presets import preset_kwargs
from conformance.frameworks.trl.modes import is_mode_to_spec
from conformance.records import cases, inputs, make_case
from conformance.records.pieces import Piece, scaled
from conformance.runner.composite import Candidate, compare_candidate, composition_row
from conformance.runner.rows import RowResult, error_row, not_implemented_row, seeds_for
from conformance.tolerances import Tol, tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.trl.adapter import TRLAdapter

# ---------------------------------------------------------------------------------------------
# The batch
# ---------------------------------------------------------------------------------------------

B, P, C = 5, 4, 5
MAX_COMPLETION_LENGTH = 7
PROMPT_LENGTHS = (4, 2, 3, 1, 4)
COMPLETION_LENGTHS = (5, 3, 1, 4, 0)
EOS_ROWS = (1, 3)
TOOL_TOKEN = (3, 1)  # (row, completion column) masked out by tool_mask
ADVANTAGE_SIGNS = np.array([1.0, -1.0, -1.0, 1.0, 1.0])  # both signs on rows with several tokens
# log-ratio boundaries of every clip in use: 1 - 0.2, 1 + 0.2, 1 + 0.28, delta 1.5, CISPO's absolute
# 0.2 and 5.0; ratios within 0.02 (in log space) of one are re-drawn.
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 1.5, 0.2, 5.0))
MARGIN = 0.02


def _far(x: float) -> bool:
    return all(abs(x - k) > MARGIN for k in KINKS)


def _draw_log_ratio(rng: np.random.Generator) -> float:
    while True:
        if rng.random() < 0.6:
            d = float(rng.uniform(-0.6, 0.6))
        else:
            d = float(rng.choice([-1.0, 1.0]) * rng.uniform(1.7, 2.3))
        if _far(d):
            return d


def make_batch(seed: int, *, per_token_advantages: bool = False) -> dict[str, torch.Tensor]:
    """The TRL-layout batch (no old/ref log-probs yet)."""
    rng = np.random.default_rng(seed)
    prompt_ids = np.zeros((B, P), dtype=np.int64)
    prompt_mask = np.zeros((B, P), dtype=np.int64)
    completion_ids = np.zeros((B, C), dtype=np.int64)
    completion_mask = np.zeros((B, C), dtype=np.int64)
    for b in range(B):
        p, c = PROMPT_LENGTHS[b], COMPLETION_LENGTHS[b]
        prompt_ids[b, P - p :] = rng.integers(3, 32, size=p)
        prompt_mask[b, P - p :] = 1
        completion_ids[b, :c] = rng.integers(3, 32, size=c)
        completion_mask[b, :c] = 1
        if b in EOS_ROWS and c:
            completion_ids[b, c - 1] = 1  # EOS; padding after it is the pad id 0
    tool_mask = np.ones((B, C), dtype=np.int64)
    tool_mask[TOOL_TOKEN] = 0
    if per_token_advantages:
        adv = rng.normal(0.0, 1.0, size=(B, C))
    else:
        adv = ADVANTAGE_SIGNS * (0.3 + np.abs(rng.normal(0.0, 1.0, size=B)))
    return {
        "prompt_ids": torch.from_numpy(prompt_ids),
        "prompt_mask": torch.from_numpy(prompt_mask),
        "completion_ids": torch.from_numpy(completion_ids),
        "completion_mask": torch.from_numpy(completion_mask),
        "tool_mask": torch.from_numpy(tool_mask),
        "advantages": torch.tensor(adv, dtype=torch.float32),
    }


def add_old_and_ref(batch: dict[str, torch.Tensor], logp: torch.Tensor, seed: int, *, on_policy: bool = False) -> dict[str, torch.Tensor]:
    """``old = logp - d`` and ``ref = logp - k`` ([B, C], 0 on padding as TRL's own are)."""
    rng = np.random.default_rng(seed + 1)
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).numpy().astype(bool)
    d = np.zeros((B, C))
    if not on_policy:
        for b in range(B):
            while True:
                d[b] = [_draw_log_ratio(rng) for _ in range(C)]
                n = loss_mask[b].sum()
                if n == 0 or _far(float(d[b][loss_mask[b]].mean())):
                    break
    k = rng.uniform(-0.5, 0.5, size=(B, C))
    pad = batch["completion_mask"].numpy() == 0
    lp = logp.detach().to(torch.float64).numpy()
    old = np.where(pad, 0.0, lp - d)
    ref = np.where(pad, 0.0, lp - k)
    out = dict(batch)
    out["old_per_token_logps"] = torch.tensor(old, dtype=torch.float32)
    out["ref_per_token_logps"] = torch.tensor(ref, dtype=torch.float32)
    if on_policy:  # bitwise TRL's own values: the ratio is exactly 1
        out["old_per_token_logps"] = logp.detach().clone()
    return out


# The overflow rows (overflow_configs): row 0 (five loss tokens) gets A = 0 and old = logp - 800 at one
# token (token level) or at every loss token (sequence level: its mean log-ratio is then 800); exp(800) is
# inf in float32 (and float64). The golden vectors' 800, far beyond float32's 88.7.
OVERFLOW_LOG_RATIO = 800.0
OVERFLOW_ROW, OVERFLOW_TOKEN = 0, 1


def add_overflow(batch: dict[str, torch.Tensor], *, sequence: bool) -> dict[str, torch.Tensor]:
    """Row ``OVERFLOW_ROW`` with a zero advantage and log-ratio ``OVERFLOW_LOG_RATIO`` at token
    ``OVERFLOW_TOKEN`` (``sequence``: at every loss token of the row); the other rows as drawn."""
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).bool()
    out = dict(batch)
    old = batch["old_per_token_logps"].clone()
    hit = torch.zeros_like(loss_mask)
    if sequence:
        hit[OVERFLOW_ROW] = loss_mask[OVERFLOW_ROW]
    else:
        hit[OVERFLOW_ROW, OVERFLOW_TOKEN] = True
    if not bool((hit & loss_mask).any()):
        raise ValueError("add_overflow: the overflow token is not a loss token of the batch")
    # old = logp - d with TRL's own logp (add_old_and_ref), so old - 800 makes the log-ratio d + 800
    old[hit] = old[hit] - OVERFLOW_LOG_RATIO
    out["old_per_token_logps"] = old
    adv = batch["advantages"].clone()
    adv[OVERFLOW_ROW] = 0.0
    out["advantages"] = adv
    return out


# Each row's mean rollout drift D_b = mean_t(sampling - logp) over its loss tokens (add_rollout). With
# ADVANTAGE_SIGNS, rows 1 and 2 are the negative-advantage rows: OPSM drops row 1 (D = 0.5) and keeps
# row 2 (D = -0.3) at a threshold between them; rows 0 and 3 have D above it and are kept for A > 0.
ROLLOUT_DRIFT = (0.4, 0.5, -0.3, 0.6, 0.0)


def _with_column0(x: np.ndarray) -> np.ndarray:
    """[B, C] completion columns -> [B, 1 + C] with a leading masked column, the spec's layout up to
    the prompt (rollout_is_weights reads only the valid tokens, so the prompt width is immaterial)."""
    return np.concatenate([np.zeros((x.shape[0], 1), dtype=x.dtype), x], axis=1)


def _is_bound_log(kw: dict[str, Any]) -> list[float]:
    return [math.log(b) for b in (kw.get("lo"), kw.get("hi")) if b is not None]


def add_rollout(batch: dict[str, torch.Tensor], logp: torch.Tensor, seed: int, is_kwargs: dict[str, Any] | None) -> dict[str, torch.Tensor]:
    """The rollout engine's log-probs ``sampling_per_token_logps`` = logp + D_b + zero-mean jitter on the
    loss tokens (``ROLLOUT_DRIFT``), and, when ``is_kwargs`` (``rollout_is_weights`` keywords of TRL's
    mode) is given, ``importance_sampling_ratio`` = the oracle's weights of ``old`` vs ``sampling`` in
    TRL's shape. The jitter is re-drawn until no ratio (token) or row product (sequence) is within
    ``MARGIN`` in log space of a bound, so rounding cannot flip a masked/clipped decision."""
    rng = np.random.default_rng(seed + 3)
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).numpy().astype(bool)
    pad = batch["completion_mask"].numpy() == 0
    lp = logp.detach().to(torch.float64).numpy()
    old = batch["old_per_token_logps"].to(torch.float64).numpy()
    m1 = _with_column0(loss_mask)
    for _ in range(100):
        jitter = rng.uniform(-0.4, 0.4, size=(B, C))
        for b in range(B):
            if loss_mask[b].any():
                jitter[b] -= jitter[b][loss_mask[b]].mean()
        sampling = np.where(pad, 0.0, lp + np.asarray(ROLLOUT_DRIFT)[:, None] + jitter)
        sampling = sampling.astype(np.float32).astype(np.float64)  # what TRL holds
        if is_kwargs is None:
            break
        delta = np.where(loss_mask, old - sampling, 0.0)
        stat = delta[loss_mask] if is_kwargs["level"] == "token" else delta.sum(axis=1)[loss_mask.any(axis=1)]
        if all(abs(float(x) - k) > MARGIN for x in stat for k in _is_bound_log(is_kwargs)):
            break
    else:
        raise RuntimeError("add_rollout: no rollout log-probs away from the importance-sampling bounds")
    out = dict(batch)
    out["sampling_per_token_logps"] = torch.tensor(sampling, dtype=torch.float32)
    if is_kwargs is not None:
        w = oracle.rollout_is_weights(_with_column0(old), _with_column0(sampling), m1, **is_kwargs)[:, 1:]
        if is_kwargs["level"] == "sequence":  # one weight per row; TRL's ratio of a row without loss tokens is e^0 = 1
            w = np.where(loss_mask.any(axis=1), np.where(loss_mask, w, -np.inf).max(axis=1), 1.0)[:, None]
        out["importance_sampling_ratio"] = torch.tensor(w, dtype=torch.float32)
    return out


def opsm_threshold(batch: dict[str, torch.Tensor], logp: torch.Tensor) -> float:
    """An ``off_policy_mask_threshold`` that keeps some and drops some negative-advantage rows: the
    midpoint of the widest gap between the drifts D_b of the rows with a negative advantage (of the
    rows TRL's OPSM reads: ``sampling_per_token_logps`` when present, else ``old_per_token_logps``,
    ``grpo_trainer.py:3073``); below them all when no gap exceeds 4·MARGIN."""
    loss_mask = (batch["completion_mask"] * batch["tool_mask"]).numpy().astype(bool)
    source = batch.get("sampling_per_token_logps", batch["old_per_token_logps"]).to(torch.float64).numpy()
    lp = logp.detach().to(torch.float64).numpy()
    A = batch["advantages"].numpy()
    neg = (A < 0) if A.ndim == 1 else ((A < 0) & loss_mask).any(axis=1)
    rows = [b for b in range(B) if loss_mask[b].any() and neg[b]]
    drift = sorted(float((source[b] - lp[b])[loss_mask[b]].mean()) for b in rows)
    gaps = [(hi - lo, (hi + lo) / 2) for lo, hi in itertools.pairwise(drift)]
    width, middle = max(gaps, default=(0.0, 0.0))
    return round(middle, 6) if width > 4 * MARGIN else round(drift[0] - 0.1, 6) if drift else 0.0


# ---------------------------------------------------------------------------------------------
# Spec pieces with their vector-Jacobian products
# ---------------------------------------------------------------------------------------------


def ppo_piece(lp, old, A, m, *, eps_low, eps_high, dual_clip=None) -> Piece:
    kw = dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip)
    return Piece(oracle.ppo_token_loss(lp, old, A, m, **kw), lambda u: oracle.ppo_token_loss_grad(lp, old, A, m, u, **kw))


def gspo_piece(lp, old, A, m, *, eps_low, eps_high, form="sequence") -> Piece:
    kw = dict(eps_low=eps_low, eps_high=eps_high, form=form)
    return Piece(oracle.gspo_token_loss(lp, old, A, m, **kw), lambda u: oracle.gspo_token_loss_grad(lp, old, A, m, u, **kw))


def cispo_piece(lp, old, A, m, *, eps_high, bound, eps_low=None) -> Piece:
    kw = dict(eps_low=eps_low, eps_high=eps_high, bound=bound)
    return Piece(oracle.cispo_token_loss(lp, old, A, m, **kw), lambda u: oracle.cispo_token_loss_grad(lp, old, A, m, u, **kw))


def _kw_text(kw: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in kw.items())


def vespo_piece(lp, old, A, m, **kw) -> Piece:
    return Piece(oracle.vespo_token_loss(lp, old, A, m, **kw), lambda u: oracle.vespo_token_loss_grad(lp, old, A, m, u, **kw))


def sapo_piece(lp, old, A, m, *, tau_pos, tau_neg) -> Piece:
    kw = dict(tau_pos=tau_pos, tau_neg=tau_neg)
    return Piece(oracle.sapo_token_loss(lp, old, A, m, **kw), lambda u: oracle.sapo_token_loss_grad(lp, old, A, m, u, **kw))


def row_mean(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The masked row mean of x on every valid token of the row (0 elsewhere; a row without valid
    tokens is 0): mean_t(m*x) / max(1, n_b), broadcast. An affine map of x; its VJP is
    ``row_mean_vjp``."""
    n = np.maximum(m.sum(axis=1, keepdims=True), 1)
    return np.where(m, np.where(m, x, 0.0).sum(axis=1, keepdims=True) / n, 0.0)


def row_mean_vjp(u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """u · d row_mean(x) / dx: each valid token receives the row's total upstream over n_b."""
    n = np.maximum(m.sum(axis=1, keepdims=True), 1)
    return np.where(m, np.where(m, u, 0.0).sum(axis=1, keepdims=True) / n, 0.0)


def sapo_sequence_piece(lp, old, A, m, *, tau_pos, tau_neg) -> Piece:
    """SAPO's gate on GSPO's sequence ratio (TRL ``importance_sampling_level="sequence"``,
    ``grpo_trainer.py:3086-3088`` then :3121-3124): ``sapo_token_loss`` evaluated at the row means of
    logp and old_logp, so every valid token's ratio is s_b = exp(masked mean of d), with its own A_t
    and tau (sign of A_t); the gradient is chained through the row mean (``d s_b / d logp_t = s_b /
    n_b``, as ``gspo_token_loss``'s sequence form)."""
    kw = dict(tau_pos=tau_pos, tau_neg=tau_neg)
    lbar, obar = row_mean(lp, m), row_mean(old, m)
    return Piece(oracle.sapo_token_loss(lbar, obar, A, m, **kw),
                 lambda u: row_mean_vjp(oracle.sapo_token_loss_grad(lbar, obar, A, m, u, **kw), m))


def pg_piece(lp, A, m) -> Piece:
    return Piece(oracle.pg_token_loss(lp, A, m), lambda u: oracle.pg_token_loss_grad(lp, A, m, u))


def ratio_piece(lp, old, m, level: str) -> Piece:
    """The importance ratio r_t = exp(logp_t - old_t) (level "token") or GSPO's s_b (level "sequence") on
    every valid token, as spec pieces: the clipped surrogate with A = -1 and a clip range that never
    binds (lower bound 1 - 1 = 0, upper 1 + 1e300) is exactly the ratio, with the ratio's gradient."""
    minus_one = -np.ones(m.shape[0])
    if level == "token":
        return ppo_piece(lp, old, minus_one, m, eps_low=1.0, eps_high=1e300)
    return gspo_piece(lp, old, minus_one, m, eps_low=1.0, eps_high=1e300)


def kl_piece(lp, ref, old, m, *, times_ratio: str | None) -> Piece:
    """Schulman's k3 (``kl_penalty(..., estimator="k3")``), optionally times the importance ratio (TRL's
    ``use_bias_correction_kl``): the token's ratio is spec v1.1 ``kl_loss_term(gradient="bias_corrected")``;
    GSPO's sequence ratio (``"sequence"``) is the composition k3·s_b with the product rule."""
    if times_ratio == "token":
        kw = {"estimator": "k3", "gradient": "bias_corrected"}
        return Piece(oracle.kl_loss_term(lp, ref, m, old, **kw), lambda u: oracle.kl_loss_term_grad(lp, ref, m, old, u, **kw))
    k = oracle.kl_penalty(lp, ref, m, estimator="k3")

    def k_vjp(u: np.ndarray) -> np.ndarray:
        return oracle.kl_penalty_grad(lp, ref, m, u, estimator="k3")

    if times_ratio is None:
        return Piece(k, k_vjp)
    rho = ratio_piece(lp, old, m, times_ratio)
    return Piece(k * rho.value, lambda u: k_vjp(u * rho.value) + rho.vjp(u * k))


# ---------------------------------------------------------------------------------------------
# Compositions: what TRL's loss_type should equal
# ---------------------------------------------------------------------------------------------

AGGREGATION = {  # trl/trainer/grpo_trainer.py:3153-3183 (1.16.0)
    "grpo": "seq_mean_token_mean",
    "sapo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",
    "cispo": "token_mean",
    "vespo": "token_mean",
    "luspo": "seq_mean_token_sum",
}


@dataclass
class Composition:
    """One candidate formula for a TRL configuration."""

    label: str  # "canonical" or the variant's description
    preset: str | None  # preset name when the variant is a named framework preset
    kwargs: dict[str, Any]  # the variant's keywords (empty for canonical)
    policy: Callable[[np.ndarray], Piece]  # lp -> policy token loss
    kl: str | None = None  # None (beta 0), "plain" or the ratio level multiplying k3
    value_checked: bool = True
    formula: str = ""
    spec_id: str = ""
    # rollout corrections: lp -> keep*w [B, T], the constant multiplying the policy token loss
    correction: Callable[[np.ndarray], np.ndarray] | None = None
    kl_corrected: bool = False  # contrast: keep*w multiplies the KL term too
    drop_rejected: bool = False  # contrast: tokens with keep*w = 0 leave the loss mask
    contrast: bool = False  # tried only to be told apart (reported in the row's message)
    # spec offpolicy.loss rejected="drop" (canonical): lp -> the OPSM keep mask; rejected tokens leave the count
    kept: Callable[[np.ndarray], np.ndarray] | None = None


def _agg_kwargs(run: dict[str, Any]) -> dict[str, Any]:
    mode = AGGREGATION[run["loss_type"]]
    kw: dict[str, Any] = {"mode": mode}
    if mode == "seq_mean_token_sum_norm":
        kw["norm_length"] = run["max_completion_length"]
    if run["loss_type"] in ("dapo", "cispo", "vespo"):
        kw["num_tokens"] = run["num_items_in_batch"]
    return kw


@dataclass
class _Option:
    """One choice for a part of a composition (the policy term or the KL term)."""

    label: str  # "" for canonical
    preset: str | None
    kwargs: dict[str, Any]
    formula: str
    spec_id: str
    policy: Callable[[np.ndarray], Piece] | None = None
    kl: str | None = None
    value_checked: bool = True


def _policy_options(run: dict[str, Any], on_policy: bool) -> list[_Option]:
    lt, level = run["loss_type"], run["importance_sampling_level"]
    old, A, m = run["old_logp"], run["advantages"], run["mask"]
    el, eh, delta = run["epsilon_low"], run["epsilon_high"], run["delta"]
    if lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo") and level == "sequence":
        # grpo_trainer.py:3087, 3113-3120: s_b = exp(masked mean log-ratio), clipped like PPO
        return [_Option("", None, {}, f"gspo_token_loss(eps_low={el:g}, eps_high={eh:g})", "loss.gspo",
                        policy=lambda lp: gspo_piece(lp, old, A, m, eps_low=el, eps_high=eh))]
    if lt in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        # grpo_trainer.py:3113-3120; TRL's `delta` (:3116) caps r, which for A < 0 is the spec's dual_clip
        dual = f", dual_clip={delta:g}" if delta is not None else ""
        return [_Option("", None, {}, f"ppo_token_loss(eps_low={el:g}, eps_high={eh:g}{dual})", "loss.ppo",
                        policy=lambda lp: ppo_piece(lp, old, A, m, eps_low=el, eps_high=eh, dual_clip=delta))]
    if lt == "cispo" and level == "token":
        # grpo_trainer.py:3110-3111: clamp(r, max=epsilon_high).detach(), an absolute bound
        return [
            _Option("", None, {}, f"cispo_token_loss(eps_high={eh:g})", "loss.cispo",
                    policy=lambda lp: cispo_piece(lp, old, A, m, eps_high=eh, bound="relative")),
            _Option("bound='absolute'", "trl", {"bound": "absolute"},
                    f"cispo_token_loss(eps_high={eh:g}, bound='absolute')", "loss.cispo",
                    policy=lambda lp: cispo_piece(lp, old, A, m, eps_high=eh, bound="absolute")),
        ]
    if lt == "vespo" and on_policy and level == "token":
        # phi(w = 1) = e^(lambda + k*0 - lambda) = 1 (grpo_trainer.py:2972-3018): -sg(phi)*A*logp is pg.
        return [_Option("", None, {}, "pg_token_loss (VESPO's phi(1) = 1 on-policy)", "loss.pg",
                        policy=lambda lp: pg_piece(lp, A, m))]
    if lt == "vespo" and level == "token":
        # grpo_trainer.py:2972-3018 (get_gamma_weights) and :3125-3137: -phi(w)*A*logp, (k, lambda) from
        # GRPOConfig's vespo_* (grpo_config.py:730-760; a run that does not record them has the defaults),
        # TRL's clamps (token log-ratio +-20, sequence log-ratio [log 1e-8, 20]) as preset trl. Without vLLM
        # no importance-sampling ratio enters w (:3000-3004).
        kw = {k: float(run.get(f"vespo_{k}", default))
              for k, default in (("k_pos", 2.0), ("lambda_pos", 3.0), ("k_neg", 3.0), ("lambda_neg", 2.0))}
        clamps = preset_kwargs("trl", "vespo_token_loss")
        return [
            _Option("", None, {}, f"vespo_token_loss({_kw_text(kw)})", "loss.vespo",
                    policy=lambda lp: vespo_piece(lp, old, A, m, **kw)),
            _Option("TRL's log-ratio clamps", "trl", clamps, f"vespo_token_loss({_kw_text({**kw, **clamps})})",
                    "loss.vespo", policy=lambda lp: vespo_piece(lp, old, A, m, **kw, **clamps)),
        ]
    if lt == "sapo":
        # grpo_trainer.py:3121-3124: tau = where(A > 0, sapo_temperature_pos, sapo_temperature_neg)
        # (grpo_config.py:714-729), -sigmoid(tau*(coef_1 - 1))*4/tau*A with coef_1 = exp(d) unclamped
        # (:3083-3095). TRL's tau is a float32 tensor whatever the input dtype (torch.where with Python
        # floats): a precision matter only, and these runs are float32 throughout.
        # A run that does not record tau has GRPOConfig's defaults; a wrong tau can only make the row fail,
        # never pass.
        tp, tn = float(run.get("sapo_temperature_pos", 1.0)), float(run.get("sapo_temperature_neg", 1.05))
        if level == "sequence":  # coef_1 = s_b, (B, 1), broadcast over the row (:3086-3088)
            return [_Option("", None, {}, f"sapo_token_loss(row_mean(logp), row_mean(old_logp), tau_pos={tp:g}, "
                            f"tau_neg={tn:g})", "loss.sapo",
                            policy=lambda lp: sapo_sequence_piece(lp, old, A, m, tau_pos=tp, tau_neg=tn))]
        return [_Option("", None, {}, f"sapo_token_loss(tau_pos={tp:g}, tau_neg={tn:g})", "loss.sapo",
                        policy=lambda lp: sapo_piece(lp, old, A, m, tau_pos=tp, tau_neg=tn))]
    return []


def _kl_options(run: dict[str, Any]) -> list[_Option]:
    beta = run["beta"]
    if beta == 0.0:
        return [_Option("", None, {}, "", "")]
    plain = _Option("", None, {}, f" + {beta:g}*kl_penalty(estimator='k3')", "kl.estimator", kl="plain")
    # grpo_trainer.py:3100-3102: k3 = exp(ref - logp) - (ref - logp) - 1; :3104-3105 with use_bias_correction_kl=True
    # (the default, grpo_config.py:972): times coef_1, the token's ratio r_t (spec v1.1 kl.loss, preset trl) or,
    # at importance_sampling_level="sequence", GSPO's s_b (:3086-3088; no spec function: the composition k3 * s_b)
    if run["importance_sampling_level"] == "sequence":
        return [plain, _Option("KL x importance ratio", "trl", {"kl": "k3 * s_b (use_bias_correction_kl)"},
                               f" + {beta:g}*kl_penalty(estimator='k3')*s_b", "kl.estimator", kl="sequence")]
    return [plain, _Option("KL x importance ratio", "trl", {"gradient": "bias_corrected"},
                           f" + {beta:g}*kl_loss_term(estimator='k3', gradient='bias_corrected')", "kl.loss", kl="token")]


def is_kwargs(run: dict[str, Any]) -> dict[str, Any] | None:
    """The ``rollout_is_weights`` keywords of the run's TRL mode, or None when ``_compute_loss`` does
    not multiply by the ratio (``grpo_trainer.py:3146``)."""
    if not run.get("is_correction"):
        return None
    return is_mode_to_spec(run["is_mode"], run["is_clip_min"], run["is_clip_max"])


def correction(run: dict[str, Any]) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str, list[str]]:
    """``keep*w`` as a function of the oracle's log-probs (``keep`` reads them as a constant), its
    formula and spec ids; (None, "", []) without rollout corrections."""
    kw, thr = is_kwargs(run), run.get("off_policy_mask_threshold")
    if kw is None and thr is None:
        return None, "", []
    m, A = run["mask"], run["advantages"]
    sampling = run.get("sampling_logp")
    if kw is not None and sampling is None:
        raise ValueError("a run with TRL's importance-sampling correction needs sampling_per_token_logps")
    w = None if kw is None else oracle.rollout_is_weights(run["old_logp"], sampling, m, **kw)
    source = "sampling_logp" if sampling is not None else "old_logp"
    opsm_old = sampling if sampling is not None else run["old_logp"]

    def factor(lp: np.ndarray) -> np.ndarray:
        f = np.ones_like(lp) if w is None else w
        if thr is not None:
            f = f * oracle.off_policy_sequence_mask(lp, opsm_old, A, m, threshold=thr)
        return f

    names, ids = [], []
    if thr is not None:
        names.append(f"keep[off_policy_sequence_mask(logp, {source}, A, threshold={thr:g})]")
        ids.append("offpolicy.opsm")
    if kw is not None:
        args = ", ".join(f"{k}={v!r}" for k, v in kw.items() if v is not None)
        names.append(f"w[rollout_is_weights(old_logp, sampling_logp, {args})]")
        ids.insert(0, "offpolicy.is_weights")
    return factor, "*".join(names) + "*", ids


def opsm_keep(run: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray] | None:
    """OPSM's keep mask as a function of the oracle's log-probs (bool [B, T]), None without OPSM: the keep mask
    ``k`` of spec offpolicy.loss (a zero importance weight is not a rejection: ``w = 0`` tokens count either way)."""
    thr = run.get("off_policy_mask_threshold")
    if thr is None:
        return None
    m, A = run["mask"], run["advantages"]
    sampling = run.get("sampling_logp")
    opsm_old = sampling if sampling is not None else run["old_logp"]
    return lambda lp: oracle.off_policy_sequence_mask(lp, opsm_old, A, m, threshold=thr) != 0


def compositions(run: dict[str, Any], *, on_policy: bool) -> list[Composition]:
    """Candidate compositions for a run, canonical first; [] when no spec composition exists. With
    rollout corrections, the contrasts (``contrast=True``) follow the candidates."""
    policies = _policy_options(run, on_policy)
    if not policies:
        return []
    agg = _agg_kwargs(run)
    factor, factor_formula, factor_ids = correction(run)
    out = []
    rho = run.get("top_entropy_quantile", 1.0)
    keep_formula = f"keep_H[entropy_top_mask(H, mask, rho={rho:g})]*" if rho < 1.0 else ""
    for pol, kl in itertools.product(policies, _kl_options(run)):
        formula = (f"aggregate({factor_formula}{keep_formula}{pol.formula}{kl.formula}, "
                   f"{', '.join(f'{k}={v!r}' for k, v in agg.items())})")
        if run["entropy_coef"]:
            # grpo_trainer.py:3186-3211: the bonus is the token mean whatever loss_type, over mask * entropy_mask
            formula += (f" + entropy_bonus(H, mask{' & keep_H' if keep_formula else ''}, "
                        f"entropy_coef={run['entropy_coef']:g}, mode='token_mean')")
        spec_ids = factor_ids + (["entropy.top_mask"] if keep_formula else []) + [
            pol.spec_id, kl.spec_id, "agg", "loss.entropy" if run["entropy_coef"] else "",
            "logprob.entropy" if run["entropy_coef"] or keep_formula else "", "logprob.fused"]
        presets = {x for x in (pol.preset, kl.preset) if x}
        out.append(Composition(
            label=", ".join(x for x in (pol.label, kl.label) if x) or "canonical",
            preset=presets.pop() if len(presets) == 1 else None,
            kwargs={**pol.kwargs, **kl.kwargs},
            policy=pol.policy,
            kl=kl.kl,
            value_checked=pol.value_checked,
            formula=formula,
            spec_id="+".join(x for x in spec_ids if x),
            correction=factor,
        ))
    if factor is None:
        return out
    kept = opsm_keep(run)
    if kept is not None:
        # spec offpolicy.loss: canonically (rejected="drop") a token OPSM rejects leaves the loss and its count;
        # TRL's keeps it as a zero policy term with its KL term, in the count (grpo_trainer.py:3140-3150, reduced
        # over the uncorrected mask, :3153-3183): rejected="zero", preset trl
        drops = [dataclasses.replace(c, kept=kept, formula=f"{c.formula} over mask & keep (rejected='drop')") for c in out]
        out = drops + [dataclasses.replace(
            c, label="rejected='zero'" if c.label == "canonical" else f"{c.label}, rejected='zero'", preset="trl",
            kwargs={**c.kwargs, "rejected": "zero"}, formula=f"{c.formula} over mask (rejected='zero')") for c in out]
    contrasts = []
    for comp in out:
        if comp.kept is not None:
            continue  # the contrasts belong to TRL's composition
        base = "" if comp.label == "canonical" else f"{comp.label}, "
        if comp.kl is not None:
            contrasts.append(dataclasses.replace(
                comp, label=f"{base}correction on the KL term too", preset=None, kl_corrected=True, contrast=True,
                kwargs={**comp.kwargs, "correction": "keep*w on the KL term too"},
                formula=comp.formula.replace(f"+ {run['beta']:g}*", f"+ {factor_formula}{run['beta']:g}*", 1)))
        contrasts.append(dataclasses.replace(
            comp, label=f"{base}rejected tokens out of the loss mask", preset=None, drop_rejected=True, contrast=True,
            kwargs={**comp.kwargs, "correction": "tokens with keep*w = 0 out of the loss mask"},
            formula=comp.formula + " over mask & (keep*w != 0)"))
    return out + contrasts


def entropy_terms(run: dict[str, Any]) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(H, keep_H): the oracle's token entropies from the hidden states TRL saw (when the run has an entropy
    bonus or a top-ρ mask) and the top-ρ keep mask (``top_entropy_quantile < 1``, else None). The keep mask
    is compared across TRL's float32 entropies and the oracle's float64 ones: a batch with a valid entropy
    within rounding distance of the threshold is refused (ValueError)."""
    rho, coef = run.get("top_entropy_quantile", 1.0), run["entropy_coef"]
    if not coef and rho >= 1.0:
        return None, None
    m = run["mask"]
    H = oracle.token_entropy_from_hidden(run["hidden"], run["weight"], m, temperature=run["temperature"])
    if rho >= 1.0:
        return H, None
    from conformance.records import BY_FUNCTION

    if not BY_FUNCTION["entropy_top_mask"].well_conditioned({"entropy": H, "mask": m}, {"rho": rho}):
        raise ValueError(f"a valid entropy of this batch lies within rounding distance of the top-{rho:g} threshold")
    return H, oracle.entropy_top_mask(H, m, rho=rho)


@dataclass
class Evaluated:
    loss: float
    grad_logp: np.ndarray
    grad_entropy: np.ndarray
    grad_hidden: np.ndarray
    grad_weight: np.ndarray


def evaluate(run: dict[str, Any], comp: Composition) -> Evaluated:
    """The composition's value and gradients (float64 oracle, on the hidden states TRL saw)."""
    h, W = run["hidden"], run["weight"]
    ids, m, tau = run["input_ids"], run["mask"], run["temperature"]
    lp = oracle.token_logprobs_from_hidden(h, W, ids, m, temperature=tau)
    pol = comp.policy(lp)
    H, keep = entropy_terms(run)
    if keep is not None:  # grpo_trainer.py:3049-3052, :3143-3144: per_token_loss * entropy_mask (not the KL)
        pol = scaled(pol, keep.astype(np.float64))
    f = comp.correction(lp) if comp.correction is not None else None
    if f is not None:  # grpo_trainer.py:3140-3147: per_token_loss * off_policy_mask * importance_sampling_ratio
        pol = scaled(pol, f)
    total, vjps = pol.value, [pol.vjp]
    beta = run["beta"]
    if comp.kl is not None:
        kl = kl_piece(lp, run["ref_logp"], run["old_logp"], m, times_ratio=None if comp.kl == "plain" else comp.kl)
        if comp.kl_corrected and f is not None:
            kl = scaled(kl, f)
        total = total + beta * kl.value
        vjps.append(lambda u, kl=kl: beta * kl.vjp(u))
    agg, agg_mask = _agg_kwargs(run), m
    if comp.kept is not None:  # rejected="drop": OPSM's rejected tokens leave the loss and the count
        agg_mask = m & comp.kept(lp)
        if "num_tokens" in agg:
            agg["num_tokens"] = float(agg_mask.sum())
    if comp.drop_rejected and f is not None:
        agg_mask = m & (f != 0)
        if "num_tokens" in agg:
            agg["num_tokens"] = float(agg_mask.sum())
    loss = oracle.aggregate(total, agg_mask, **agg)
    w = oracle.aggregate_grad(total, agg_mask, 1.0, **agg)
    g_lp = sum(v(w) for v in vjps)
    g_h, g_w = oracle.token_logprobs_from_hidden_grad(h, W, ids, m, g_lp, temperature=tau)
    g_ent = np.zeros_like(g_lp)
    coef = run["entropy_coef"]
    if coef:
        # grpo_trainer.py:3186-3211: loss - coef * (entropies * effective_mask).sum() / effective_mask.sum() / GA,
        # effective_mask = mask * entropy_mask: entropy_bonus over those tokens, token_mean (GA = 1 here)
        effective = m if keep is None else m & keep
        bonus_kw = dict(entropy_coef=coef, mode="token_mean")
        loss = loss + oracle.entropy_bonus(H, effective, **bonus_kw)
        g_ent = oracle.entropy_bonus_grad(H, effective, 1.0, **bonus_kw)
        eh, ew = oracle.token_entropy_from_hidden_grad(h, W, m, g_ent, temperature=tau)
        g_h, g_w = g_h + eh, g_w + ew
    return Evaluated(float(loss), g_lp, g_ent, g_h, g_w)


# Tolerances: TRL works in float32 on float32 hidden states; the oracle in float64 on the same values.
VALUE_TOL = tolerance("agg", "float32", "value")
LOGP_GRAD_TOL = tolerance("loss.ppo", "float32", "grad")
HEAD_GRAD_TOL = tolerance("logprob.fused", "float32", "grad")


# the tolerance of each compared output, by key
TOLERANCES = {"value": VALUE_TOL, "grad[logp]": LOGP_GRAD_TOL, "grad[entropy]": LOGP_GRAD_TOL,
              "grad[hidden]": HEAD_GRAD_TOL, "grad[weight]": HEAD_GRAD_TOL}


def observed(run: dict[str, Any]) -> dict[str, Any]:
    """What TRL returned for a run, keyed like the candidates' expectations."""
    return {"value": run["loss"], "grad[logp]": run["grad_logp"], "grad[entropy]": run["grad_entropy"],
            "grad[hidden]": run["grad_hidden"], "grad[weight]": run["grad_weight"]}


def expected(run: dict[str, Any], comp: Composition) -> dict[str, Any]:
    """The composition's value (when it is a spec quantity) and gradients, keyed as `observed`."""
    ev = evaluate(run, comp)
    out: dict[str, Any] = {"value": ev.loss} if comp.value_checked else {}
    out["grad[logp]"] = ev.grad_logp
    if run["entropy_coef"]:
        out["grad[entropy]"] = ev.grad_entropy
    out.update({"grad[hidden]": ev.grad_hidden, "grad[weight]": ev.grad_weight})
    return out


def candidate(run: dict[str, Any], comp: Composition, comps: list[Composition] = ()) -> Candidate:
    """A composition as a candidate of the engine, with the contrasts of `comps` that belong to it (same
    label prefix: the matched composition's own contrasts)."""
    prefix = "" if comp.label == "canonical" else f"{comp.label}, "
    contrasts = [candidate(run, c) for c in comps
                 if c.contrast and c.label.startswith(prefix) and c.label.count(",") == prefix.count(",")]
    why = NOT_EXPRESSIBLE.get(run["loss_type"], f"the value of loss_type {run['loss_type']!r} is not a spec quantity")
    return Candidate(comp.label, comp.formula, lambda: expected(run, comp), preset=comp.preset, kwargs=comp.kwargs,
                     spec_id=comp.spec_id, not_compared="" if comp.value_checked else why, contrasts=contrasts)


def compare_run(run: dict[str, Any], comp: Composition):
    """TRL's run against one composition (the engine's comparison: `.ok`, `.checks`, `.mismatches`)."""
    return compare_candidate(observed(run), candidate(run, comp), TOLERANCES)


# ---------------------------------------------------------------------------------------------
# The configurations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LossConfig:
    loss_type: str
    config: tuple[tuple[str, Any], ...] = ()
    per_token_advantages: bool = False
    on_policy: bool = False
    opsm: bool = False  # off_policy_mask_threshold set from the batch (opsm_threshold)
    overflow: bool = False  # a zero-advantage row with a log-ratio of 800 (add_overflow)

    @property
    def row_id(self) -> str:
        parts = [self.loss_type]
        cfg = dict(self.config)
        if cfg.pop("importance_sampling_level", "token") == "sequence":
            parts.append("sequence")
        beta = cfg.pop("beta", 0.0)
        if cfg.pop("use_vllm", False) and cfg.pop("vllm_importance_sampling_correction", True):
            bounds = [f"{name}={cfg.pop(f'vllm_importance_sampling_clip_{name}'):g}" for name in ("min", "max")
                      if cfg.get(f"vllm_importance_sampling_clip_{name}") is not None]
            parts.append(f"is={cfg.pop('vllm_importance_sampling_mode')}({','.join(bounds)})")
        if self.opsm:
            parts.append("opsm")
        parts += [f"{k}={v}" for k, v in cfg.items()]
        if self.per_token_advantages:
            parts.append("A=[B,T]")
        if self.on_policy:
            parts.append("on_policy")
        if self.overflow:
            parts.append(f"log_ratio={OVERFLOW_LOG_RATIO:g} at A=0")
        parts.append(f"beta={beta:g}")
        return f"trl.grpo_loss[{','.join(parts)}]"

    def trl_config(self) -> dict[str, Any]:
        return dict(self.config, loss_type=self.loss_type, max_completion_length=MAX_COMPLETION_LENGTH)


def _cfg(loss_type: str, **config: Any) -> LossConfig:
    return LossConfig(loss_type, tuple(sorted(config.items())))


BETA = 0.04


def loss_configs() -> list[LossConfig]:
    """Every configuration checked (value and gradient)."""
    out = []
    for beta in (0.0, BETA):
        out += [
            _cfg("grpo", beta=beta),
            _cfg("bnpo", beta=beta),
            _cfg("dr_grpo", beta=beta),
            _cfg("dapo", beta=beta),
            _cfg("cispo", beta=beta),  # epsilon_high defaults to epsilon = 0.2 (grpo_trainer.py:946)
            _cfg("cispo", beta=beta, epsilon_high=5.0),  # the value TRL's docs recommend for cispo
            _cfg("grpo", beta=beta, importance_sampling_level="sequence"),  # GSPO
            _cfg("luspo", beta=beta, importance_sampling_level="sequence"),
            _cfg("sapo", beta=beta),  # tau 1.0/1.05 (grpo_config.py:714-729), reduced like grpo (:3153-3157)
            _cfg("sapo", beta=beta, importance_sampling_level="sequence"),  # the gate on s_b
        ]
    out += [
        _cfg("dapo", beta=BETA, use_bias_correction_kl=False),
        _cfg("dapo", importance_sampling_level="sequence"),
        _cfg("dapo", epsilon_high=0.28),
        _cfg("dapo", delta=1.5),
        _cfg("dapo", temperature=0.7),
        _cfg("dapo", entropy_coef=0.01),
        # spec v1.1 entropy terms: the bonus is a token mean whatever loss_type (grpo reduces its policy term
        # seq_mean_token_mean); the top-rho mask multiplies the policy term (not the KL) and restricts the bonus
        _cfg("grpo", entropy_coef=0.01),
        _cfg("dapo", top_entropy_quantile=0.2),
        _cfg("dapo", beta=BETA, entropy_coef=0.01, top_entropy_quantile=0.5),
        LossConfig("dapo", per_token_advantages=True),
        _cfg("luspo"),  # the config default importance_sampling_level="token" (a warning, :916-920): ppo + seq_mean_token_sum
        _cfg("sapo", sapo_temperature_pos=0.5, sapo_temperature_neg=2.0),  # tau read from GRPOConfig
        LossConfig("sapo", per_token_advantages=True),  # tau by the sign of each A_t
        LossConfig("sapo", on_policy=True),  # r = 1: L = -2A/tau, gradient -A
        LossConfig("vespo", on_policy=True),
        LossConfig("vespo", (("beta", BETA),), on_policy=True),
        LossConfig("vespo"),  # vespo_token_loss (loss.vespo)
    ]
    return out + offpolicy_configs() + overflow_configs()


def overflow_configs() -> list[LossConfig]:
    """The overflow class every framework is judged on (golden vectors ``ppo_token_loss`` /
    ``gspo_token_loss/overflowing-ratio-zero-advantage``, ``sapo_token_loss/overflowing-ratio``), through
    ``_compute_loss``: a row with A = 0 whose log-ratio is 800 (``add_overflow``). ``coef_1 =
    torch.exp(log_importance_weights)`` (``grpo_trainer.py:3095``) has no clamp, so it is inf in float32;
    the spec's token loss there is 0 with a zero gradient (``0·inf := 0``). The PPO family at its default
    ``loss_type`` (dapo), GSPO (the sequence ratio s_b) and SAPO; CISPO detaches a clamped weight
    (:3110) and VESPO clamps its log-ratios (:2972-3018), so they are not in this class."""
    return [
        LossConfig("dapo", overflow=True),
        LossConfig("grpo", (("importance_sampling_level", "sequence"),), overflow=True),
        LossConfig("sapo", overflow=True),
    ]


def _vllm_is(mode: str, clip_max: float | None = None, clip_min: float | None = None) -> dict[str, Any]:
    """GRPOConfig keywords of TRL's vLLM importance-sampling correction (grpo_config.py:925-962)."""
    out: dict[str, Any] = {"use_vllm": True, "vllm_importance_sampling_correction": True,
                           "vllm_importance_sampling_mode": mode, "vllm_importance_sampling_clip_max": clip_max}
    if clip_min is not None:
        out["vllm_importance_sampling_clip_min"] = clip_min
    return out


def offpolicy_configs() -> list[LossConfig]:
    """The rollout corrections in ``_compute_loss`` (the module docstring): TRL's default IS mode
    (``sequence_mask``, clip_max 3) with and without the bias-corrected KL term, token-level truncation
    and masking, OPSM without vLLM (against ``old_per_token_logps``) and with it (against the sampling
    log-probs), with [B] and [B, T] advantages."""
    return [
        _cfg("dapo", **_vllm_is("token_truncate", 2.0)),
        _cfg("dapo", beta=BETA, **_vllm_is("sequence_mask", 3.0)),
        _cfg("dapo", beta=BETA, use_bias_correction_kl=False, **_vllm_is("sequence_mask", 3.0)),
        LossConfig("bnpo", opsm=True),  # bnpo: the denominator is _compute_loss's own mask.sum() (:3159)
        # dapo's denominator is num_items_in_batch, the loss-mask count TRL takes before any correction (:2497-2498)
        LossConfig("dapo", tuple(sorted(dict(beta=BETA, use_bias_correction_kl=False,
                                             **_vllm_is("token_mask", 2.0, 0.5)).items())), opsm=True),
        LossConfig("grpo", tuple(sorted(dict(beta=BETA, **_vllm_is("sequence_truncate", 3.0)).items())),
                   per_token_advantages=True, opsm=True),
    ]


NOT_EXPRESSIBLE: dict[str, str] = {}  # loss_type -> why no composition exists off-policy (none in trl 1.16.0)


def run_loss_config(adapter: TRLAdapter, cfg: LossConfig, seed: int) -> dict[str, Any]:
    """Drive TRL once for `cfg` and return the adapter's result as float64 NumPy arrays."""
    config = cfg.trl_config()
    batch = make_batch(seed, per_token_advantages=cfg.per_token_advantages)
    logp = adapter.grpo_current_logps(batch, **config)
    batch = add_old_and_ref(batch, logp, seed, on_policy=cfg.on_policy)
    if cfg.overflow:
        batch = add_overflow(batch, sequence=config.get("importance_sampling_level") == "sequence")
    if config.get("use_vllm"):  # TRL's vLLM batches always carry the sampling log-probs (grpo_trainer.py:2910-2911)
        kw = is_mode_to_spec(config["vllm_importance_sampling_mode"], config.get("vllm_importance_sampling_clip_min"),
                             config.get("vllm_importance_sampling_clip_max"))
        batch = add_rollout(batch, logp, seed, kw if config.get("vllm_importance_sampling_correction", True) else None)
    if cfg.opsm:
        config["off_policy_mask_threshold"] = opsm_threshold(batch, logp)
    run = adapter.grpo_loss(batch, **config)
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in run.items()}


def contrasts(run: dict[str, Any], comps: list[Composition], matched: Composition) -> dict[str, Any]:
    """The contrasts of the matched composition (same label prefix), each compared with TRL's run."""
    return {c.label: compare_candidate(observed(run), c, TOLERANCES) for c in candidate(run, matched, comps).contrasts}


def check_loss_config(adapter: TRLAdapter, cfg: LossConfig, seed: int) -> RowResult:
    """One GRPO loss configuration: TRL's run against every composition of it (canonical, presets, variants,
    then the contrasts), by the runner's engine."""
    try:
        run = run_loss_config(adapter, cfg, seed)
        comps = compositions(run, on_policy=cfg.on_policy)
    except Exception as exc:  # an adapter failure is a row, not a crash
        return error_row(cfg.row_id, "loss.*+agg", "trl.grpo_loss", adapter.name, f"{type(exc).__name__}: {exc}", [seed])
    if not comps:
        message = NOT_EXPRESSIBLE.get(cfg.loss_type, f"no spec v1 composition for loss_type {cfg.loss_type!r}")
        if not cfg.on_policy and cfg.loss_type in NOT_EXPRESSIBLE:
            message += " (off-policy; see the on_policy row for what is checked)"
        return not_implemented_row(cfg.row_id, "loss.*+agg", "trl.grpo_loss", adapter.name, message)
    return composition_row(cfg.row_id, comps[0].spec_id, "trl.grpo_loss", adapter, lambda: observed(run),
                           [candidate(run, c, comps) for c in comps], TOLERANCES, seed=seed)


# ---------------------------------------------------------------------------------------------
# RLOOTrainer's loss: PPO on whole sequences
# ---------------------------------------------------------------------------------------------


def rloo_composition(run: dict[str, Any]) -> tuple[Evaluated, str]:
    """``RLOOTrainer._compute_loss`` (trl 1.16.0 ``rloo_trainer.py:1794-1863``) from spec pieces.

    TRL clips the ratio of whole-sequence probabilities, exp(S_b - old_b) with S_b = sum_t m*logp_t,
    and averages over the B sequences. In spec terms each sequence is one action: a [B, 2] array
    holding S_b at the single valid position 1, then ``ppo_token_loss`` and ``aggregate(token_mean)``
    (the mean over B one-token rows). The gradient of S_b w.r.t. each token's log-prob is the mask."""
    h, W, ids, m, tau = run["hidden"], run["weight"], run["input_ids"], run["mask"], run["temperature"]
    lp = oracle.token_logprobs_from_hidden(h, W, ids, m, temperature=tau)
    nB = m.shape[0]
    S, old = np.zeros((nB, 2)), np.zeros((nB, 2))
    S[:, 1] = np.where(m, lp, 0.0).sum(axis=1)
    old[:, 1] = run["old_logps"]
    m2 = np.zeros((nB, 2), dtype=bool)
    m2[:, 1] = True
    kw = dict(eps_low=run["epsilon_low"], eps_high=run["epsilon_high"])
    L = oracle.ppo_token_loss(S, old, run["advantages"], m2, **kw)
    loss = oracle.aggregate(L, m2, mode="token_mean")
    gS = oracle.ppo_token_loss_grad(S, old, run["advantages"], m2, oracle.aggregate_grad(L, m2, 1.0, mode="token_mean"), **kw)
    g_lp = gS[:, 1:2] * m
    g_h, g_w = oracle.token_logprobs_from_hidden_grad(h, W, ids, m, g_lp, temperature=tau)
    formula = (f"aggregate(ppo_token_loss(S, old_S, eps_low={kw['eps_low']:g}, eps_high={kw['eps_high']:g}), "
               "mode='token_mean') over one action per sequence, S_b = sum_t mask*logp")
    return Evaluated(float(loss), g_lp, np.zeros_like(g_lp), g_h, g_w), formula


RLOO_SEQUENCE_LOG_RATIOS = (-0.9, 0.1, 0.5, -0.05, 1.0)  # ratios 0.41, 1.11, 1.65, 0.95, 2.72


def check_rloo_loss(adapter: TRLAdapter, seed: int) -> RowResult:
    config = {"beta": 0.0, "max_completion_length": MAX_COMPLETION_LENGTH}
    box: dict[str, Any] = {}

    def got() -> dict[str, Any]:
        batch = make_batch(seed)
        batch.pop("tool_mask")  # RLOOTrainer has no tool mask
        logp = adapter.rloo_current_logps(batch, **config)
        seq = (logp * batch["completion_mask"]).sum(1).to(torch.float64)
        d = torch.tensor(np.random.default_rng(seed + 2).permutation(RLOO_SEQUENCE_LOG_RATIOS), dtype=torch.float64)
        batch["old_logps"] = (seq - d).to(torch.float32)
        run = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in adapter.rloo_loss(batch, **config).items()}
        box["run"] = run
        return {"value": run["loss"], "grad[logp]": run["grad_logp"], "grad[hidden]": run["grad_hidden"],
                "grad[weight]": run["grad_weight"]}

    def canonical() -> dict[str, Any]:
        ev, _ = rloo_composition(box["run"])
        return {"value": ev.loss, "grad[logp]": ev.grad_logp, "grad[hidden]": ev.grad_hidden, "grad[weight]": ev.grad_weight}

    formula = ("aggregate(ppo_token_loss(S, old_S, eps_low, eps_high), mode='token_mean') over one action per "
               "sequence, S_b = sum_t mask*logp")
    return composition_row("trl.rloo_loss[beta=0]", "loss.ppo+agg+logprob.fused", "trl.rloo_loss", adapter, got,
                           [Candidate("canonical", formula, canonical)], TOLERANCES, seed=seed)


# ---------------------------------------------------------------------------------------------
# TRL's free helpers (its bfloat16 paths are the core rows' bfloat16 cases: precision findings)
# ---------------------------------------------------------------------------------------------

# (max_completion_len, soft_punish_cache): the docstring's example (100, 20), a short ramp, the hard step
# (cache 0) and a ramp over the whole budget (cache = max)
SOFT_OVERLONG_CONFIGS = ((100, 20), (8, 3), (8, 0), (6, 6))


def soft_overlong_row(adapter: TRLAdapter) -> RowResult:
    """``trl.rewards.get_soft_overlong_punishment`` on every completion length from 0 to
    ``max_completion_len + 3``: each boundary of DAPO eq. 13 (0 at and below L_max - L_cache, exactly -1 at
    L_max, -1 beyond) against ``overlong_penalty`` canonical (floor) with factor 1; the row's message says
    whether the no-floor line (verl's ``beyond="linear"``) is told apart."""
    def lengths(max_len: int) -> np.ndarray:
        return np.arange(0, max_len + 4)

    def got() -> dict[str, Any]:
        return {f"value[{max_len},{cache}]": adapter.soft_overlong_punishment([[0] * int(n) for n in lengths(max_len)],
                                                                             max_len, cache)
                for max_len, cache in SOFT_OVERLONG_CONFIGS}

    def penalty(**kw: Any) -> Callable[[], dict[str, Any]]:
        return lambda: {f"value[{max_len},{cache}]": oracle.overlong_penalty(lengths(max_len), max_length=max_len,
                                                                             buffer=cache, **kw)
                        for max_len, cache in SOFT_OVERLONG_CONFIGS if cache or not kw}

    linear = Candidate("the no-floor line", "overlong_penalty(max_length, buffer, beyond='linear')", penalty(beyond="linear"))
    canonical = Candidate("canonical", "overlong_penalty(max_length, buffer, factor=1.0) at every length 0 .. L_max + 3 "
                          "(the floor -1 beyond L_max)", penalty(), contrasts=[linear])
    return composition_row("trl.get_soft_overlong_punishment", "reward.overlong", "trl.get_soft_overlong_punishment",
                           adapter, got, [canonical], {"value": tolerance("reward.overlong", "float64")},
                           n_cases=len(SOFT_OVERLONG_CONFIGS))


def nanstd_row(adapter: TRLAdapter, seed: int) -> RowResult:
    """``trl.trainer.utils.nanstd`` is the spec's std with ddof = 1 (api.md, adv.grpo), ignoring NaNs."""
    rng = np.random.default_rng(seed)
    xs = [rng.normal(0, 1, size=n) for n in (2, 3, 8)] + [np.array([1.0, 0, 0, 0]), np.array([3.0, 3, 3, 3])]
    xs = [x.astype(np.float32).astype(np.float64) for x in xs]

    def got() -> dict[str, Any]:
        out = {}
        for i, x in enumerate(xs):
            out[f"value[{i}]"] = float(adapter.nanstd(torch.tensor(x, dtype=torch.float32)))
            with_nan = np.concatenate([x, [np.nan]])  # NaN-aware: the NaN is left out
            out[f"nan[{i}]"] = float(adapter.nanstd(torch.tensor(with_nan, dtype=torch.float32)))
        return out

    def canonical() -> dict[str, Any]:
        out = {}
        for i, x in enumerate(xs):
            out[f"value[{i}]"] = out[f"nan[{i}]"] = oracle.advantages.std_with_ddof(list(x), float(np.mean(x)), 1)
        return out

    row = composition_row("trl.nanstd", "adv.grpo", "trl.nanstd", adapter, got,
                          [Candidate("canonical", "std(x, ddof=1) of the non-NaN elements", canonical)],
                          {"value": tolerance("adv.grpo", "float32")}, seed=seed, n_cases=len(xs))
    return row


def fused_softmax_entropy_row(adapter: TRLAdapter, seed: int, n_seeds: int = 4) -> RowResult:
    """``selective_log_softmax_and_entropy`` = (token_logprobs, token_entropy), values and gradients."""
    seeds = seeds_for("token_logprobs", seed, n_seeds)
    inputs_of = {}
    for s in seeds:
        case = make_case("token_logprobs", s)
        g = np.random.default_rng(case.upstream_seed)
        r = cases.rounded_args(case, "float32")
        u1 = g.normal(size=r["input_ids"].shape)
        inputs_of[s] = (r, case.kwargs["temperature"], u1, g.normal(size=r["input_ids"].shape))

    def got() -> dict[str, Any]:
        out = {}
        for s, (r, tau, u1, u2) in inputs_of.items():
            logits = torch.tensor(r["logits"], dtype=torch.float32, requires_grad=True)
            lp, ent = adapter.selective_log_softmax_and_entropy(logits, torch.from_numpy(r["input_ids"]),
                                                                torch.from_numpy(r["mask"]), temperature=tau)
            if lp.requires_grad or ent.requires_grad:
                (lp * torch.tensor(u1, dtype=torch.float32) + ent * torch.tensor(u2, dtype=torch.float32)).sum().backward()
            out[f"value[logp,{s}]"], out[f"value[entropy,{s}]"] = lp.detach(), ent.detach()
            out[f"grad[logits,{s}]"] = logits.grad if logits.grad is not None else torch.zeros_like(logits)
        return out

    def canonical() -> dict[str, Any]:
        out = {}
        for s, (r, tau, u1, u2) in inputs_of.items():
            out[f"value[logp,{s}]"] = oracle.token_logprobs(r["logits"], r["input_ids"], r["mask"], temperature=tau)
            out[f"value[entropy,{s}]"] = oracle.token_entropy(r["logits"], r["mask"], temperature=tau)
            out[f"grad[logits,{s}]"] = (oracle.token_logprobs_grad(r["logits"], r["input_ids"], r["mask"], u1, temperature=tau)
                                        + oracle.token_entropy_grad(r["logits"], r["mask"], u2, temperature=tau))
        return out

    tolerances = {"value": tolerance("logprob.token", "float32"), "grad": tolerance("logprob.token", "float32", "grad")}
    tolerances.update({f"value[entropy,{s}]": tolerance("logprob.entropy", "float32") for s in seeds})
    row = composition_row("trl.selective_log_softmax_and_entropy", "logprob.token+logprob.entropy",
                          "trl.selective_log_softmax_and_entropy", adapter, got,
                          [Candidate("canonical", "(token_logprobs, token_entropy) and their gradients", canonical)],
                          tolerances, n_cases=n_seeds)
    row.seeds = list(seeds)
    return row


# ---------------------------------------------------------------------------------------------
# Spec v1.1 entropy terms outside the loss: get_high_entropy_mask over data-parallel ranks (a simulated
# all-gather), its pool size limit, and the adaptive entropy controller of _compute_loss
# ---------------------------------------------------------------------------------------------

# The batch of the multi-rank mask rows: 7 rows over 3 ranks holding 3, 2 and 2 rows (the last row empty);
# rank 0's tokens are uncertain, rank 1's confident, rank 2's in between, so a per-rank quantile differs.
MASK_RANKS = ((0, 3), (3, 5), (5, 7))
MASK_RANK_SCALES = (2.0, 0.1, 0.5)
N_MASK_SEEDS = 4
ENTROPY_MASK_RHOS = (0.2, 0.5, 0.8)


def entropy_mask_batch(seed: int, rho: float) -> tuple[np.ndarray, np.ndarray]:
    """(entropies [7, 9] float32-exact float64, mask [7, 9]) with every valid entropy off the top-rho
    threshold of the whole batch (the registry's conditioning)."""
    from conformance.records import BY_FUNCTION

    rng = np.random.default_rng(seed)
    for _ in range(100):
        m = inputs.ragged_mask(rng, 7, 9, empty_rows=False)
        m[6] = False
        H = np.concatenate([rng.exponential(scale, size=(stop - start, 9))
                            for (start, stop), scale in zip(MASK_RANKS, MASK_RANK_SCALES)])
        H = H.astype(np.float32).astype(np.float64)  # what TRL holds (float32 entropies of the fused head)
        if BY_FUNCTION["entropy_top_mask"].well_conditioned({"entropy": H, "mask": m}, {"rho": rho}):
            return H, m
    raise RuntimeError("entropy_mask_batch: no batch away from the threshold")


def entropy_mask_row(adapter: TRLAdapter, rho: float, seed: int) -> RowResult:
    """Each of 3 simulated ranks calls ``get_high_entropy_mask`` on its rows, its accelerator gathering the
    other ranks' ``entropies[mask].float()``: the ranks' masks, joined, must be ``entropy_top_mask`` of the
    whole batch (the all-gather makes TRL's quantile the batch's). A per-rank quantile (ms-swift, TRL before
    trl#3833) is the contrast the message reports."""
    row_id = f"trl.get_high_entropy_mask[ranks=3,rho={rho:g}]"
    seeds = seeds_for(row_id, seed, N_MASK_SEEDS)
    batches: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def got() -> dict[str, Any]:
        out = {}
        for s in seeds:
            H, m = batches.setdefault(s, entropy_mask_batch(s, rho))
            parts = [(torch.tensor(H[a:b], dtype=torch.float32), torch.tensor(m[a:b]).long()) for a, b in MASK_RANKS]
            local = [h[k.bool()] for h, k in parts]  # each rank's entropies[mask].float()
            out[f"mask[seed {s}]"] = np.concatenate([
                adapter.high_entropy_mask(h, k, 1.0 - rho, [x for j, x in enumerate(local) if j != r], rank=r).numpy()
                for r, (h, k) in enumerate(parts)]).astype(np.float64)
        return out

    def whole() -> dict[str, Any]:
        return {f"mask[seed {s}]": oracle.entropy_top_mask(*batches[s], rho=rho).astype(np.float64) for s in seeds}

    def per_rank() -> dict[str, Any]:
        return {f"mask[seed {s}]": np.concatenate([oracle.entropy_top_mask(H[a:b], m[a:b], rho=rho) for a, b in MASK_RANKS])
                .astype(np.float64) for s, (H, m) in batches.items()}

    contrast = Candidate("a per-rank quantile", "entropy_top_mask of each rank's own rows", per_rank)
    canonical = Candidate("canonical", f"entropy_top_mask(whole batch, rho={rho:g}) on every rank's rows", whole,
                          contrasts=[contrast])
    row = composition_row(row_id, "entropy.top_mask", "trl.get_high_entropy_mask", adapter, got, [canonical],
                          {"value": Tol(0.0, 0.0, "a keep mask")}, n_cases=N_MASK_SEEDS)
    row.seeds = list(seeds)
    return row


def entropy_mask_pool_limit_row(adapter: TRLAdapter) -> RowResult:
    """A batch whose pool over the ranks holds 2**24 + 3 valid entropies (the other rank's 2**24, k/2**24):
    the spec's mask is defined (refimpl computes it with kthvalue); TRL's ``torch.quantile`` of the gathered
    pool refuses more than 2**24 elements."""
    import refimpl

    n = 2**24
    other = torch.arange(n, dtype=torch.float32) / n
    H = torch.tensor([[0.0, 0.25, 0.5, 0.875]])
    m = torch.tensor([[False, True, True, True]])
    expected = refimpl.entropy_top_mask(H, m, rho=0.5, pooled_entropy=torch.cat([other.double(), H[m].double()]))
    note = (f"(grpo_trainer.py:1413, torch.quantile of the gathered pool of {n + 3} valid entropies; torch.quantile "
            f"accepts at most 2**24 = {n}). The spec's mask is defined: {expected.int().tolist()} (refimpl, kthvalue)")
    return composition_row("trl.get_high_entropy_mask[pool>2^24]", "entropy.top_mask", "trl.get_high_entropy_mask",
                           adapter, lambda: {"value": adapter.high_entropy_mask(H, m.long(), 0.5, [other]).double()},
                           [Candidate("canonical", "entropy_top_mask(rho=0.5, pooled_entropy=every rank's entropies)",
                                      lambda: {"value": expected.double()})],
                           {"value": Tol(0.0, 0.0, "a keep mask")}, note=note)


@dataclass(frozen=True)
class AdaptiveEntropyCase:
    """One optimizer step of TRL's adaptive entropy control from the controller state (coef, last_entropy)."""

    label: str
    config: tuple[tuple[str, Any], ...]
    coef: float
    last_entropy: float

    @property
    def row_id(self) -> str:
        return f"trl.adaptive_entropy[{self.label}]"


def adaptive_entropy_cases() -> list[AdaptiveEntropyCase]:
    """The batch's token entropies are about 1-3 nats: a target of 10 is above them (the coefficient rises),
    TRL's default 0.2 below (it falls); the previous step's entropy decides whether the bonus applies."""
    def case(label: str, coef: float, last: float, **config: Any) -> AdaptiveEntropyCase:
        return AdaptiveEntropyCase(label, tuple(sorted(config.items())), coef, last)

    return [
        case("rises,applied", 0.01, 0.5, entropy_target=10.0),
        case("falls,first step", 0.01, math.inf),
        case("rises to coef_max,applied", 0.01, 5.0, entropy_target=10.0, entropy_coef_max=0.012),
        case("falls to coef_min,applied", 0.01, 0.1, entropy_coef_min=0.008),
        case("falls,not applied", 0.02, 0.3),  # default target 0.2: below the measured H and the previous 0.3
        case("top_entropy_quantile=0.2", 0.02, 3.0, entropy_target=10.0, top_entropy_quantile=0.2),
    ]


def adaptive_entropy_row(adapter: TRLAdapter, case: AdaptiveEntropyCase, seed: int) -> RowResult:
    """``_compute_loss`` with ``use_adaptive_entropy=True`` from the controller state of ``case``: the
    coefficient TRL stores after the step is ``entropy_coef_update(coef, H)`` with H the entropy it measured
    (checked against the oracle's token mean of H over the bonus's tokens), and the coefficient the step
    applies (read from the gradient w.r.t. the entropies: -coef_applied / N on each of the N tokens) is
    ``entropy_coef_applied(coef, last_entropy)``."""
    box: dict[str, Any] = {}

    def got() -> dict[str, Any]:
        config = dict(case.config, loss_type="dapo", beta=0.0, use_adaptive_entropy=True, entropy_coef=case.coef,
                      max_completion_length=MAX_COMPLETION_LENGTH)
        batch = make_batch(seed)
        logp = adapter.grpo_current_logps(batch, **config)
        batch = add_old_and_ref(batch, logp, seed)
        run = adapter.grpo_adaptive_entropy_step(batch, coef=case.coef, last_entropy=case.last_entropy, **config)
        run = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in run.items()}
        run["top_entropy_quantile"] = dict(case.config).get("top_entropy_quantile", 1.0)
        run["entropy_coef"] = case.coef
        box["run"] = run
        measured, target = run["world_entropy"], run["entropy_control"]["target"]
        if abs(measured - target) < 1e-3:
            raise ValueError(f"the measured entropy {measured!r} is within 1e-3 of the target {target!r}")
        return {"measured entropy": measured, "entropy_coef after the step": run["entropy_coef_after"],
                "entropy_coef applied": -float(np.where(run["mask"], run["grad_entropy"], 0.0).sum())}

    def canonical() -> dict[str, Any]:
        run = box["run"]
        ctl = run["entropy_control"]
        H, keep = entropy_terms(run)
        effective = run["mask"] if keep is None else run["mask"] & keep
        # grpo_trainer.py:3217-3230: the window's entropy sum over its token count (one micro-batch, one rank)
        return {"measured entropy": oracle.aggregate(H, effective, mode="token_mean"),
                "entropy_coef after the step": oracle.entropy_coef_update(case.coef, run["world_entropy"], **ctl),
                "entropy_coef applied": oracle.entropy_coef_applied(case.coef, case.last_entropy, target=ctl["target"])}

    formula = (f"entropy_coef_update({case.coef:g}, H, {_kw_text(dict(case.config))}) and "
               f"entropy_coef_applied({case.coef:g}, last_entropy={case.last_entropy:g})")
    tolerances = {"value": tolerance("logprob.fused", "float32", "value"),
                  "entropy_coef after the step": Tol(1e-15, 0.0, "Python floats on both sides"),
                  "entropy_coef applied": Tol(1e-5, 1e-9, "a sum of float32 gradients")}
    return composition_row(case.row_id, "ctrl.entropy", "trl.adaptive_entropy", adapter, got,
                           [Candidate("canonical", formula, canonical)], tolerances, seed=seed)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def extra_rows(adapter: TRLAdapter, seed: int = 0) -> list[RowResult]:
    """Every TRL-specific row: the GRPO loss configurations (plus a row for any ``loss_type`` the
    installed TRL offers that this module has no configuration for), TRL's bfloat16 paths, its
    free helpers, the high-entropy mask over simulated ranks and the adaptive entropy controller."""
    configs = loss_configs()
    rows = [check_loss_config(adapter, cfg, seed) for cfg in configs]
    covered = {cfg.loss_type for cfg in configs}
    for lt in adapter.grpo_loss_types():
        if lt not in covered:
            rows.append(not_implemented_row(f"trl.grpo_loss[{lt}]", "loss.*+agg", "trl.grpo_loss", adapter.name,
                                            f"TRL {adapter.version} offers loss_type {lt!r}; rlspec has no composition for it yet"))
    rows.append(check_rloo_loss(adapter, seed))
    rows.append(nanstd_row(adapter, seed))
    rows.append(soft_overlong_row(adapter))
    rows.append(fused_softmax_entropy_row(adapter, seed))
    rows += [entropy_mask_row(adapter, rho, seed) for rho in ENTROPY_MASK_RHOS]
    rows.append(entropy_mask_pool_limit_row(adapter))
    rows += [adaptive_entropy_row(adapter, case, seed) for case in adaptive_entropy_cases()]
    return rows


__all__ = ["extra_rows", "loss_configs", "offpolicy_configs", "overflow_configs", "add_overflow", "check_loss_config", "check_rloo_loss", "run_loss_config",
           "compositions", "contrasts", "make_batch", "add_rollout", "opsm_threshold", "entropy_terms", "entropy_mask_row",
           "entropy_mask_pool_limit_row", "adaptive_entropy_cases", "adaptive_entropy_row", "soft_overlong_row"]
