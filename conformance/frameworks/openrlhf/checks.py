"""OpenRLHF rows that are not single core-API calls: ``aggregate_loss`` (token-level and sample-level; local,
with the trainer's normalisers, and over two data-parallel ranks), the aggregated ``PolicyLoss`` (ppo,
asymmetric clip, dual-clip, gspo) and ``ValueLoss`` (value and gradient), ``compute_approx_kl`` per
estimator and with ``unbiased_gradient=True`` (spec v1.1 ``kl_loss_term(gradient="unbiased")``), and the estimators of
``RemoteExperienceMaker.compute_advantages_and_returns`` (group_norm, dr_grpo, rloo, flash_reinforce,
reinforce_baseline and gae with their batch whitening), and the rollout-engine importance correction
inside ``PolicyLoss`` (spec v1.1 ``offpolicy.*``): the coefficient and keep decision per setting
(``openrlhf.PolicyLoss.is_coef[...]`` / ``is_keep[...]``), the ``"seq"`` coefficient as the composition it is,
and the corrected loss ``openrlhf.PolicyLoss[ppo,is_correction=...]`` against ``w · ppo_token_loss``
aggregated as OpenRLHF aggregates (value and gradient).

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]``; ids like ``openrlhf.aggregate_loss[sample,trainer]``,
``openrlhf.PolicyLoss[ppo,dual_clip=3.0]``, ``openrlhf.advantages[group_norm]``. Loss rows are checked as in
``verl_checks`` (``checks.loss_batch``: float32, finite garbage at masked positions, value and gradient).

The trainer's normalisers come from OpenRLHF itself (``utils/loss_utils.py::get_loss_batch_info``):
``batch_num_tokens`` = the valid-token count, ``global_batch_size`` = the number of rows with at least one
valid token. The spec counts every row in ``S`` (``aggregate``: "a row with n_b = 0 adds 0 but counts in
S"), so sample-level rows with an empty completion match the variant ``num_seqs = rows with a valid token``.

Sources: openrlhf 0.11.2, ``openrlhf/models/loss.py`` (``aggregate_loss`` :11-39, ``PolicyLoss`` :116-259,
``ValueLoss`` :262-298; the ``is_correction_*`` options :128-131, :158-172, applied at :216-247), ``openrlhf/models/utils.py`` (``compute_approx_kl`` :69-128, ``compute_reward``
:131-158), ``openrlhf/trainer/ppo_utils/experience_maker.py`` (:238-387).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.frameworks.loss_batch import B, loss_batch, loss_call, mean_over_ranks, round_batch, upstream_for, value_loss_candidates
from conformance.runner.composite import Candidate, FunctionView, composition_row, fixed_row, loss_tolerances, value_and_grad_tolerances
from conformance.records.pieces import Piece, aggregate_eval, broadcast_advantages, compose, fmt, policy_piece
from conformance.runner.rows import not_implemented_row
from conformance.runner.rows import RowResult
from conformance.tolerances import tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.openrlhf.adapter import OpenRLHFAdapter

DTYPE = "float32"
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 3.0))
SEQ_KINKS = tuple(math.log(x) for x in (0.8, 1.2))
NO_SINGLETONS = "n_samples_per_prompt = 1 is rejected by OpenRLHF's CLI (cli/train_ppo_ray.py); the raw code divides by zero"


def _trainer_info(adapter: OpenRLHFAdapter, m: np.ndarray) -> dict[str, Any]:
    info = adapter.call("loss_batch_info", {"loss_mask": m.astype(np.float32)})["outputs"]
    return {"dp_size": int(info["dp_size"]), "batch_num_tokens": float(info["batch_num_tokens"]),
            "global_batch_size": float(info["global_batch_size"])}


def _spec_agg(token_level: bool, info: dict[str, Any] | None, m: np.ndarray, *, rows_with_tokens: bool) -> dict[str, Any]:
    agg: dict[str, Any] = {"mode": "token_mean" if token_level else "seq_mean_token_mean"}
    if token_level:
        agg["num_tokens"] = float(m.sum())
    else:
        agg["num_seqs"] = float((m.sum(axis=1) > 0).sum()) if rows_with_tokens else float(m.shape[0])
    return agg


# ---------------------------------------------------------------------------------------------
# aggregate_loss
# ---------------------------------------------------------------------------------------------


def agg_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    batch = round_batch(loss_batch(seed), DTYPE)
    m, x = batch["mask"], batch["token_loss"]
    tol = value_and_grad_tolerances("agg", DTYPE)
    info = _trainer_info(adapter, m)
    rows = []
    for token_level in (True, False):
        level = "token" if token_level else "sample"
        for scope in ("local", "trainer"):
            kw = {"token_level_loss": token_level}
            if scope == "trainer":
                kw.update(info)

            def got(kw: dict[str, Any] = kw) -> dict[str, Any]:
                return loss_call(adapter, "aggregate_loss", "loss", x, m, kw)

            rows.append(composition_row(f"openrlhf.aggregate_loss[{level},{scope}]", "agg", "openrlhf.aggregate_loss", adapter, got,
                                        _agg_candidates(x, m, token_level), tol, seed=seed))
        rows.append(dp_row(adapter, batch, token_level, seed, tol))
    return rows


def _agg_candidates(x: np.ndarray, m: np.ndarray, token_level: bool) -> list[Candidate]:
    spec = _spec_agg(token_level, None, m, rows_with_tokens=False)
    cands = [Candidate("canonical", f"aggregate({fmt(spec)})", aggregate_eval(x, m, spec))]
    if not token_level:
        alt = _spec_agg(token_level, None, m, rows_with_tokens=True)
        cands.append(Candidate("num_seqs = rows with a valid token", f"aggregate({fmt(alt)})", aggregate_eval(x, m, alt),
                               kwargs={"num_seqs": "rows with a valid token (loss.py:32-38, loss_utils.py:40-43)"}))
    return cands


def dp_row(adapter: OpenRLHFAdapter, batch: dict[str, np.ndarray], token_level: bool, seed: int, tol: dict[str, Any], dp: int = 2) -> RowResult:
    """Two data-parallel ranks with the global normalisers (token count, non-empty rows) and ``dp_size``;
    DeepSpeed/DDP average the ranks' gradients (``checks.mean_over_ranks``)."""
    m, x = batch["mask"], batch["token_loss"]
    info = _trainer_info(adapter, m)
    params = {"token_level_loss": token_level, "dp_size": dp, "batch_num_tokens": info["batch_num_tokens"],
              "global_batch_size": info["global_batch_size"]}

    def got() -> dict[str, Any]:
        return mean_over_ranks(lambda rows: loss_call(adapter, "aggregate_loss", "loss", x[rows], m[rows], params), m, dp)

    level = "token" if token_level else "sample"
    return composition_row(f"openrlhf.aggregate_loss[{level},dp={dp}]", "agg", "openrlhf.aggregate_loss", adapter, got,
                           _agg_candidates(x, m, token_level), tol, seed=seed,
                           note=f"(mean over {dp} ranks, each with dp_size={dp} and the whole batch's normalisers)")


