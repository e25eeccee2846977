"""AReaL rows that are not single core-API calls: its loss functions as AReaL reduces them (a token mean
over the micro-batch's original loss mask, value and gradient), the PPO actor's advantage pipeline
(``PPOActor._compute_advantages``: reward normalisation, the KL reward, GAE, advantage normalisation,
the no-EOS rules) and the actor's loss function (``grpo_loss_fn``: the proximal approximation, rejection
sampling), each as a composition of spec quantities.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.frameworks.areal.adapter.ArealAdapter``). Row ids look like
``areal.ppo_actor_loss_fn[token,c_clip=3.0]`` or ``areal.compute_advantages[grpo]``.

How a loss row is checked: the seeded float32 loss batch of ``conformance/frameworks/loss_batch.py`` (ragged
rows, a masked tool token, an empty completion, finite garbage at every masked position) goes to AReaL
unchanged (``loss_mask`` = the mask); AReaL returns the scalar and, by autograd, its gradient w.r.t.
``logprobs``. The oracle (float64 on the same float32-rounded inputs) composes the spec pieces, e.g.
``aggregate(ppo_token_loss(...), mode="token_mean")``. The first candidate that matches value and
gradient decides the row: canonical (``pass``), a named preset (``preset``), else ``fail``.

How an advantage row is checked: ``PPOActor._compute_advantages`` on a padded batch built from the loss
batch's mask (``ArealAdapter.padded_batch``, AReaL's one-position shift undone by the adapter's
helpers), against the spec composition on the token-aligned arrays.

Sources: areal 1.0.4, ``areal/utils/functional/functional.py`` (``ppo_actor_loss_fn`` :429-559,
``sapo_loss_fn`` :562-638, ``ppo_critic_loss_fn`` :714-778, ``apply_rejection_sampling`` :185-426),
``areal/trainer/ppo/actor.py`` (``_compute_advantages`` :145-249, ``grpo_loss_fn`` :408-596,
``compute_prox_logp_approximations`` :604-684, ``_apply_m2po_masking`` :769-857),
``areal/utils/data.py`` (``Normalization`` :1378-1595, ``KLEstimator`` :1598-1656),
``areal/api/cli_args.py`` (``NormConfig`` :43-96, ``RejectionSamplingConfig`` :1288-1450,
``PPOActorConfig`` :1453-1640, ``PPOCriticConfig`` :1653).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.composite import Candidate, FunctionView, composition_row, fixed_row, loss_tolerances
from conformance.records.pieces import Piece, compose, fmt, policy_piece
from conformance.frameworks.loss_batch import loss_batch, round_batch, value_loss_candidates
from conformance.runner.rows import not_implemented_row
from conformance.runner.rows import RowResult
from conformance.tolerances import tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.areal.adapter import ArealAdapter

DTYPE = "float32"  # AReaL's log-probs are float32 (vocab_parallel.py:18), its critic asserts float32 (functional.py:740)
TOKEN_MEAN = {"mode": "token_mean"}  # Σ m·x / count of the original loss_mask (functional.py:483, :542)
# clip kinks in log space: 1 -+ 0.2, 1 + 0.28, dual clip 3, the rejection cap 5
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 3.0, 5.0))
GSPO = {"eps_low": 3e-4, "eps_high": 4e-4}
SEQ_KINKS = tuple(math.log(x) for x in (1 - 3e-4, 1 + 4e-4, 0.8, 1.2, 5.0))


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def row_mean(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Each valid token holds its row's masked mean of ``x`` (0 at masked positions)."""
    n = np.maximum(m.sum(axis=1, keepdims=True), 1)
    return np.where(m, np.where(m, x, 0.0).sum(axis=1, keepdims=True) / n, 0.0)


def row_mean_vjp(u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """u · d row_mean(x) / dx: every valid token receives its row's upstream total over n_b."""
    return row_mean(u, m)


def _per_token_advantages(b: dict[str, np.ndarray]) -> np.ndarray:
    a = b["advantages"]
    return a if a.ndim == 2 else np.broadcast_to(a[:, None], b["mask"].shape).copy()


# ---------------------------------------------------------------------------------------------
# The loss functions, reduced as AReaL reduces them
# ---------------------------------------------------------------------------------------------


def _loss_row(adapter: ArealAdapter, seed: int, row_id: str, spec_id: str, function: str, op: str, arrays: dict[str, np.ndarray],
              params: dict[str, Any], candidates: list[Candidate], wrt: str = "logprobs", key: str = "grad[logp]",
              note: str = "") -> RowResult:
    def got() -> dict[str, Any]:
        r = adapter.call(op, arrays, params, wrt=[wrt], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], key: r["grads"][wrt]}

    return composition_row(row_id, spec_id, function, adapter, got, candidates, loss_tolerances(DTYPE, spec_id.split("+")[0]),
                           seed=seed, note=note)