# ---------------------------------------------------------------------------------------------
# PolicyLoss / ValueLoss
# ---------------------------------------------------------------------------------------------


def policy_row(adapter: OpenRLHFAdapter, seed: int, init: dict[str, Any], asked: dict[str, Any], *, per_token_advantages: bool = False,
               trainer: bool = True) -> RowResult:
    kind = init.get("policy_loss_type", "ppo")
    function, spec_id = ("gspo_token_loss", "loss.gspo") if kind == "gspo" else ("ppo_token_loss", "loss.ppo")
    batch = round_batch(loss_batch(seed, per_token_advantages=per_token_advantages, kinks=KINKS,
                                   seq_kinks=SEQ_KINKS if kind == "gspo" else ()), DTYPE)
    m = batch["mask"]
    token_level = kind != "gspo"  # PolicyLoss forces token_level_loss=False for gspo (loss.py:150-151)
    info = _trainer_info(adapter, m) if trainer else {}

    def got() -> dict[str, Any]:
        arrays = {"log_probs": batch["logp"].astype(np.float32), "old_log_probs": batch["old_logp"].astype(np.float32),
                  "advantages": broadcast_advantages(batch).astype(np.float32), "action_mask": m.astype(np.float32)}
        r = adapter.call("policy_loss", arrays, {"init": init, **info}, wrt=["log_probs"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_probs"]}

    preset = {**preset_kwargs("openrlhf", function), **asked}
    cands = []
    for rows_with_tokens in ((False, True) if not token_level else (False,)):
        agg = _spec_agg(token_level, info, m, rows_with_tokens=rows_with_tokens)
        s_note = ", num_seqs = rows with a valid token" if rows_with_tokens else ""
        for label, kw, name in (("canonical", asked, None), ("preset", preset, "openrlhf")):
            if name and preset == asked:
                continue
            diff = {k: v for k, v in kw.items() if asked.get(k, object()) != v}

            def ev(kw: dict[str, Any] = kw, agg: dict[str, Any] = agg) -> dict[str, Any]:
                return compose(policy_piece(function, batch["logp"], batch, **kw), m, agg, "grad[logp]")

            lab = "canonical" if label == "canonical" and not rows_with_tokens else ", ".join(
                x for x in (fmt(diff), s_note.strip(", ")) if x)
            extra = {"num_seqs": "rows with a valid token"} if rows_with_tokens else {}
            cands.append(Candidate(lab, f"aggregate({function}({fmt(kw)}), {fmt(agg)})", ev,
                                   preset=name, kwargs={**diff, **extra}))
    parts = [kind] + [f"{k}={v}" for k, v in init.items() if k != "policy_loss_type"] + (["A=[B,T]"] if per_token_advantages else []) \
        + ([] if trainer else ["local"])
    return composition_row(f"openrlhf.PolicyLoss[{','.join(parts)}]", f"{spec_id}+agg", "openrlhf.PolicyLoss", adapter, got, cands,
                           loss_tolerances(DTYPE, spec_id), seed=seed)


def value_row(adapter: OpenRLHFAdapter, seed: int, clip_eps: float | None, asked: dict[str, Any]) -> RowResult:
    batch = round_batch(loss_batch(seed), DTYPE)
    m = batch["mask"]
    info = _trainer_info(adapter, m)
    agg = _spec_agg(True, info, m, rows_with_tokens=False)

    def got() -> dict[str, Any]:
        arrays = {"values": batch["values"].astype(np.float32), "old_values": batch["old_values"].astype(np.float32),
                  "returns": batch["returns"].astype(np.float32), "action_mask": m.astype(np.float32)}
        r = adapter.call("value_loss", arrays, {"clip_eps": clip_eps, **info}, wrt=["values"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[values]": r["grads"]["values"]}

    return composition_row(f"openrlhf.ValueLoss[clip_eps={clip_eps}]", "loss.value+agg", "openrlhf.ValueLoss", adapter, got,
                           value_loss_candidates("openrlhf", batch, agg, asked), loss_tolerances(DTYPE, "loss.value"), seed=seed)


def loss_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    return [
        policy_row(adapter, seed, {"policy_loss_type": "ppo"}, {}),  # defaults: 0.2/0.2, no dual clip
        policy_row(adapter, seed, {"policy_loss_type": "ppo"}, {}, trainer=False),
        policy_row(adapter, seed, {"policy_loss_type": "ppo", "clip_eps_high": 0.28}, {"eps_high": 0.28}),
        policy_row(adapter, seed, {"policy_loss_type": "ppo", "dual_clip": 3.0}, {"dual_clip": 3.0}),
        policy_row(adapter, seed, {"policy_loss_type": "ppo"}, {}, per_token_advantages=True),
        policy_row(adapter, seed, {"policy_loss_type": "gspo"}, {}),
        policy_row(adapter, seed, {"policy_loss_type": "gspo"}, {}, per_token_advantages=True),
        value_row(adapter, seed, 0.5, {}),  # the CLI's value_clip default
        value_row(adapter, seed, None, {}),
    ]


# ---------------------------------------------------------------------------------------------
# compute_approx_kl
# ---------------------------------------------------------------------------------------------


def kl_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    rows = []
    for est in ("k1", "k2", "k3"):
        view = FunctionView(adapter, "kl_penalty",
                            lambda lp, ref, m, *, estimator="k1": adapter.approx_kl(lp, ref, m, estimator=estimator),
                            lambda lp, ref, m, up, *, estimator="k1": adapter.approx_kl(lp, ref, m, estimator=estimator, upstream=up))
        rows.append(fixed_row(view, "kl_penalty", row_id=f"openrlhf.compute_approx_kl[{est}]", fixed={"estimator": est}, seed=seed))
        rows.append(kl_batch_row(adapter, seed, est, unbiased=False))
        rows.append(kl_batch_row(adapter, seed, est, unbiased=True))
        rows.append(unbiased_row(adapter, seed, est))
    return rows


def _needs_old_logp(case: Any) -> str | None:
    return "no old_logp in this case: the unbiased form's weight needs one" if case.args.get("old_logp") is None else None


def unbiased_row(adapter: OpenRLHFAdapter, seed: int, est: str) -> RowResult:
    """``compute_approx_kl(kl_estimator=est, unbiased_gradient=True, log_probs_old=old_logp)`` as spec v1.1
    ``kl_loss_term(estimator=est, gradient="unbiased")`` on the seeded property cases and golden vectors
    (``models/utils.py:115-128``: the estimate's value, the gradient of w·½d² with w = min(π/π_old, 10)
    detached)."""
    view = FunctionView(
        adapter, "kl_loss_term",
        lambda lp, ref, m, old=None, *, estimator="k3", gradient="estimator": adapter.approx_kl(
            lp, ref, m, estimator=est, old_logp=old, unbiased_gradient=True),
        lambda lp, ref, m, old, up, *, estimator="k3", gradient="estimator": adapter.approx_kl(
            lp, ref, m, estimator=est, old_logp=old, unbiased_gradient=True, upstream=up),
    )
    return fixed_row(view, "kl_loss_term", row_id=f"openrlhf.compute_approx_kl[{est},unbiased_gradient]",
                     fixed={"estimator": est, "gradient": "unbiased"}, seed=seed, skip=_needs_old_logp)


def kl_batch_row(adapter: OpenRLHFAdapter, seed: int, est: str, *, unbiased: bool) -> RowResult:
    """On the loss batch (k3 beyond the ±10 clamp on one token); with ``unbiased_gradient=True`` the value
    is the estimator's and the gradient is w·(logp − ref) with w = min(π/π_old, 10), detached
    (``models/utils.py:118-128``): spec v1.1 ``kl_loss_term(gradient="unbiased")``."""
    batch = round_batch(loss_batch(seed), DTYPE)
    m, lp, ref, old = batch["mask"], batch["logp"], batch["ref_logp"], batch["old_logp"]
    u = upstream_for(m.shape, seed + 11, DTYPE)
    f32 = np.float32

    def got() -> dict[str, Any]:
        kw = {"estimator": est, "unbiased_gradient": unbiased, "old_logp": old.astype(f32) if unbiased else None}
        return {"value": adapter.approx_kl(lp.astype(f32), ref.astype(f32), m, **kw),
                "grad[logp]": adapter.approx_kl(lp.astype(f32), ref.astype(f32), m, upstream=u.astype(f32), **kw)}

    def ev(kw: dict[str, Any]) -> Any:
        if unbiased:
            kw = {**kw, "gradient": "unbiased"}
            return lambda: {"value": oracle.kl_loss_term(lp, ref, m, old, **kw),
                            "grad[logp]": oracle.kl_loss_term_grad(lp, ref, m, old, u, **kw)}
        return lambda: {"value": oracle.kl_penalty(lp, ref, m, **kw), "grad[logp]": oracle.kl_penalty_grad(lp, ref, m, u, **kw)}

    name = "kl_loss_term(gradient='unbiased', " if unbiased else "kl_penalty("
    canonical = {"estimator": est}
    clamp = preset_kwargs("openrlhf", "kl_penalty")
    preset = {**canonical, **clamp}
    cands = [Candidate("canonical", f"{name}{fmt(canonical)})", ev(canonical)),
             Candidate(fmt(clamp), f"{name}{fmt(preset)})", ev(preset), preset="openrlhf", kwargs=dict(clamp))]
    rid = f"openrlhf.compute_approx_kl[{est},loss batch{',unbiased_gradient' if unbiased else ''}]"
    spec_id = "kl.loss" if unbiased else "kl.estimator"
    return composition_row(rid, spec_id, "openrlhf.compute_approx_kl", adapter, got, cands,
                           value_and_grad_tolerances(spec_id, DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# compute_advantages_and_returns
# ---------------------------------------------------------------------------------------------


def advantage_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    if not adapter.has_experience_maker:
        return [not_implemented_row("openrlhf.advantages", "adv.*", "openrlhf.compute_advantages_and_returns", adapter,
                                    "openrlhf.trainer.ppo_utils.experience_maker did not import in the worker")]

    def singletons(case: Any) -> str | None:
        return NO_SINGLETONS if case.args.get("group_size") == 1 else None

    rows = []
    for estimator, fixed in (("group_norm", {"scale": "group"}), ("dr_grpo", {"scale": "none"})):
        view = FunctionView(adapter, "grpo_advantages", lambda r, G, *, scale="group", e=estimator: adapter.outcome_advantages(e, r, G))
        rows.append(fixed_row(view, "grpo_advantages", row_id=f"openrlhf.advantages[{estimator}]", fixed=fixed, seed=seed, skip=singletons))
    view = FunctionView(adapter, "rloo_advantages", lambda r, G: adapter.outcome_advantages("rloo", r, G))
    rows.append(fixed_row(view, "rloo_advantages", row_id="openrlhf.advantages[rloo]", fixed={}, seed=seed, skip=singletons))
    view = FunctionView(adapter, "reinforce_advantages", lambda r, *, baseline="none": adapter.outcome_advantages("flash_reinforce", r, 1))
    rows.append(fixed_row(view, "reinforce_advantages", row_id="openrlhf.advantages[flash_reinforce]", fixed={"baseline": "batch_mean"}, seed=seed))
    rows.append(reinforce_baseline_row(adapter, seed))
    rows += [reinforce_row(adapter, seed, gamma, KL_COEF) for gamma in (1.0, 0.9)]
    rows += [gae_row(adapter, seed, 1.0, 1.0), gae_row(adapter, seed, 0.99, 0.95)]
    return rows


KL_COEF = 0.05  # a KL coefficient for the rows that fold the KL reward in (--algo.kl.init_coef is 0.01)
RPP_PRESET = preset_kwargs("openrlhf", "reinforce_pp_advantages")


def reinforce_row(adapter: OpenRLHFAdapter, seed: int, gamma: float, kl_coef: float) -> RowResult:
    """``reinforce`` (spec v1.1 adv.reinforce_pp) with the KL in the reward: compute_reward's token rewards (the
    score on the last action token, ``-kl_coef * kl`` on every token, models/utils.py:131-158), their
    cumulative returns with gamma over every position (get_cumulative_returns, experience_maker.py:390-421),
    then the batch whitening: the composition ``reinforce_pp_advantages(rlhf_token_rewards(scores, logp,
    ref_logp, mask, kl_coef, "k1"), mask, gamma)``, on the loss batch (a masked tool token in row 3, where
    the gap rules differ for gamma < 1)."""
    batch = round_batch(loss_batch(seed), DTYPE)
    m, lp, ref = batch["mask"], batch["logp"], batch["ref_logp"]
    scores = np.round(np.random.default_rng(seed + 9).normal(0.0, 1.0, size=m.shape[0]), 3).astype(np.float32).astype(np.float64)
    kl = np.where(m, lp - ref, 0.0)  # compute_approx_kl's k1 (experience_maker.py:206-210), 0 where masked

    def got() -> dict[str, Any]:
        adv, ret = adapter.experience_advantages("reinforce", scores.astype(np.float32), 1, mask=m, kl=kl.astype(np.float32),
                                                 kl_coef=kl_coef, gamma=gamma)
        return {"value": np.where(m, adv, 0.0), "returns": np.where(m, ret, 0.0)}

    def ev(kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            token_rewards = oracle.rlhf_token_rewards(scores, lp, ref, m, kl_coef=kl_coef, estimator="k1")
            A, R = oracle.reinforce_pp_advantages(token_rewards, m, gamma=gamma, **kw)
            return {"value": A, "returns": R}
        return run

    formula = "reinforce_pp_advantages(rlhf_token_rewards(scores, logp, ref_logp, mask, kl_coef={:g}), mask, gamma={:g}{})"
    cands = [Candidate("canonical", formula.format(kl_coef, gamma, ""), ev({})),
             Candidate(fmt(RPP_PRESET), formula.format(kl_coef, gamma, ", " + fmt(RPP_PRESET)), ev(RPP_PRESET),
                       preset="openrlhf", kwargs=RPP_PRESET)]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value"), "returns": tolerance("adv.gae", DTYPE, "value")}
    return composition_row(f"openrlhf.advantages[reinforce,gamma={gamma:g},kl_coef={kl_coef:g}]", "reward.rlhf+adv.reinforce_pp",
                           "openrlhf.compute_advantages_and_returns", adapter, got, cands, tol, seed=seed)


WHITEN_PRESET = preset_kwargs("openrlhf", "whiten")
RPPB_PRESET = preset_kwargs("openrlhf", "reinforce_pp_baseline_advantages")


def reinforce_baseline_row(adapter: OpenRLHFAdapter, seed: int, G: int = 2) -> RowResult:
    """``reinforce_baseline`` (spec v1.1 adv.reinforce_pp_baseline): r − group mean, broadcast over the valid
    tokens (cumulative returns with γ = 1), then whitened over every valid token of the batch (biased
    variance, floored at 1e-8), on the loss batch (garbage at masked positions, an empty row)."""
    batch = round_batch(loss_batch(seed), DTYPE)
    m = batch["mask"]
    rewards = np.round(np.random.default_rng(seed + 3).normal(0.0, 1.0, size=m.shape[0]), 3).astype(np.float32).astype(np.float64)

    def got() -> dict[str, Any]:
        adv, _ = adapter.experience_advantages("reinforce_baseline", rewards.astype(np.float32), G, mask=m)
        return {"value": np.where(m, adv, 0.0)}

    def ev(kw: dict[str, Any]) -> Any:
        return lambda: {"value": oracle.reinforce_pp_baseline_advantages(rewards, G, m, **kw)}

    cands = [Candidate("canonical", f"reinforce_pp_baseline_advantages(group_size={G})", ev({})),
             Candidate(fmt(RPPB_PRESET), f"reinforce_pp_baseline_advantages(group_size={G}, {fmt(RPPB_PRESET)})",
                       ev(RPPB_PRESET), preset="openrlhf", kwargs=RPPB_PRESET)]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value")}
    return composition_row("openrlhf.advantages[reinforce_baseline]", "adv.reinforce_pp_baseline", "openrlhf.compute_advantages_and_returns",
                           adapter, got, cands, tol, seed=seed)


def gae_row(adapter: OpenRLHFAdapter, seed: int, gamma: float, lam: float) -> RowResult:
    """``gae``: the score on each row's last valid token (``compute_reward``, KL coefficient 0), GAE
    through ``get_advantages_and_returns`` on the loss batch (a masked tool token inside row 3's
    completion), then the batch whitening (biased variance)."""
    batch = round_batch(loss_batch(seed), DTYPE)
    m, values = batch["mask"], batch["values"]
    scores = np.round(np.random.default_rng(seed + 5).normal(0.0, 1.0, size=m.shape[0]), 3).astype(np.float32).astype(np.float64)

    def got() -> dict[str, Any]:
        adv, ret = adapter.experience_advantages("gae", scores.astype(np.float32), 1, mask=m, values=values.astype(np.float32),
                                                 gamma=gamma, lambd=lam)
        return {"value": np.where(m, adv, 0.0), "returns": np.where(m, ret, 0.0)}

    def ev(kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            r = oracle.rlhf_token_rewards(scores, batch["logp"], batch["logp"], m, kl_coef=0.0)
            a, ret = oracle.gae(r, values, m, gamma=gamma, lam=lam)
            return {"value": oracle.whiten(a, m, **kw), "returns": ret}
        return run

    cands = [Candidate("canonical", f"whiten(gae(gamma={gamma:g}, lam={lam:g}).advantages), gae(...).returns", ev({})),
             Candidate(fmt(WHITEN_PRESET), f"whiten(gae(gamma={gamma:g}, lam={lam:g}).advantages, {fmt(WHITEN_PRESET)}), gae(...).returns",
                       ev(WHITEN_PRESET), preset="openrlhf", kwargs=WHITEN_PRESET)]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value"), "returns": tolerance("adv.gae", DTYPE, "value")}
    return composition_row(f"openrlhf.advantages[gae,gamma={gamma:g},lambd={lam:g}]", "adv.gae+adv.whiten",
                           "openrlhf.compute_advantages_and_returns", adapter, got, cands, tol, seed=seed)


# ---------------------------------------------------------------------------------------------
# The rollout-engine importance correction (spec v1.1: offpolicy.is_weights, offpolicy.rejection)
# ---------------------------------------------------------------------------------------------

IS_DEFAULT = (0.5, 5.0)  # is_correction_threshold default (loss.py:131, cli/train_ppo_ray.py:285-289)
IS_KINKS = tuple(math.log(x) for x in (*IS_DEFAULT, 0.8, 1.25))  # the bounds of the rows below, as log-ratios
# (row of loss_mask(), target mean of log rho = old - rollout): row 0 kept at seq level with tokens beyond
# [0.5, 5] (the token gate drops them, the seq gate keeps their own rho); row 1's geometric mean is above 5,
# row 3's below 0.5 (both dropped whole); row 2 is one token above 5; row 4 is empty; row 5 is kept.
ROW_MEANS = (0.1, 2.0, 1.9, -1.0, 0.0, 0.4)


def _away(x: np.ndarray, kinks: tuple[float, ...], margin: float = 0.03) -> bool:
    return bool(np.all(np.abs(np.asarray(x, dtype=np.float64)[..., None] - np.asarray(kinks)) > margin))


def rollout_batch(seed: int) -> dict[str, np.ndarray]:
    """The loss batch (PPO log-ratios away from the clip kinks) and ``rollout_logp`` = old_logp - log rho,
    with log rho per token away from every bound of the rows (``IS_KINKS``) and each row's mean at
    ``ROW_MEANS`` (geometric means inside and outside [0.5, 5]); finite garbage where masked."""
    batch = round_batch(loss_batch(seed, kinks=KINKS), DTYPE)
    m = batch["mask"]
    rng = np.random.default_rng(seed + 23)
    d = np.zeros(m.shape)
    for b in range(B):
        n = int(m[b].sum())
        while n:
            x = rng.choice([-1.0, 1.0], size=n) * rng.uniform(0.1, 2.2, size=n)
            x += ROW_MEANS[b] - x.mean()
            if _away(x, IS_KINKS) and (n == 1 or (np.abs(x) > 1.7).any()):
                d[b][m[b]] = x
                break
    rollout = np.where(m, batch["old_logp"] - d, rng.uniform(-3.0, 0.0, size=m.shape))
    return {**batch, "rollout_logp": round_batch({"r": rollout}, DTYPE)["r"]}


def is_function_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    """The coefficient and the keep decision of ``PolicyLoss``'s ratio gate, checked like the core rows
    (property cases, golden vectors, invariants) with the keywords of one OpenRLHF setting fixed: every
    property case then exercises that setting (the core rows ask every level, most not expressible)."""
    weights = FunctionView(adapter, "rollout_is_weights", adapter.rollout_is_weights)
    keep = FunctionView(adapter, "rollout_rejection_mask", adapter.rollout_rejection_mask)
    lo, hi = IS_DEFAULT
    return [
        # is_correction_level="token", any mode and bounds
        fixed_row(weights, "rollout_is_weights", row_id="openrlhf.PolicyLoss.is_coef[token]",
                  fixed={"level": "token", "batch_normalize": False}, seed=seed),
        # the defaults: "mask" (IcePop) and "clip" (TIS) with is_correction_threshold (0.5, 5.0)
        fixed_row(weights, "rollout_is_weights", row_id="openrlhf.PolicyLoss.is_coef[token,mask]",
                  fixed={"level": "token", "batch_normalize": False, "mode": "mask", "lo": lo, "hi": hi}, seed=seed),
        fixed_row(weights, "rollout_is_weights", row_id="openrlhf.PolicyLoss.is_coef[token,clip]",
                  fixed={"level": "token", "batch_normalize": False, "mode": "truncate", "lo": lo, "hi": hi}, seed=seed),
        # the "mask" gate's keep decision at the default threshold, and at a tight one (most rows' geometric
        # means fall outside [0.8, 1.25]); the bounds are fixed because the generated ones are also k1/k2/k3's
        fixed_row(keep, "rollout_rejection_mask", row_id="openrlhf.PolicyLoss.is_keep[token]",
                  fixed={"statistic": "ratio", "level": "token", "lo": lo, "hi": hi}, seed=seed),
        fixed_row(keep, "rollout_rejection_mask", row_id="openrlhf.PolicyLoss.is_keep[seq]",
                  fixed={"statistic": "ratio", "level": "seq_mean", "lo": lo, "hi": hi}, seed=seed),
        fixed_row(keep, "rollout_rejection_mask", row_id="openrlhf.PolicyLoss.is_keep[seq,threshold=(0.8, 1.25)]",
                  fixed={"statistic": "ratio", "level": "seq_mean", "lo": 0.8, "hi": 1.25}, seed=seed),
        seq_coef_row(adapter, seed),
    ]


def _seq_coef(batch: dict[str, np.ndarray], threshold: tuple[float, float]) -> np.ndarray:
    """NOT_EXPRESSIBLE["openrlhf"]["rollout_is_weights"]: each token's own rho where the row's geometric
    mean is in bounds: rollout_is_weights(mode="none") x rollout_rejection_mask(level="seq_mean")."""
    old, roll, m = batch["old_logp"], batch["rollout_logp"], batch["mask"]
    rho = oracle.rollout_is_weights(old, roll, m, mode="none")
    return rho * oracle.rollout_rejection_mask(old, roll, m, level="seq_mean", lo=threshold[0], hi=threshold[1])


def _seq_formula(threshold: tuple[float, float]) -> str:
    return (f"rollout_is_weights(mode='none') * rollout_rejection_mask(level='seq_mean', lo={threshold[0]!r}, "
            f"hi={threshold[1]!r})")


def seq_coef_row(adapter: OpenRLHFAdapter, seed: int) -> RowResult:
    """``is_correction_level="seq"`` (mask mode, default threshold): the gate reads the row's geometric mean
    (loss.py:223-224) but the surviving tokens keep their own rho (:239). The spec's sequence-level weight
    is one weight per row, so the row is compared first with that (at OpenRLHF's bounds), then with the
    composition it is."""
    batch = rollout_batch(seed)
    m, threshold = batch["mask"], IS_DEFAULT

    def got() -> dict[str, Any]:
        coef = adapter.is_correction_coef(batch["old_logp"].astype(np.float32), batch["rollout_logp"].astype(np.float32), m,
                                          level="seq", mode="mask", threshold=threshold)
        return {"value": coef}

    seq_kw = {"level": "sequence", "seq_stat": "geometric", "mode": "mask", "lo": threshold[0], "hi": threshold[1]}
    cands = [
        Candidate("canonical", f"rollout_is_weights({fmt(seq_kw)})",
                  lambda: {"value": oracle.rollout_is_weights(batch["old_logp"], batch["rollout_logp"], m, **seq_kw)}),
        Candidate("each surviving token keeps its own rho", _seq_formula(threshold),
                  lambda: {"value": _seq_coef(batch, threshold)}, preset="openrlhf",
                  kwargs={"rollout_is_weights": {"mode": "none"},
                          "rollout_rejection_mask": {"level": "seq_mean", "lo": threshold[0], "hi": threshold[1]}}),
    ]
    return composition_row("openrlhf.PolicyLoss.is_coef[seq,mask]", "offpolicy.is_weights+offpolicy.rejection",
                           "openrlhf.PolicyLoss", adapter, got, cands, value_and_grad_tolerances("offpolicy.is_weights", DTYPE),
                           seed=seed)


def corrected_policy_row(adapter: OpenRLHFAdapter, seed: int, level: str, mode: str, asked: dict[str, Any],
                         threshold: tuple[float, float] | None = None) -> RowResult:
    """``PolicyLoss(policy_loss_type="ppo", is_correction_level=level, is_correction_mode=mode)`` with the
    trainer's normalisers, on the rollout batch (finite garbage where masked, as real padding), value and
    gradient w.r.t. ``log_probs``, against ``aggregate(w * ppo_token_loss, token_mean)`` over the whole
    ``action_mask`` (rejected tokens count, as zeros: loss.py:241, :249-256). ``asked``: the spec keywords
    of the options this row sets (``rollout_is_weights``'s); the rest is compared canonical first, then
    with the openrlhf presets (``rollout_is_weights`` mask [0.5, 5], ``ppo_token_loss`` log_ratio_clamp
    20), then, for ``"seq"``, with the composition of ``_seq_coef``."""
    batch = rollout_batch(seed)
    m, old, roll, lp = batch["mask"], batch["old_logp"], batch["rollout_logp"], batch["logp"]
    info = _trainer_info(adapter, m)
    init = adapter.correction_init(level, mode, threshold or IS_DEFAULT)
    agg = _spec_agg(True, info, m, rows_with_tokens=False)

    def got() -> dict[str, Any]:
        arrays = {"log_probs": lp.astype(np.float32), "old_log_probs": old.astype(np.float32),
                  "advantages": broadcast_advantages(batch).astype(np.float32), "rollout_log_probs": roll.astype(np.float32),
                  "action_mask": m.astype(np.float32)}
        r = adapter.call("policy_loss", arrays, {"init": init, **info}, wrt=["log_probs"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_probs"]}

    def ev(weights: Any, ppo_kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            w = weights()
            ppo = policy_piece("ppo_token_loss", lp, batch, **ppo_kw)
            return compose(Piece(w * ppo.value, lambda u: ppo.vjp(u * w)), m, agg, "grad[logp]")
        return run

    def is_w(kw: dict[str, Any]) -> Any:
        return lambda: oracle.rollout_is_weights(old, roll, m, **kw)

    ppo_preset = preset_kwargs("openrlhf", "ppo_token_loss")
    w_preset = {**preset_kwargs("openrlhf", "rollout_is_weights"), **asked}
    agg_txt = fmt(agg)
    cands = [Candidate("canonical", f"aggregate(rollout_is_weights({fmt(asked)}) * ppo_token_loss(), {agg_txt})", ev(is_w(asked), {}))]
    if w_preset != asked:
        diff = {k: v for k, v in w_preset.items() if asked.get(k, object()) != v}
        cands.append(Candidate(fmt(diff), f"aggregate(rollout_is_weights({fmt(w_preset)}) * ppo_token_loss(), {agg_txt})",
                               ev(is_w(w_preset), {}), preset="openrlhf", kwargs={"rollout_is_weights": diff}))
    cands.append(Candidate(f"{fmt(w_preset)}, ppo {fmt(ppo_preset)}",
                           f"aggregate(rollout_is_weights({fmt(w_preset)}) * ppo_token_loss({fmt(ppo_preset)}), {agg_txt})",
                           ev(is_w(w_preset), ppo_preset), preset="openrlhf",
                           kwargs={"rollout_is_weights": w_preset, "ppo_token_loss": ppo_preset}))
    if level == "seq":
        th = threshold or IS_DEFAULT
        cands.append(Candidate("each surviving token keeps its own rho",
                               f"aggregate(({_seq_formula(th)}) * ppo_token_loss(), {agg_txt})",
                               ev(lambda: _seq_coef(batch, th), {}), preset="openrlhf",
                               kwargs={"rollout_is_weights": {"mode": "none"},
                                       "rollout_rejection_mask": {"level": "seq_mean", "lo": th[0], "hi": th[1]}}))
    parts = [f"is_correction={level}/{mode}"] + ([f"threshold={tuple(threshold)}"] if threshold else [])
    return composition_row(f"openrlhf.PolicyLoss[ppo,{','.join(parts)}]", "offpolicy.is_weights+loss.ppo+agg",
                           "openrlhf.PolicyLoss", adapter, got, cands, loss_tolerances(DTYPE), seed=seed)


def corrected_loss_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    """The corrected PPO loss per setting. ("seq" with "clip" is refused by PolicyLoss itself, loss.py:166-169.)"""
    return [
        corrected_policy_row(adapter, seed, "token", "mask", {}),  # the defaults: IcePop on [0.5, 5]
        corrected_policy_row(adapter, seed, "token", "clip", {"mode": "truncate"}),  # TIS clamped to [0.5, 5]
        corrected_policy_row(adapter, seed, "token", "mask", {"mode": "mask", "lo": 0.8, "hi": 1.25}, threshold=(0.8, 1.25)),
        corrected_policy_row(adapter, seed, "seq", "mask", {"level": "sequence", "seq_stat": "geometric"}),
    ]


def offpolicy_rows(adapter: OpenRLHFAdapter, seed: int) -> list[RowResult]:
    return is_function_rows(adapter, seed) + corrected_loss_rows(adapter, seed)


def extra_rows(adapter: OpenRLHFAdapter, seed: int = 0) -> list[RowResult]:
    """Every OpenRLHF-specific row."""
    return (agg_rows(adapter, seed) + loss_rows(adapter, seed) + kl_rows(adapter, seed) + advantage_rows(adapter, seed)
            + offpolicy_rows(adapter, seed))


__all__ = ["extra_rows", "agg_rows", "loss_rows", "kl_rows", "advantage_rows", "offpolicy_rows", "rollout_batch"]