def _policy_arrays(b: dict[str, np.ndarray], advantages: np.ndarray | None = None) -> dict[str, np.ndarray]:
    return {"logprobs": _f32(b["logp"]), "old_logprobs": _f32(b["old_logp"]),
            "advantages": _f32(_per_token_advantages(b) if advantages is None else advantages), "loss_mask": b["mask"]}


def _composed(function: str, lp: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Any:
    return lambda: compose(policy_piece(function, lp, b, **kw), b["mask"], TOKEN_MEAN, "grad[logp]")


def ppo_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``ppo_actor_loss_fn`` without rejection sampling (the actor's default path: proximal = old)."""
    rows = []
    for label, params, asked, per_token in (
        ("token", {"eps_clip": 0.2}, {}, False),  # PPOActorConfig defaults: eps_clip 0.2, no eps_clip_higher, no c_clip
        ("token,eps_clip_higher=0.28,c_clip=3.0", {"eps_clip": 0.2, "eps_clip_higher": 0.28, "c_clip": 3.0},
         {"eps_high": 0.28, "dual_clip": 3.0}, False),
        ("token,A=[B,T]", {"eps_clip": 0.2}, {}, True),
    ):
        b = round_batch(loss_batch(seed, per_token_advantages=per_token, kinks=KINKS), DTYPE)
        cands = [Candidate("canonical", f"aggregate(ppo_token_loss({fmt(asked)}), mode='token_mean')",
                           _composed("ppo_token_loss", b["logp"], b, **asked))]
        rows.append(_loss_row(adapter, seed, f"areal.ppo_actor_loss_fn[{label}]", "loss.ppo+agg", "areal.ppo_actor_loss_fn",
                              "policy_loss", _policy_arrays(b), params, cands))
    return rows


def gspo_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``importance_sampling_level="sequence"``: the geometric-mean ratio with its gradient and each row's
    mean token advantage (functional.py:56-149, :501-506)."""
    rows = []
    params = {"eps_clip": GSPO["eps_low"], "eps_clip_higher": GSPO["eps_high"], "importance_sampling_level": "sequence"}
    b = round_batch(loss_batch(seed, kinks=KINKS, seq_kinks=SEQ_KINKS), DTYPE)
    cands = [Candidate("canonical", f"aggregate(gspo_token_loss({fmt(GSPO)}), mode='token_mean')",
                       _composed("gspo_token_loss", b["logp"], b, **GSPO))]
    rows.append(_loss_row(adapter, seed, "areal.ppo_actor_loss_fn[sequence]", "loss.gspo+agg", "areal.ppo_actor_loss_fn",
                          "policy_loss", _policy_arrays(b), params, cands))
    bt = round_batch(loss_batch(seed, per_token_advantages=True, kinks=KINKS, seq_kinks=SEQ_KINKS), DTYPE)
    mean_b = {**bt, "advantages": row_mean(bt["advantages"], bt["mask"])}
    cands = [Candidate("canonical", f"aggregate(gspo_token_loss({fmt(GSPO)}), mode='token_mean') with each token's own A_t",
                       _composed("gspo_token_loss", bt["logp"], bt, **GSPO)),
             Candidate("A = row mean of the token advantages",
                       f"aggregate(gspo_token_loss(A=row_mean(A), {fmt(GSPO)}), mode='token_mean')",
                       _composed("gspo_token_loss", bt["logp"], mean_b, **GSPO),
                       kwargs={"advantages": "row mean (functional.py:140-147)"})]
    rows.append(_loss_row(adapter, seed, "areal.ppo_actor_loss_fn[sequence,A=[B,T]]", "loss.gspo+agg", "areal.ppo_actor_loss_fn",
                          "policy_loss", _policy_arrays(bt), params, cands,
                          note="(AReaL's GSPO weights every token of a row by the row's mean advantage)"))
    return rows


def sapo_sequence_piece(lp: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """SAPO's gate on the geometric-mean sequence ratio with the row's mean advantage (``sapo_loss_fn`` at
    ``importance_sampling_level="sequence"``, functional.py:596-599): ``sapo_token_loss`` at the row means
    of logp, old_logp and A, its gradient chained through the row mean of logp."""
    m = b["mask"]
    lbar, obar, abar = row_mean(lp, m), row_mean(b["old_logp"], m), row_mean(_per_token_advantages(b), m)
    return Piece(oracle.sapo_token_loss(lbar, obar, abar, m, **kw),
                 lambda u: row_mean_vjp(oracle.sapo_token_loss_grad(lbar, obar, abar, m, u, **kw), m))


def sapo_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``sapo_loss_fn`` (``use_sapo_loss``; tau 1.0 / 1.05, cli_args.py:1533-1540) at both levels."""
    rows = []
    taus = {"tau_pos": 1.0, "tau_neg": 1.05}
    for level in ("token", "sequence"):
        b = round_batch(loss_batch(seed, per_token_advantages=level == "sequence"), DTYPE)
        if level == "token":
            cand = Candidate("canonical", f"aggregate(sapo_token_loss({fmt(taus)}), mode='token_mean')",
                             _composed("sapo_token_loss", b["logp"], b, **taus))
        else:
            cand = Candidate("canonical", "aggregate(sapo_token_loss(row_mean(logp), row_mean(old_logp), row_mean(A), "
                                          f"{fmt(taus)}), mode='token_mean'), gradient through the row mean",
                             lambda b=b: compose(sapo_sequence_piece(b["logp"], b, **taus), b["mask"], TOKEN_MEAN, "grad[logp]"))
        arrays = {k: v for k, v in _policy_arrays(b).items()}
        rows.append(_loss_row(adapter, seed, f"areal.sapo_loss_fn[{level}]", "loss.sapo+agg", "areal.sapo_loss_fn", "sapo_loss",
                              arrays, {**taus, "importance_sampling_level": level}, [cand]))
    return rows


def critic_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``ppo_critic_loss_fn`` (mse) at the critic's default ``eps_clip`` 0.5 and at 0.2; huber has no spec."""
    rows = []
    b = round_batch(loss_batch(seed), DTYPE)
    arrays = {"value": _f32(b["values"]), "old_value": _f32(b["old_values"]), "target_value": _f32(b["returns"]),
              "loss_mask": b["mask"]}
    for clip in (0.5, 0.2):
        asked = {"clip": clip}
        rows.append(_loss_row(adapter, seed, f"areal.ppo_critic_loss_fn[eps_clip={clip:g}]", "loss.value+agg",
                              "areal.ppo_critic_loss_fn", "value_loss", arrays, {"value_eps_clip": clip},
                              value_loss_candidates("areal", b, TOKEN_MEAN, asked), wrt="value", key="grad[values]"))
    rows.append(not_implemented_row("areal.ppo_critic_loss_fn[huber]", "loss.value", "areal.ppo_critic_loss_fn", adapter,
                                    "loss_fn_type='huber' (functional.py:705-707, delta 10): the spec's value loss is squared"))
    return rows


# ---------------------------------------------------------------------------------------------
# Decoupled PPO with rejection sampling: corrected_policy_loss
# ---------------------------------------------------------------------------------------------


def rollout_batch(seed: int) -> dict[str, np.ndarray]:
    """The loss batch plus ``behav_logp`` (the inference engine's log-probs): ``old_logp`` plays the proximal
    policy, ``old_logp - e`` (e ~ N(0, 0.8)) the behaviour policy, so pi_prox / pi_behave = e^e spans the cap 5."""
    b = loss_batch(seed, kinks=KINKS)
    rng = np.random.default_rng(seed + 1)
    e = rng.normal(0.0, 0.8, size=b["mask"].shape)
    e = np.where(np.abs(np.abs(e) - math.log(5.0)) < 0.03, e + 0.1, e)  # away from the cap
    b["behav_logp"] = np.where(b["mask"], b["old_logp"] - e, rng.uniform(-3.0, 0.0, size=e.shape))
    return round_batch(b, DTYPE)


def _corrected(b: dict[str, np.ndarray], prox: np.ndarray, is_kw: dict[str, Any], rs_kw: dict[str, Any] | None,
               **kw: Any) -> Any:
    """``corrected_policy_loss`` (kl_coef 0) with ``rollout_is_weights(prox, behav, **is_kw)`` and the keep mask
    ``rollout_rejection_mask(prox, behav, **rs_kw)`` (all kept when None), value and gradient w.r.t. logp."""
    m, lp, A = b["mask"], b["logp"], b["advantages"]
    w = oracle.rollout_is_weights(prox, b["behav_logp"], m, **is_kw)
    keep = m if rs_kw is None else oracle.rollout_rejection_mask(prox, b["behav_logp"], m, **rs_kw)
    args = (lp, prox, lp, A, w, keep, m)
    return lambda: {"value": oracle.corrected_policy_loss(*args, **kw),
                    "grad[logp]": oracle.corrected_policy_loss_grad(*args, 1.0, **kw)}


def decoupled_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``ppo_actor_loss_fn`` with ``proximal_logprobs`` and a ``RejectionSamplingConfig``: PPO against the
    proximal policy times ``behave_imp_weight``, over the count of the original loss mask (functional.py:483,
    :539-542): rejected tokens are zeros in the mean (``corrected_policy_loss(rejected="zero")``, the
    ``areal`` preset), where canonical drops them from the count."""
    rows = []
    b = rollout_batch(seed)
    prox = b["old_logp"]
    arrays = {"logprobs": _f32(b["logp"]), "proximal_logprobs": _f32(prox), "old_logprobs": _f32(b["behav_logp"]),
              "advantages": _f32(_per_token_advantages(b)), "loss_mask": b["mask"]}
    settings = (
        # the old default behave_imp_weight_cap=5.0 / token_mask (cli_args.py:1623-1637's warning)
        ("token,mask,upper=5", {"level": "token", "metric": "ratio", "action": "mask", "upper": 5.0},
         {"mode": "mask", "hi": 5.0}, {"hi": 5.0}),
        ("token,clamp,upper=5", {"level": "token", "metric": "ratio", "action": "clamp", "upper": 5.0},
         {"mode": "truncate", "hi": 5.0}, None),
        ("sequence,mask,mean,upper=2", {"level": "sequence", "metric": "ratio", "action": "mask", "agg": "mean", "upper": 2.0},
         {"level": "sequence", "seq_stat": "geometric", "mode": "mask", "hi": 2.0}, {"level": "seq_mean", "hi": 2.0}),
        ("token,kl_k3,mask,upper=0.5", {"level": "token", "metric": "kl_k3", "action": "mask", "upper": 0.5},
         {"mode": "none"}, {"statistic": "k3", "hi": 0.5, "kl_of": "old_rollout"}),
    )
    for label, rs, is_kw, rs_kw in settings:
        formula = (f"corrected_policy_loss(logp, prox, is_weights=rollout_is_weights(prox, behav, {fmt(is_kw)}), keep_mask="
                   f"{'mask' if rs_kw is None else f'rollout_rejection_mask(prox, behav, {fmt(rs_kw)})'}, mode='token_mean'")
        cands = [Candidate("canonical", formula + ")", _corrected(b, prox, is_kw, rs_kw))]
        preset = preset_kwargs("areal", "corrected_policy_loss")
        if preset:
            cands.append(Candidate(fmt(preset), f"{formula}, {fmt(preset)})", _corrected(b, prox, is_kw, rs_kw, **preset),
                                   preset="areal", kwargs=preset))
        rows.append(_loss_row(adapter, seed, f"areal.ppo_actor_loss_fn[decoupled,{label}]", "offpolicy.loss",
                              "areal.ppo_actor_loss_fn", "policy_loss", arrays, {"eps_clip": 0.2, "rejection_sampling": rs}, cands))
    return rows


# ---------------------------------------------------------------------------------------------
# grpo_loss_fn: the actor's loss with the proximal log-linear approximation
# ---------------------------------------------------------------------------------------------


def versions_for(m: np.ndarray, seed: int, current: int) -> np.ndarray:
    """Per-token behaviour versions in [current - 3, current] (a row's tokens may span versions), -1 where masked."""
    rng = np.random.default_rng(seed + 2)
    return np.where(m, rng.integers(current - 3, current + 1, size=m.shape), -1).astype(np.int64)


def grpo_loss_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``grpo_loss_fn`` with ``use_decoupled_loss`` and ``prox_logp_method="loglinear"`` (no proximal forward
    pass, actor.py:735-745): the proximal log-probs are ``compute_prox_logp_approximations`` of the detached
    current log-probs (:437-444), a constant of the loss."""
    rows = []
    b = rollout_batch(seed)
    m, lp, behav = b["mask"], b["logp"], b["behav_logp"]
    version = 7
    v = versions_for(m, seed, version)
    prox = oracle.proximal_logp_interpolation(lp, behav, np.where(m, v, 0), m, version=version)
    arrays = {"logprobs": _f32(lp), "old_logp": _f32(behav), "advantages": _f32(_per_token_advantages(b)), "loss_mask": m,
              "versions": v}
    base = {"eps_clip": 0.2, "use_decoupled_loss": True, "prox_logp_method": "loglinear", "current_version": version}
    pb = {**b, "old_logp": prox}
    cands = [Candidate("canonical", "aggregate(ppo_token_loss(logp, proximal_logp_interpolation(sg(logp), behav, versions, "
                                    f"version={version})), mode='token_mean')", _composed("ppo_token_loss", lp, pb))]
    rows.append(_loss_row(adapter, seed, "areal.grpo_loss_fn[decoupled,loglinear]", "offpolicy.proximal+loss.ppo+agg",
                          "areal.grpo_loss_fn", "grpo_loss_fn", arrays, base, cands))
    rs = {"level": "token", "metric": "ratio", "action": "mask", "upper": 5.0}
    formula = (f"corrected_policy_loss(logp, prox = proximal_logp_interpolation(sg(logp), behav, versions, version={version}), "
               "is_weights=rollout_is_weights(prox, behav, mode='mask', hi=5.0), keep_mask=rollout_rejection_mask(prox, behav, "
               "hi=5.0), mode='token_mean'")
    bb = {**b, "behav_logp": behav}
    cands = [Candidate("canonical", formula + ")", _corrected(bb, prox, {"mode": "mask", "hi": 5.0}, {"hi": 5.0}))]
    preset = preset_kwargs("areal", "corrected_policy_loss")
    if preset:
        cands.append(Candidate(fmt(preset), f"{formula}, {fmt(preset)})",
                               _corrected(bb, prox, {"mode": "mask", "hi": 5.0}, {"hi": 5.0}, **preset), preset="areal",
                               kwargs=preset))
    rows.append(_loss_row(adapter, seed, "areal.grpo_loss_fn[decoupled,loglinear,rejection=token/mask/5]",
                          "offpolicy.proximal+offpolicy.loss", "areal.grpo_loss_fn", "grpo_loss_fn", arrays,
                          {**base, "rejection_sampling": rs}, cands))
    rows.append(not_implemented_row("areal.grpo_loss_fn[m2_threshold]", "offpolicy.loss", "areal.grpo_loss_fn", adapter,
                                    "M2PO (_apply_m2po_masking, actor.py:769-857: drop the largest (behave - prox)^2 until "
                                    "the mean of the rest is below m2_threshold) is no spec quantity"))
    return rows


# ---------------------------------------------------------------------------------------------
# PPOActor._compute_advantages: the advantage pipeline
# ---------------------------------------------------------------------------------------------

G = 3  # the loss batch's 6 rows as 2 groups of 3


def _advantage_arrays(adapter: ArealAdapter, b: dict[str, np.ndarray], scores: np.ndarray, *, ref: bool = True,
                      values: bool = False) -> dict[str, np.ndarray]:
    m = b["mask"]
    arrays = adapter.padded_batch(m)
    arrays["rewards"] = _f32(scores)
    arrays["logprobs"] = np.pad(_f32(np.where(m, b["old_logp"], 0.0)), ((0, 0), (0, 1)))
    if ref:
        arrays["ref_logp"] = adapter._to_areal_frame(_f32(np.where(m, b["ref_logp"], 0.0)))
    if values:
        arrays["values"] = adapter._to_areal_frame(_f32(np.where(m, b["values"], 0.0)))
    return arrays


def _advantage_row(adapter: ArealAdapter, seed: int, row_id: str, spec_id: str, arrays: dict[str, np.ndarray], config: dict[str, Any],
                   m: np.ndarray, candidates: list[Candidate], outputs: tuple[str, ...] = ("advantages", "returns"),
                   note: str = "") -> RowResult:
    T = m.shape[1]

    def got() -> dict[str, Any]:
        out = adapter.compute_advantages(arrays, config)
        return {k: np.where(m, adapter._from_areal_frame(out[k], T), 0.0) for k in outputs}

    tol = {"value": tolerance("adv.gae", DTYPE, "value")}
    return composition_row(row_id, spec_id, "areal.PPOActor._compute_advantages", adapter, got, candidates, tol, seed=seed,
                           note=note)


def _gae_of(r: np.ndarray, b: dict[str, np.ndarray], m: np.ndarray, **kw: Any) -> dict[str, Any]:
    adv, ret = oracle.gae(r, np.where(m, b.get("values_used", 0.0), 0.0), m, **kw)
    return {"advantages": adv, "returns": ret}


def advantage_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    rows = []
    b = round_batch(loss_batch(seed), DTYPE)
    m = b["mask"]
    rng = np.random.default_rng(seed + 3)
    scores = np.round(rng.normal(0.0, 2.0, size=m.shape[0]), 3).astype(np.float32).astype(np.float64)

    # GRPO as AReaL configures it: reward_norm group mean/std (unbiased, eps 1e-5), no critic, kl_ctl 0
    norm = {"mean_level": "group", "std_level": "group", "group_size": G}
    arrays = _advantage_arrays(adapter, b, scores, ref=False)
    config = {"kl_ctl": 0.0, "reward_norm": norm}

    def grpo(**kw: Any) -> Any:
        def ev() -> dict[str, Any]:
            a = oracle.grpo_advantages(scores, G, **kw)
            return {"advantages": np.where(m, a[:, None], 0.0), "returns": np.where(m, a[:, None], 0.0)}
        return ev

    preset = preset_kwargs("areal", "grpo_advantages")
    cands = [Candidate("canonical", "grpo_advantages(rewards, 3) on every valid token (gae with gamma = lam = 1, V = 0)", grpo())]
    if preset:
        cands.append(Candidate(fmt(preset), f"grpo_advantages(rewards, 3, {fmt(preset)}) on every valid token", grpo(**preset),
                               preset="areal", kwargs=preset))
    rows.append(_advantage_row(adapter, seed, "areal.compute_advantages[grpo]", "adv.grpo+adv.gae", arrays, config, m, cands))

    # PPO: the KL reward (kl_ctl 0.1, k1: the defaults) plus the score, GAE with the critic's values
    for label, cfg, ref in (("kl_ctl=0.1,k1,gamma=1,lam=0.95", {"kl_ctl": 0.1, "gae_lambda": 0.95}, True),
                            ("kl_ctl=0.1,k3,gamma=0.99,lam=0.95", {"kl_ctl": 0.1, "kl_estimator": "k3", "discount": 0.99,
                                                                   "gae_lambda": 0.95}, True),
                            ("no ref_logp", {"kl_ctl": 0.1}, False)):
        arrays = _advantage_arrays(adapter, b, scores, ref=ref, values=True)
        config = {"reward_clip": 20.0, **cfg}
        est = cfg.get("kl_estimator", "k1")
        gkw = {"gamma": cfg.get("discount", 1.0), "lam": cfg.get("gae_lambda", 1.0)}
        ref_used = b["ref_logp"] if ref else np.zeros(m.shape)
        vb = {**b, "values_used": b["values"]}

        def ppo(ref_used: np.ndarray = ref_used, est: str = est, gkw: dict[str, Any] = gkw, vb: dict[str, Any] = vb,
                kl_kw: dict[str, Any] | None = None) -> dict[str, Any]:
            if kl_kw is None:
                r = oracle.rlhf_token_rewards(scores, b["old_logp"], ref_used, m, kl_coef=0.1, estimator=est)
            else:  # the score alone, minus kl_coef times the clamped estimate
                r = (oracle.rlhf_token_rewards(scores, b["old_logp"], ref_used, m, kl_coef=0.0)
                     - 0.1 * oracle.kl_penalty(b["old_logp"], ref_used, m, estimator=est, **kl_kw))
            return _gae_of(r, vb, m, **gkw)

        what = "ref_logp" if ref else "ref_logp = 0 (no reference model: actor.py:192-194)"
        kl_preset = preset_kwargs("areal", "kl_penalty")
        cands = [Candidate("canonical", f"gae(rlhf_token_rewards(scores, old_logp, {what}, kl_coef=0.1, estimator={est!r}), "
                                        f"values, {fmt(gkw)})", ppo)]
        if kl_preset:
            cands.append(Candidate(f"kl_penalty({fmt(kl_preset)})",
                                   f"gae(rlhf_token_rewards(scores, ..., kl_coef=0) - 0.1 * kl_penalty(old_logp, {what}, "
                                   f"estimator={est!r}, {fmt(kl_preset)}), values, {fmt(gkw)})",
                                   lambda ppo=ppo, kl_kw=kl_preset: ppo(kl_kw=kl_kw), preset="areal",
                                   kwargs={"kl_penalty": kl_preset}))
        rows.append(_advantage_row(adapter, seed, f"areal.compute_advantages[{label}]", "reward.rlhf+adv.gae", arrays, config, m,
                                   cands))

    # adv_norm: batch whitening of the advantages over the loss mask (actor.py:238-239)
    arrays = _advantage_arrays(adapter, b, scores, values=True)
    config = {"kl_ctl": 0.1, "adv_norm": {"mean_level": "batch", "std_level": "batch"}}
    vb = {**b, "values_used": b["values"]}

    def whitened(**kw: Any) -> Any:
        def ev() -> dict[str, Any]:
            r = oracle.rlhf_token_rewards(scores, b["old_logp"], b["ref_logp"], m, kl_coef=0.1)
            adv = _gae_of(r, vb, m)["advantages"]
            return {"advantages": oracle.whiten(adv, m, **kw)}
        return ev

    preset = preset_kwargs("areal", "whiten")
    cands = [Candidate("canonical", "whiten(gae(rlhf_token_rewards(..., kl_coef=0.1), values).advantages)", whitened())]
    if preset:
        cands.append(Candidate(fmt(preset), f"whiten(gae(...).advantages, {fmt(preset)})", whitened(**preset), preset="areal",
                               kwargs=preset))
    rows.append(_advantage_row(adapter, seed, "areal.compute_advantages[adv_norm=batch]", "adv.whiten+adv.gae", arrays, config, m,
                               cands, outputs=("advantages",)))

    # adv_norm with a group mean and no std on per-row constant advantages: the group's token-weighted mean
    arrays = _advantage_arrays(adapter, b, scores, ref=False)
    config = {"kl_ctl": 0.0, "adv_norm": {"mean_level": "group", "std_level": None, "group_size": G}}

    def opo() -> dict[str, Any]:
        a = oracle.opo_advantages(scores, G, m)
        return {"advantages": np.where(m, a[:, None], 0.0)}

    cands = [Candidate("canonical", "opo_advantages(scores, 3, mask) on every valid token: a group mean over the group's "
                                    "valid tokens is the length-weighted mean of its rewards", opo)]
    rows.append(_advantage_row(adapter, seed, "areal.compute_advantages[adv_norm=group mean]", "adv.opo", arrays, config, m,
                               cands, outputs=("advantages",)))

    rows += no_eos_rows(adapter, seed)
    return rows


def no_eos_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """AReaL reads "no EOS" as ``seqlens == attention_mask.shape[1]`` (actor.py:200-201): a row that fills
    the batch's padded width. Its reward is zeroed by ``mask_no_eos_with_zero`` (:207-210) and GAE bootstraps
    from the critic's value at the last column (:223). The batch is padded to its longest sequence, so that
    row is whichever is longest, truncated or not; a truncated completion behind a shorter prompt is not
    caught. The batch below: row 0 is truncated (it hit max_new_tokens = 4) behind a 1-token prompt; row 1
    stopped with EOS after 3 tokens behind a 3-token prompt and fills the width 6."""
    rows = []
    m = np.array([[0, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]], dtype=bool)
    attn = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=np.int64)
    truncated = np.array([True, False])  # what the rollout knows: row 0 hit max_new_tokens, row 1 emitted EOS
    scores = np.array([1.5, 2.0])
    arrays = {"input_ids": np.zeros(m.shape, dtype=np.int64), "attention_mask": attn, "loss_mask": m.astype(np.int64),
              "rewards": _f32(scores), "logprobs": np.zeros(m.shape, dtype=np.float32)}

    def shaped() -> dict[str, Any]:
        s = oracle.shaped_rewards(scores, truncated, truncated_value=0.0)
        r = oracle.rlhf_token_rewards(s, np.zeros(m.shape), np.zeros(m.shape), m, kl_coef=0.0)
        return {"tot_rewards": r}

    T = m.shape[1]

    def got_shaped() -> dict[str, Any]:
        out = adapter.compute_advantages(arrays, {"kl_ctl": 0.0, "mask_no_eos_with_zero": True})
        y = np.asarray(out["tot_rewards"], dtype=np.float64)
        full = np.zeros(m.shape)
        full[:, 1:] = y[:, : T - 1]
        return {"tot_rewards": np.where(m, full, 0.0)}

    cands = [Candidate("canonical", "rlhf_token_rewards(shaped_rewards(scores, truncated=[True, False], truncated_value=0.0), "
                                    "kl_coef=0): the truncated row 0 loses its reward", shaped)]
    rows.append(composition_row("areal.compute_advantages[mask_no_eos_with_zero]", "reward.shaping",
                                "areal.PPOActor._compute_advantages", adapter, got_shaped, cands,
                                {"value": tolerance("reward.shaping", DTYPE, "value")}, seed=seed,
                                note="(AReaL zeroes the row that fills the padded width, row 1, which ended with EOS, and keeps "
                                     "the reward of the truncated row 0: actor.py:200-212)"))

    # GAE on the same batch with a critic: row 1 (EOS) bootstraps from the value after its EOS (the critic's output
    # at the last column, actor.py:223), row 0 (truncated) from nothing
    values = np.array([[0.0, 0.5, -0.25, 0.75, 0.5, 3.0], [0.0, 0.0, 0.0, 0.25, -0.5, 1.0]])
    v_arrays = {**arrays, "values": _f32(np.concatenate([values[:, 1:], np.array([[0.0], [4.0]])], axis=1))}

    def gae_spec() -> dict[str, Any]:
        r = oracle.rlhf_token_rewards(scores, np.zeros(m.shape), np.zeros(m.shape), m, kl_coef=0.0)
        adv, ret = oracle.gae(r, values, m)
        return {"advantages": adv, "returns": ret}

    def got_gae() -> dict[str, Any]:
        out = adapter.compute_advantages(v_arrays, {"kl_ctl": 0.0})
        res = {}
        for k in ("advantages", "returns"):
            y = np.asarray(out[k], dtype=np.float64)
            full = np.zeros(m.shape)
            full[:, 1:] = y[:, : T - 1]
            res[k] = np.where(m, full, 0.0)
        return res

    cands = [Candidate("canonical", "gae(rlhf_token_rewards(scores, kl_coef=0), values): V = 0 after each row's last valid "
                                    "token", gae_spec)]
    rows.append(composition_row("areal.compute_advantages[no EOS bootstrap]", "adv.gae", "areal.PPOActor._compute_advantages",
                                adapter, got_gae, cands, {"value": tolerance("adv.gae", DTYPE, "value")}, seed=seed,
                                note="(row 1 ended with EOS but fills the padded width: AReaL bootstraps it from the critic's "
                                     "value 4.0 at the last column, actor.py:223)"))

    # the score on the last attention token (actor.py:205-212), on the layout AReaL's workflows build: every
    # trajectory ends with the model's output (workflow/rlvr.py:165-167, workflow/multi_turn.py:103-105,
    # experimental/openai/types.py:162-192), so that token is the last trained one, here after an untrained
    # environment turn (a gapped mask)
    m2 = np.array([[0, 1, 1, 1, 0, 0], [0, 1, 1, 0, 1, 1]], dtype=bool)  # row 1: prompt, output, feedback, output
    attn2 = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=np.int64)
    arrays2 = {"input_ids": np.zeros((2, 7), dtype=np.int64), "attention_mask": np.pad(attn2, ((0, 0), (0, 1))),
               "loss_mask": np.pad(m2.astype(np.int64), ((0, 0), (0, 1))), "rewards": _f32(scores),
               "logprobs": np.zeros((2, 7), dtype=np.float32)}

    def placed() -> dict[str, Any]:
        return {"tot_rewards": oracle.rlhf_token_rewards(scores, np.zeros(m2.shape), np.zeros(m2.shape), m2, kl_coef=0.0)}

    def got_placed() -> dict[str, Any]:
        out = adapter.compute_advantages(arrays2, {"kl_ctl": 0.0})
        return {"tot_rewards": np.where(m2, adapter._from_areal_frame(out["tot_rewards"], m2.shape[1]), 0.0)}

    cands = [Candidate("canonical", "rlhf_token_rewards(scores, kl_coef=0): the score on each row's last valid token", placed)]
    rows.append(composition_row("areal.compute_advantages[multi-turn layout]", "reward.rlhf",
                                "areal.PPOActor._compute_advantages", adapter, got_placed, cands,
                                {"value": tolerance("reward.rlhf", DTYPE, "value")}, seed=seed,
                                note="(AReaL adds the score at the last attention token, seqlens - 1, actor.py:205-212; "
                                     "its workflows end every trajectory with the model's output, so that is the last "
                                     "trained token, here after an untrained environment turn)"))
    return rows


# ---------------------------------------------------------------------------------------------
# Fixed-keyword rows: the unclamped KL estimator of the rejection sampling path
# ---------------------------------------------------------------------------------------------


def kl_rows(adapter: ArealAdapter, seed: int) -> list[RowResult]:
    """``KLEstimator._compute_approx_kl(apply_clamp=False)``, what ``apply_rejection_sampling``'s ``kl_k*``
    metrics call (functional.py:242-247): the estimators without the [-10, 10] clamp."""
    from conformance.frameworks import spec_io as io

    def kl(logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1", upstream: Any = None) -> np.ndarray:
        lp, ref, m = adapter._kl_inputs(logp, ref_logp, mask, estimator)
        arrays = {"log_probs": io.clean(lp, m), "log_probs_base": io.clean(ref, m)}
        return adapter._token_op("kl_estimator", arrays, {"kl_estimator": estimator, "apply_clamp": False}, "kl",
                                 "log_probs", m, lp.dtype, upstream)

    view = FunctionView(adapter, "kl_penalty", kl,
                        lambda logp, ref_logp, mask, upstream, *, estimator="k1": kl(logp, ref_logp, mask, estimator=estimator,
                                                                                     upstream=upstream))
    return [fixed_row(view, "kl_penalty", row_id="areal.KLEstimator[apply_clamp=False]", fixed={}, seed=seed,
                      note="(apply_rejection_sampling's kl_k1..3, functional.py:242-247)")]


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def extra_rows(adapter: ArealAdapter, seed: int = 0) -> list[RowResult]:
    """Every AReaL-specific row."""
    return (ppo_rows(adapter, seed) + gspo_rows(adapter, seed) + sapo_rows(adapter, seed) + critic_rows(adapter, seed)
            + decoupled_rows(adapter, seed) + grpo_loss_rows(adapter, seed) + advantage_rows(adapter, seed)
            + kl_rows(adapter, seed))


__all__ = [
    "advantage_rows",
    "critic_rows",
    "decoupled_rows",
    "extra_rows",
    "grpo_loss_rows",
    "gspo_rows",
    "kl_rows",
    "no_eos_rows",
    "ppo_rows",
    "rollout_batch",
    "row_mean",
    "sapo_rows",
    "sapo_sequence_piece",
]
