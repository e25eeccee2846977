"""verl rows that are not single core-API calls: every ``agg_loss`` mode (with the engine's global batch
info, with verl's local fallback, and split over two data-parallel ranks), the aggregated policy losses
(vanilla, GSPO, CISPO) and value loss (value and gradient w.r.t. the log-probs / values), GRPO with and
without std scaling, the vectorised estimators, every ``kl_penalty`` name (``"abs"`` and the ``"+"``
straight-through names as spec v1.1 ``kl_loss_term`` rows) and GAE's whitened output;
for spec v1.1, the k1 rejection bounds read as verl documents them and the rollout-corrected policy
losses of verl's decoupled and bypass modes; for the spec v1.1 policy losses of 2025-26, every
registered ``sapo``, ``geo_mean`` (GMPO), ``dppo_tv``, ``dppo_kl``, ``dro`` and ``gpg`` loss under each
``loss_agg_mode`` (``sapo`` and ``geo_mean`` reduce the same way whatever the mode); for the spec v1.1
covariance-selected tokens, ``clip_cov`` (``ppo_token_loss(dual_clip=None) · clip_cov_mask``, verl's
``torch.randperm`` made the order of the batch's ``draws``: ``verl_ops.py``) and ``kl_cov``
(``kl_cov_token_loss``) under each mode and at other ``PolicyLossConfig`` values.

For spec v1.1's advantage estimators, every name in verl's ``ADV_ESTIMATOR_REGISTRY`` has a row
(``ESTIMATORS`` says where): the core-API rows of the adapter, ``reinforce_plus_plus`` on the loss batch,
``gdpo`` as a composition with ``adv.whiten``, the two optimal-token-baseline estimators on a multi-turn
batch in verl's own layout (``otb_batch``), and a "not implemented" row for any registered name this
module does not know.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.frameworks.verl.adapter.VerlAdapter``). Row ids look like ``verl.agg_loss[seq-mean-token-mean,local]``,
``verl.policy_loss[vanilla,token-mean]``, ``verl.kl_penalty[k3+]``.

How a loss row is checked: a seeded float32 batch (``checks.loss_batch``: ragged rows, left padding, a
masked tool token, an empty completion, finite garbage at every masked position, log-ratios inside and
far outside every clip range, ratios above verl's dual-clip constant 3) goes to verl unchanged, in
verl's layout (``response_mask``); verl returns the scalar loss and, by autograd, its gradient w.r.t.
``log_prob`` (``vpreds`` for the value loss, ``loss_mat`` for ``agg_loss``). The oracle (float64, on the
same float32-rounded inputs) composes the spec pieces, e.g. ``aggregate(ppo_token_loss(...), mode=...)``,
and its gradient is the chain of their ``_grad`` functions. The first candidate that matches value and
gradient decides the row: canonical (``pass``), a named preset or variant (``preset``), else ``fail``.

Sources: verl 0.9.1, ``verl/trainer/ppo/core_algos.py`` (``agg_loss`` :1140, ``compute_policy_loss_vanilla``
:1286, ``_gspo`` :1546, ``_cispo`` :2048, ``compute_value_loss`` :2125, ``kl_penalty`` :2188, GRPO :268/:335,
RLOO :588/:834, GAE :216, ``compute_policy_loss_reinforce`` :2333, ``compute_policy_loss_bypass_mode``
:2413, ``_dppo_tv`` :1379, ``_dppo_kl`` :1460, ``_sapo`` :1622, ``_gpg`` :1707, ``_clip_cov`` :1743, ``_kl_cov`` :1848,
``_geo_mean`` :1928, ``_dro`` :2014); ``verl/workers/utils/losses.py:57-112`` (the global batch info the engine sets, the IS weights it
passes); ``verl/trainer/ppo/rollout_corr_helper.py`` (``compute_rollout_rejection_mask`` :197,
``compute_rollout_correction_weights`` :522, ``compute_rollout_correction_and_rejection_mask`` :786,
``compute_rollout_correction_and_add_to_batch`` :1013); ``verl/trainer/config/algorithm.py``
(``RolloutCorrectionConfig`` :64-184 and its factories).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.records import cases, make_case
from conformance.frameworks.verl.adapter import LOSS_AGG_MODES, VerlAdapter
from conformance.frameworks.loss_batch import NP, loss_batch, loss_call, loss_mask, mean_over_ranks, round_batch, value_loss_candidates
from conformance.runner.composite import (
    Candidate,
    FunctionView,
    composition_row,
    fixed_row,
    loss_tolerances,
    value_and_grad_tolerances,
)
from conformance.records.pieces import Piece, aggregate_eval, broadcast_advantages, compose, fmt, policy_piece
from conformance.records import BY_FUNCTION
from conformance.runner.rows import RowResult, not_implemented_row, seeds_for
from conformance.tolerances import tolerance

DTYPE = "float32"  # the framework rows run in float32, verl's training dtype for these tensors
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
SPEC_MODE = {v: k for k, v in LOSS_AGG_MODES.items()}
NORM = 16.0  # loss_scale_factor for seq-mean-token-sum-norm (a constant, as verl's docstring advises)
# clip kinks in log space: 1 -+ 0.2, 1 + 0.28, dual clip 3, 10; CISPO 1 +- 0.2
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 3.0, 10.0))


def _arrays(batch: dict[str, np.ndarray], names: dict[str, str], dtype: str = DTYPE) -> dict[str, np.ndarray]:
    return {verl_name: batch[name].astype(NP[dtype]) for verl_name, name in names.items()}


def _mask(batch: dict[str, np.ndarray], dtype: str = DTYPE) -> np.ndarray:
    return batch["mask"].astype(NP[dtype])


def _policy_arrays(batch: dict[str, Any]) -> dict[str, Any]:
    """The arrays of verl's policy-loss functions for a loss batch (float32, verl's names)."""
    arrays = _arrays(batch, {"old_log_prob": "old_logp", "log_prob": "logp"})
    arrays["advantages"] = broadcast_advantages(batch).astype(np.float32)
    arrays["response_mask"] = _mask(batch)
    return arrays


def _global(mode: str, m: np.ndarray, global_info: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(verl keyword arguments, spec aggregate keywords) for ``mode`` with or without global batch info."""
    spec: dict[str, Any] = {"mode": SPEC_MODE[mode]}
    verl: dict[str, Any] = {}
    if global_info:
        verl = {"dp_size": 1, "batch_num_tokens": float(m.sum()), "global_batch_size": float(m.shape[0])}
        spec.update(num_tokens=float(m.sum()), num_seqs=float(m.shape[0]))
    if mode == "seq-mean-token-sum-norm":
        if global_info:
            verl["loss_scale_factor"] = NORM
            spec["norm_length"] = NORM
        else:
            spec["norm_length"] = float(m.shape[1])  # verl's default: loss_mask.shape[-1], the padded width
    return verl, spec


# ---------------------------------------------------------------------------------------------
# agg_loss
# ---------------------------------------------------------------------------------------------


def agg_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = []
    batch = round_batch(loss_batch(seed), DTYPE)
    m = batch["mask"]
    x = batch["token_loss"]
    nonempty = float((m.sum(axis=1) > 0).sum())
    tol = value_and_grad_tolerances("agg", DTYPE)
    for mode in MODES:
        for scope in ("global", "local"):
            kw, agg = _global(mode, m, scope == "global")

            def got(kw: dict[str, Any] = kw) -> dict[str, Any]:
                return loss_call(adapter, "agg_loss", "loss_mat", x, m, {"loss_agg_mode": mode, **kw})

            cands = [Candidate("canonical", f"aggregate({fmt(agg)})", aggregate_eval(x, m, agg))]
            if scope == "local" and mode.startswith("seq-mean"):
                alt = {**agg, "num_seqs": nonempty}
                cands.append(Candidate(
                    "num_seqs = rows with a valid token", f"aggregate({fmt(alt)})", aggregate_eval(x, m, alt),
                    kwargs={"num_seqs": "rows with a valid token (core_algos.py:1178-1200: seq_mask excludes fully masked rows)"}))
            rid = f"verl.agg_loss[{mode}{',local' if scope == 'local' else ''}]"
            note = "" if scope == "global" else "(no global batch info: verl's local fallback)"
            rows.append(composition_row(rid, "agg", "verl.agg_loss", adapter, got, cands, tol, seed=seed, note=note))
        rows.append(dp_row(adapter, batch, mode, seed, tol))
    return rows


def dp_row(adapter: VerlAdapter, batch: dict[str, np.ndarray], mode: str, seed: int, tol: dict[str, Any], dp: int = 2) -> RowResult:
    """The batch split over ``dp`` data-parallel ranks, each calling ``agg_loss`` with the global counts
    and ``dp_size`` as the engine does (``checks.mean_over_ranks``). It must equal the whole-batch
    aggregate (value and gradient)."""
    m, x = batch["mask"], batch["token_loss"]
    kw, agg = _global(mode, m, True)
    kw["dp_size"] = dp

    def got() -> dict[str, Any]:
        return mean_over_ranks(lambda rows: loss_call(adapter, "agg_loss", "loss_mat", x[rows], m[rows], {"loss_agg_mode": mode, **kw}), m, dp)

    cand = Candidate("canonical", f"aggregate(whole batch, {fmt(agg)}) = mean over {dp} ranks of agg_loss(rank, dp_size={dp}, global counts)",
                     aggregate_eval(x, m, agg))
    return composition_row(f"verl.agg_loss[{mode},dp={dp}]", "agg", "verl.agg_loss", adapter, got, [cand], tol, seed=seed)


# ---------------------------------------------------------------------------------------------
# Policy and value losses
# ---------------------------------------------------------------------------------------------


PIECES = {"vanilla": ("ppo_token_loss", "loss.ppo"), "gspo": ("gspo_token_loss", "loss.gspo"),
          "cispo": ("cispo_token_loss", "loss.cispo")}


def policy_row(adapter: VerlAdapter, seed: int, name: str, mode: str, *, config: dict[str, Any] | None = None,
               asked: dict[str, Any] | None = None, per_token_advantages: bool = False) -> RowResult:
    """``compute_policy_loss_<name>`` with ``ActorConfig(**config)`` and ``loss_agg_mode=mode`` (global
    batch info as the engine sets it). ``asked``: the spec keywords the configuration asks for
    (canonical defaults otherwise); the verl preset is tried next."""
    config, asked = dict(config or {}), dict(asked or {})
    function, spec_id = PIECES[name]
    seq_kinks = tuple(math.log(x) for x in (0.8, 1.2, 1 - 3e-4, 1 + 4e-4)) if name == "gspo" else ()
    batch = round_batch(loss_batch(seed, per_token_advantages=per_token_advantages, kinks=KINKS, seq_kinks=seq_kinks), DTYPE)
    m = batch["mask"]
    kw, agg = _global(mode, m, True)

    def got() -> dict[str, Any]:
        arrays = _policy_arrays(batch)
        r = adapter.call("policy_loss", arrays, {"name": name, "loss_agg_mode": mode, "config": config, "global_batch_info": kw},
                         wrt=["log_prob"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_prob"]}

    def ev(kwargs: dict[str, Any]) -> Any:
        return lambda: compose(policy_piece(function, batch["logp"], batch, **kwargs), m, agg, "grad[logp]")

    preset = {**preset_kwargs("verl", function), **asked}
    cands = [Candidate("canonical", f"aggregate({function}({fmt(asked)}), {fmt(agg)})", ev(asked))]
    if preset != asked:
        cands.append(Candidate(fmt({k: v for k, v in preset.items() if asked.get(k, object()) != v}), f"aggregate({function}({fmt(preset)}), {fmt(agg)})",
                               ev(preset), preset="verl", kwargs={k: v for k, v in preset.items() if asked.get(k, object()) != v}))
    parts = [name, mode] + [f"{k}={v}" for k, v in config.items()] + (["A=[B,T]"] if per_token_advantages else [])
    return composition_row(f"verl.policy_loss[{','.join(parts)}]", f"{spec_id}+agg", f"verl.compute_policy_loss_{name}",
                           adapter, got, cands, loss_tolerances(DTYPE, spec_id), seed=seed)


def value_row(adapter: VerlAdapter, seed: int, mode: str, cliprange: float, asked: dict[str, Any]) -> RowResult:
    batch = round_batch(loss_batch(seed), DTYPE)
    m = batch["mask"]
    kw, agg = _global(mode, m, True)

    def got() -> dict[str, Any]:
        arrays = _arrays(batch, {"vpreds": "values", "values": "old_values", "returns": "returns"})
        arrays["response_mask"] = _mask(batch)
        r = adapter.call("value_loss", arrays, {"cliprange_value": cliprange, "loss_agg_mode": mode, **kw},
                         wrt=["vpreds"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[values]": r["grads"]["vpreds"]}

    return composition_row(f"verl.compute_value_loss[cliprange_value={cliprange:g},{mode}]", "loss.value+agg",
                           "verl.compute_value_loss", adapter, got, value_loss_candidates("verl", batch, agg, asked),
                           loss_tolerances(DTYPE, "loss.value"), seed=seed)


def loss_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = [policy_row(adapter, seed, "vanilla", mode) for mode in MODES]  # ActorConfig defaults (0.2/0.2, c=3)
    rows += [
        policy_row(adapter, seed, "vanilla", "token-mean", config={"clip_ratio_high": 0.28, "clip_ratio_c": 10.0},
                   asked={"eps_high": 0.28, "dual_clip": 10.0}),
        policy_row(adapter, seed, "vanilla", "token-mean", per_token_advantages=True),
        policy_row(adapter, seed, "gspo", "token-mean"),  # 0.9.1's default loss_agg_mode
        policy_row(adapter, seed, "gspo", "seq-mean-token-mean"),  # the paper's (and verl main's) aggregation
        policy_row(adapter, seed, "gspo", "seq-mean-token-mean", per_token_advantages=True),
        policy_row(adapter, seed, "gspo", "seq-mean-token-mean", config={"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4},
                   asked={"eps_low": 3e-4, "eps_high": 4e-4}),
        policy_row(adapter, seed, "cispo", "token-mean"),
        policy_row(adapter, seed, "cispo", "seq-mean-token-mean", config={"clip_ratio_low": 0.2, "clip_ratio_high": 0.28},
                   asked={"eps_low": 0.2, "eps_high": 0.28}),
        value_row(adapter, seed, "token-mean", 0.5, {}),  # critic default cliprange_value 0.5
        value_row(adapter, seed, "seq-mean-token-mean", 0.5, {}),
        value_row(adapter, seed, "token-mean", 0.2, {"clip": 0.2}),
    ]
    return rows


# ---------------------------------------------------------------------------------------------
# Spec v1.1: the policy losses of 2025-26 registered in core_algos.py
# ---------------------------------------------------------------------------------------------

# loss_mode -> (spec function, spec id, spec keywords the loss_mode itself asks for)
MODERN = {
    "sapo": ("sapo_token_loss", "loss.sapo", {}),  # :1622-1704
    "geo_mean": ("gmpo_token_loss", "loss.gmpo", {}),  # :1928-2011
    "dppo_tv": ("dppo_token_loss", "loss.dppo", {}),  # :1379-1457
    "dppo_kl": ("dppo_token_loss", "loss.dppo", {"divergence": "kl"}),  # :1460-1542
    "dro": ("dro_token_loss", "loss.dro", {}),  # :2014-2044
    "gpg": ("pg_token_loss", "loss.pg", {}),  # :1707-1740
}
# losses that reduce the same way whatever loss_agg_mode: (the reduction, where)
HARD_CODED = {
    "sapo": ("seq_mean_token_mean", "agg_loss(loss_agg_mode='seq-mean-token-mean'), core_algos.py:1688-1690"),
    "geo_mean": ("seq_mean_token_mean", "torch.mean over the rows, core_algos.py:2000"),
}
# GMPO's log-space clip bounds (+-0.2 verl's, +-0.4 the paper's) join the PPO kinks
MODERN_KINKS = KINKS + (-0.4, -0.2, 0.2, 0.4)


def _modern_piece(function: str, lp: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    if function == "pg_token_loss":  # no old_logp
        A, m = b["advantages"], b["mask"]
        return Piece(oracle.pg_token_loss(lp, A, m), lambda u: oracle.pg_token_loss_grad(lp, A, m, u))
    return policy_piece(function, lp, b, **kw)


def _cap_decides(b: dict[str, np.ndarray], asked: dict[str, Any], preset: dict[str, Any]) -> bool:
    """DPPO: when the preset's ``ratio_cap`` differs from the one asked, some kept token has a ratio above
    it (so the row tells the two apart on every seed)."""
    if asked.get("ratio_cap") == preset.get("ratio_cap"):
        return True
    m, A = b["mask"], broadcast_advantages(b)
    keep = oracle.dppo_token_loss_grad(b["logp"], b["old_logp"], A, m, np.ones(m.shape), **asked) != 0
    return bool((keep & (np.exp(b["logp"] - b["old_logp"]) > preset["ratio_cap"])).any())


def _modern_batch(seed: int, function: str, asked: dict[str, Any], preset: dict[str, Any],
                  per_token_advantages: bool) -> dict[str, np.ndarray]:
    """The seeded loss batch (float32-rounded), redrawn until every keep decision and clip of ``function``
    under the keywords asked and verl's preset is off its bound (the registry's conditioning) and, for
    DPPO, verl's weight cap binds on some kept token."""
    cond = BY_FUNCTION[function].well_conditioned

    def accept(b: dict[str, np.ndarray]) -> bool:
        args = {"logp": b["logp"], "old_logp": b["old_logp"], "mask": b["mask"]}
        if cond is not None and not all(cond(args, kw) for kw in (asked, preset)):
            return False
        return function != "dppo_token_loss" or _cap_decides(b, asked, preset)

    return _conditioned(lambda s: round_batch(loss_batch(s, per_token_advantages=per_token_advantages, kinks=MODERN_KINKS), DTYPE),
                        accept, seed)


def modern_policy_row(adapter: VerlAdapter, seed: int, name: str, mode: str, *, config: dict[str, Any] | None = None,
                      policy_loss: dict[str, Any] | None = None, asked: dict[str, Any] | None = None,
                      per_token_advantages: bool = False) -> RowResult:
    """verl's registered ``name`` (``get_policy_loss_fn``) with ``ActorConfig(**config)``,
    ``PolicyLossConfig(**policy_loss)`` and ``loss_agg_mode=mode`` (global batch info as the engine sets
    it): value and gradient w.r.t. ``log_prob`` against ``aggregate(<spec token loss>(asked), mode)``
    (``pass``), the same with verl's preset keywords (``preset``), and, for the losses that ignore
    ``loss_agg_mode`` (``HARD_CODED``), the preset token loss under verl's fixed reduction (``preset``)."""
    config, policy_loss = dict(config or {}), dict(policy_loss or {})
    function, spec_id, implied = MODERN[name]
    asked = {**implied, **(asked or {})}
    preset = {**preset_kwargs("verl", function), **asked}
    batch = _modern_batch(seed, function, asked, preset, per_token_advantages)
    m = batch["mask"]
    kw, agg = _global(mode, m, True)

    def got() -> dict[str, Any]:
        arrays = _policy_arrays(batch)
        params = {"name": name, "loss_agg_mode": mode, "config": config, "global_batch_info": kw}
        if policy_loss:
            params["policy_loss"] = policy_loss
        r = adapter.call("policy_loss", arrays, params, wrt=["log_prob"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_prob"]}

    def ev(kwargs: dict[str, Any], agg: dict[str, Any]) -> Any:
        return lambda: compose(_modern_piece(function, batch["logp"], batch, **kwargs), m, agg, "grad[logp]")

    diff = {k: v for k, v in preset.items() if asked.get(k, object()) != v}
    cands = [Candidate("canonical", f"aggregate({function}({fmt(asked)}), {fmt(agg)})", ev(asked, agg))]
    if diff:
        cands.append(Candidate(fmt(diff), f"aggregate({function}({fmt(preset)}), {fmt(agg)})", ev(preset, agg),
                               preset="verl", kwargs=diff))
    if name in HARD_CODED and HARD_CODED[name][0] != agg["mode"]:
        fixed, where = HARD_CODED[name]
        hard = {k: v for k, v in agg.items() if k != "norm_length"} | {"mode": fixed}
        cands.append(Candidate(f"loss_agg_mode={mode!r} ignored: {where}", f"aggregate({function}({fmt(preset)}), {fmt(hard)})",
                               ev(preset, hard), preset="verl", kwargs={function: diff, "aggregate": {"mode": fixed}}))
    parts = [name, mode] + [f"{k}={v}" for k, v in {**config, **policy_loss}.items()] + (["A=[B,T]"] if per_token_advantages else [])
    return composition_row(f"verl.policy_loss[{','.join(parts)}]", f"{spec_id}+agg", f"verl.compute_policy_loss_{name}",
                           adapter, got, cands, loss_tolerances(DTYPE, spec_id), seed=seed)


DRO_BETA = 0.1  # policy_loss.dro_beta has no default (actor.py:100): a value DRO's users pick
def modern_loss_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = []
    for name in ("sapo", "geo_mean", "dppo_tv", "dppo_kl", "gpg"):  # ActorConfig defaults
        rows += [modern_policy_row(adapter, seed, name, mode) for mode in MODES]
    rows += [modern_policy_row(adapter, seed, "dro", mode, policy_loss={"dro_beta": DRO_BETA}, asked={"beta": DRO_BETA})
             for mode in MODES]
    rows += [
        modern_policy_row(adapter, seed, "sapo", "seq-mean-token-mean", config={"tau_pos": 2.0, "tau_neg": 3.0},
                          asked={"tau_pos": 2.0, "tau_neg": 3.0}),
        modern_policy_row(adapter, seed, "sapo", "seq-mean-token-mean", per_token_advantages=True),
        modern_policy_row(adapter, seed, "geo_mean", "seq-mean-token-mean", config={"clip_ratio_low": 0.4, "clip_ratio_high": 0.4},
                          asked={"eps_low": 0.4, "eps_high": 0.4}),  # the paper's range
        modern_policy_row(adapter, seed, "geo_mean", "seq-mean-token-mean", per_token_advantages=True),
        modern_policy_row(adapter, seed, "dppo_tv", "token-mean", config={"clip_ratio_low": 0.05, "clip_ratio_high": 0.5, "clip_ratio_c": 20.0},
                          asked={"delta_low": 0.05, "delta_high": 0.5, "ratio_cap": 20.0}),
        modern_policy_row(adapter, seed, "dppo_kl", "token-mean", config={"clip_ratio_low": 0.05, "clip_ratio_high": 0.5, "clip_ratio_c": 20.0},
                          asked={"delta_low": 0.05, "delta_high": 0.5, "ratio_cap": 20.0}),
        modern_policy_row(adapter, seed, "dppo_tv", "token-mean", per_token_advantages=True),
        modern_policy_row(adapter, seed, "dro", "token-mean", policy_loss={"dro_beta": 1.0}, asked={"beta": 1.0},
                          per_token_advantages=True),
    ]
    return rows + covariance_rows(adapter, seed)


# ---------------------------------------------------------------------------------------------
# Spec v1.1: covariance-selected tokens (clip_cov, kl_cov)
# ---------------------------------------------------------------------------------------------

# loss_mode -> (spec function, spec id of the row)
COVARIANCE = {
    "clip_cov": ("clip_cov_mask", "select.clip_cov+loss.ppo+agg"),  # :1743-1845
    "kl_cov": ("kl_cov_token_loss", "loss.kl_cov+agg"),  # :1848-1925
}
# PolicyLossConfig field -> spec keyword
COVARIANCE_FIELDS = {"clip_cov_ratio": "fraction", "clip_cov_lb": "cov_low", "clip_cov_ub": "cov_high",
                     "kl_cov_ratio": "fraction", "ppo_kl_coef": "coef"}


def _covariance_batch(seed: int, function: str, asked: dict[str, Any], per_token_advantages: bool) -> dict[str, np.ndarray]:
    """The seeded loss batch (float32-rounded) with uniform ``draws``, redrawn until the registry's
    conditioning holds for ``function`` (no covariance at a bound or tied at the cut, no ratio at a clip
    bound) and, for Clip-Cov, there are more candidates than tokens cut: the draws decide which."""
    cond = BY_FUNCTION[function].well_conditioned

    def make(s: int) -> dict[str, np.ndarray]:
        b = loss_batch(s, per_token_advantages=per_token_advantages, kinks=KINKS)
        b["draws"] = np.random.default_rng(s + 1).random(b["mask"].shape)
        return round_batch(b, DTYPE)

    def accept(b: dict[str, np.ndarray]) -> bool:
        m = b["mask"]
        args = {"logp": b["logp"], "old_logp": b["old_logp"], "advantages": broadcast_advantages(b), "mask": m}
        if not cond(args, asked):
            return False
        if function != "clip_cov_mask":
            return True
        every = {**asked, "fraction": 1.0}  # n = N >= |C|: every candidate cut
        n_candidates = int((m & ~oracle.clip_cov_mask(*args.values(), b["draws"], **every)).sum())
        return n_candidates > max(1, math.floor(asked.get("fraction", 2e-4) * int(m.sum())))

    return _conditioned(make, accept, seed)


def _clip_cov_piece(b: dict[str, np.ndarray], **kw: Any) -> Piece:
    """The Clip-Cov loss: ``ppo_token_loss(dual_clip=None) · keep``, keep = ``clip_cov_mask(draws)`` a constant."""
    A, m, lp, old = broadcast_advantages(b), b["mask"], b["logp"], b["old_logp"]
    ppo = {k: kw[k] for k in ("eps_low", "eps_high") if k in kw}
    keep = oracle.clip_cov_mask(lp, old, A, m, b["draws"], **kw)
    return Piece(oracle.ppo_token_loss(lp, old, A, m, **ppo) * keep,
                 lambda u: oracle.ppo_token_loss_grad(lp, old, A, m, u * keep, **ppo))


def covariance_row(adapter: VerlAdapter, seed: int, name: str, mode: str, *, policy_loss: dict[str, Any] | None = None,
                   per_token_advantages: bool = False) -> RowResult:
    """verl's registered ``clip_cov`` / ``kl_cov`` with ``PolicyLossConfig(**policy_loss)`` (ActorConfig's
    clip range 0.2 / 0.2) and ``loss_agg_mode=mode`` (global batch info as the engine sets it), value and
    gradient w.r.t. ``log_prob``, against ``aggregate(ppo_token_loss(dual_clip=None) · clip_cov_mask(draws,
    ...))`` / ``aggregate(kl_cov_token_loss(...))``. Clip-Cov's ``torch.randperm`` returns the order of
    the batch's ``draws`` over verl's candidate list (``verl_ops.py``), so verl's cut is the spec's."""
    policy_loss = dict(policy_loss or {})
    function, spec_id = COVARIANCE[name]
    asked = {COVARIANCE_FIELDS[k]: v for k, v in policy_loss.items()}
    batch = _covariance_batch(seed, function, asked, per_token_advantages)
    m = batch["mask"]
    kw, agg = _global(mode, m, True)

    def got() -> dict[str, Any]:
        arrays = _policy_arrays(batch)
        if name == "clip_cov":
            arrays["clip_cov_draws"] = batch["draws"].astype(np.float32)
        params = {"name": name, "loss_agg_mode": mode, "config": {}, "global_batch_info": kw}
        if policy_loss:
            params["policy_loss"] = policy_loss
        r = adapter.call("policy_loss", arrays, params, wrt=["log_prob"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_prob"]}

    if name == "clip_cov":
        piece = _clip_cov_piece(batch, **asked)
        formula = f"aggregate(ppo_token_loss(dual_clip=None) * clip_cov_mask(draws{', ' if asked else ''}{fmt(asked)}), {fmt(agg)})"
    else:
        piece = policy_piece(function, batch["logp"], batch, **asked)
        formula = f"aggregate({function}({fmt(asked)}), {fmt(agg)})"
    cands = [Candidate("canonical", formula, lambda: compose(piece, m, agg, "grad[logp]"))]
    parts = [name, mode] + [f"{k}={v}" for k, v in policy_loss.items()] + (["A=[B,T]"] if per_token_advantages else [])
    return composition_row(f"verl.policy_loss[{','.join(parts)}]", spec_id, f"verl.compute_policy_loss_{name}", adapter,
                           got, cands, loss_tolerances(DTYPE, spec_id.split("+")[-2]), seed=seed)


def covariance_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = [covariance_row(adapter, seed, name, mode) for name in COVARIANCE for mode in MODES]  # PolicyLossConfig defaults
    window = {"clip_cov_ratio": 0.2, "clip_cov_lb": 0.2, "clip_cov_ub": 3.0}  # n = 4 of 22 tokens, most tokens candidates
    return rows + [
        covariance_row(adapter, seed, "clip_cov", "token-mean", policy_loss=window),
        covariance_row(adapter, seed, "clip_cov", "seq-mean-token-mean", policy_loss=window, per_token_advantages=True),
        covariance_row(adapter, seed, "kl_cov", "token-mean", policy_loss={"kl_cov_ratio": 0.2, "ppo_kl_coef": 1.0}),  # SkyRL's
        covariance_row(adapter, seed, "kl_cov", "seq-mean-token-mean", policy_loss={"kl_cov_ratio": 0.5, "ppo_kl_coef": 0.1},
                       per_token_advantages=True),
    ]


# ---------------------------------------------------------------------------------------------
# kl_penalty under every name verl accepts
# ---------------------------------------------------------------------------------------------

KL_ESTIMATOR = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def kl_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = []
    for name, est in KL_ESTIMATOR.items():
        view = FunctionView(
            adapter, "kl_penalty",
            lambda lp, ref, m, *, estimator="k1", name=name: adapter.verl_kl_penalty(lp, ref, m, name),
            lambda lp, ref, m, up, *, estimator="k1", name=name: adapter.verl_kl_penalty(lp, ref, m, name, up),
        )
        rows.append(fixed_row(view, "kl_penalty", row_id=f"verl.kl_penalty[{name}]", fixed={"estimator": est}, seed=seed))
    return rows + kl_loss_rows(adapter, seed)


# verl's names that spec v1 could not ask for, as kl_loss_term (spec v1.1 kl.loss): "abs" = |d| and the
# "+" suffix, the estimator's value with the gradient of the unclamped ½d² (core_algos.py:2200-2245)
KL_LOSS_NAMES = {
    "abs": ("abs", "estimator"),
    "abs+": ("abs", "straight_through"),
    "k1+": ("k1", "straight_through"),
    "k2+": ("k2", "straight_through"),
    "k3+": ("k3", "straight_through"),
    "low_var_kl+": ("k3", "straight_through"),
}


def kl_loss_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    """``core_algos.kl_penalty`` under each name of ``KL_LOSS_NAMES``, checked as ``kl_loss_term`` with that
    estimator and gradient form fixed (property cases, golden vectors, invariants; fingerprinting names
    the gradient form verl computes if it is not the one its name promises)."""
    rows = []
    for name, (est, gradient) in KL_LOSS_NAMES.items():
        view = FunctionView(
            adapter, "kl_loss_term",
            lambda lp, ref, m, old=None, *, estimator="k3", gradient="estimator", name=name: adapter.verl_kl_penalty(lp, ref, m, name),
            lambda lp, ref, m, old, up, *, estimator="k3", gradient="estimator", name=name: adapter.verl_kl_penalty(lp, ref, m, name, up),
        )
        rows.append(fixed_row(view, "kl_loss_term", row_id=f"verl.kl_penalty[{name}]",
                              fixed={"estimator": est, "gradient": gradient}, seed=seed))
    return rows


# ---------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------


def advantage_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = []
    for estimator in ("grpo", "grpo_vectorized"):
        for norm in (True, False):
            # the vectorised estimator computes its group statistics in float32 whatever the input dtype
            # (utils/groupwise.py::group_mean_std, :191): a precision finding for float64 inputs
            view = FunctionView(adapter, "grpo_advantages",
                                lambda r, G, *, scale="group", e=estimator, n=norm: adapter.outcome_advantages(e, r, G, norm_adv_by_std_in_grpo=n))
            if estimator.endswith("vectorized"):
                view.precision_notes = {"grpo_advantages": "group_mean_std computes in float32"}
            else:  # a group of one gets std = torch.tensor(1.0), float32, before + epsilon (core_algos.py:317, :326)
                view.precision_notes = {"grpo_advantages": "a group of one's std is a float32 tensor "
                                                           "(core_algos.py:317): 1 + 1e-6 formed in float32"}
            rows.append(fixed_row(view, "grpo_advantages", row_id=f"verl.{estimator}_advantages[norm_adv_by_std_in_grpo={norm}]",
                                  fixed={"scale": "group" if norm else "none"}, seed=seed))
    view = FunctionView(adapter, "rloo_advantages", lambda r, G: adapter.outcome_advantages("rloo_vectorized", r, G))
    rows.append(fixed_row(view, "rloo_advantages", row_id="verl.rloo_vectorized_advantages", fixed={}, seed=seed))
    rows.append(gae_whitened_row(adapter, seed))
    return rows + estimator_rows(adapter, seed)


# ---------------------------------------------------------------------------------------------
# Spec v1.1: every advantage estimator verl registers (core_algos.py ADV_ESTIMATOR_REGISTRY)
# ---------------------------------------------------------------------------------------------

# registered name -> where its values are checked (the core-API rows are the adapter's functions,
# VerlAdapter; the others are rows of this module)
ESTIMATORS = {
    "gae": "core row gae; verl.compute_gae_advantage_return (whitened advantages)",
    "grpo": "verl.grpo_advantages[norm_adv_by_std_in_grpo=*]",
    "grpo_vectorized": "verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=*]",
    "rloo": "core row rloo_advantages (the loop: singleton 'raw', preset verl)",
    "rloo_vectorized": "verl.rloo_vectorized_advantages",
    "reinforce_plus_plus": "core row reinforce_pp_advantages; verl.reinforce_plus_plus[gamma=*,loss batch]",
    "reinforce_plus_plus_baseline": "core row reinforce_pp_baseline_advantages (singleton 'raw', preset verl)",
    "remax": "core row remax_advantages",
    "opo": "core row opo_advantages (singleton 'raw', preset verl)",
    "grpo_passk": "core row grpo_passk_advantages",
    "gpg": "core row gpg_advantages (singleton 'raw', preset verl)",
    "gdpo": "verl.gdpo_advantages[*] (a composition with adv.whiten)",
    "optimal_token_baseline": "core row optimal_token_baseline_advantages (align='position': eps 1e-8 and the "
                              "count-based zero tail, preset verl); verl.optimal_token_baseline[multi-turn batch,*]",
    "tir_optimal_token_baseline": "core row optimal_token_baseline_advantages (align='valid_token'); "
                                  "verl.tir_optimal_token_baseline[multi-turn batch,*]",
}


def estimator_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    """The framework rows of the spec v1.1 estimators and a "not implemented" row for any estimator the
    installed verl registers that this module does not know (a new verl)."""
    rows = [reinforce_pp_loss_batch_row(adapter, seed, gamma) for gamma in (1.0, 0.9)]
    rows += [gdpo_row(adapter, seed, K, weights) for K, weights in ((2, None), (3, [1.0, 0.5, 2.0]))]
    rows += [otb_row(adapter, seed, name, weighted) for name in ("optimal_token_baseline", "tir_optimal_token_baseline")
             for weighted in (False, True)]
    for name in adapter.advantage_estimators():
        if name not in ESTIMATORS:
            rows.append(not_implemented_row(f"verl.{name}", "adv.*", f"verl.{name}", adapter,
                                            f"advantage estimator {name!r} is registered by this verl but has no configuration "
                                            "in conformance/frameworks/verl/checks.py (ESTIMATORS)"))
    return rows


def reinforce_pp_loss_batch_row(adapter: VerlAdapter, seed: int, gamma: float) -> RowResult:
    """``reinforce_plus_plus`` on the loss batch as verl gets it: dense rewards with finite garbage at every
    masked position (row 3 has a masked tool token inside its completion), ``AlgoConfig(gamma=gamma)``:
    (advantages, returns) against ``reinforce_pp_advantages`` and its gap variants."""
    batch = round_batch(loss_batch(seed), DTYPE)
    m, r = batch["mask"], batch["token_rewards"]

    def got() -> dict[str, Any]:
        arrays = {"token_level_rewards": r.astype(np.float32), "response_mask": m.astype(np.float32)}
        out = adapter.call("advantage", arrays, {"name": "reinforce_plus_plus", "algo": {"gamma": gamma}})["outputs"]
        return {"value": np.where(m, out["advantages"], 0.0), "returns": np.where(m, out["returns"], 0.0)}

    def ev(kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            A, R = oracle.reinforce_pp_advantages(r, m, gamma=gamma, **kw)
            return {"value": A, "returns": R}
        return run

    cands = [Candidate("canonical", f"reinforce_pp_advantages(gamma={gamma:g})", ev({}))]
    cands += [Candidate(f"gap={gap!r}", f"reinforce_pp_advantages(gamma={gamma:g}, gap={gap!r})", ev({"gap": gap}),
                        kwargs={"gap": gap}) for gap in ("reset", "discount")]
    tol = {"value": tolerance("adv.whiten", DTYPE, "value"), "returns": tolerance("adv.gae", DTYPE, "value")}
    return composition_row(f"verl.reinforce_plus_plus[gamma={gamma:g},loss batch]", "adv.reinforce_pp",
                           "verl.compute_reinforce_plus_plus_outcome_advantage", adapter, got, cands, tol, seed=seed)


def gdpo_row(adapter: VerlAdapter, seed: int, K: int, weights: list[float] | None, G: int = 2) -> RowResult:
    """``gdpo`` with ``algorithm.gdpo_reward_keys`` of K rewards (and ``gdpo_reward_weights``) on the loss
    batch's mask (groups of 2 rows, one empty row): verl normalises each reward per group with its GRPO
    (a one-sample group would have mean 0 and std 1), sums with the weights and whitens over the response
    tokens (core_algos.py:446-466): ``whiten(gdpo_advantages(batch_normalize=False, singleton='raw') on
    every valid token, mask)``, a composition (preset verl); canonical GDPO normalises over sequences."""
    m = loss_mask()
    rng = np.random.default_rng(seed + 11)
    rewards = rng.integers(0, 3, size=(m.shape[0], K)).astype(np.float64)  # exact in float32, ties and spreads
    kw = {} if weights is None else {"reward_weights": list(weights)}

    def got() -> dict[str, Any]:
        return {"value": adapter.gdpo_token_advantages(rewards.astype(np.float32), G, m, weights)}

    def canonical() -> dict[str, Any]:
        return {"value": np.where(m, oracle.gdpo_advantages(rewards, G, **kw)[:, None], 0.0)}

    def composition() -> dict[str, Any]:
        s = oracle.gdpo_advantages(rewards, G, batch_normalize=False, singleton="raw", **kw)
        return {"value": oracle.whiten(np.where(m, s[:, None], 0.0), m)}

    cands = [Candidate("canonical", f"gdpo_advantages({fmt(kw)}) on every valid token", canonical),
             Candidate("batch normalisation over tokens (masked_whiten, core_algos.py:466)",
                       f"whiten(gdpo_advantages({fmt({**kw, 'batch_normalize': False, 'singleton': 'raw'})}) on every valid token, mask)",
                       composition, preset="verl", kwargs={"gdpo_advantages": {"batch_normalize": False, "singleton": "raw"},
                                                           "whiten": {}})]
    parts = [f"K={K}"] + ([f"gdpo_reward_weights={weights}"] if weights is not None else [])
    return composition_row(f"verl.gdpo_advantages[{','.join(parts)}]", "adv.gdpo+adv.whiten", "verl.compute_gdpo_outcome_advantage",
                           adapter, got, cands, {"value": tolerance("adv.whiten", DTYPE, "value")}, seed=seed)


# verl's layout of a multi-turn batch: every completion starts at response column 0, tool observations are
# masked spans inside it. Per row: the (start, stop) spans of model tokens; groups of 4 rows.
OTB_SPANS = (
    ((0, 3), (5, 9)),  # 7 tokens over 9 columns: the longest by count
    ((0, 6),),  # 6 tokens
    ((0, 2), (6, 10)),  # 6 tokens, the last one at column 9: the longest by extent
    ((0, 4),),
    ((0, 5),),  # second group
    (),  # an empty completion
    ((0, 3), (4, 7)),  # 6 tokens, extent 7
    ((0, 7),),  # 7 tokens, extent 7: a tie for the longest extent, the unique longest count
)
OTB_G, OTB_R = 4, 10


def otb_batch(seed: int) -> dict[str, np.ndarray]:
    """The optimal token baseline's inputs in verl's layout [B, R] (``OTB_SPANS``), float32-rounded and held in
    float64: an outcome score on each completion's last token plus a small dense reward, sampled tokens from
    confident to flat with a consistent sum_pi_squared (pi^2 + f (1 - pi)^2), truncated IS weights; finite
    garbage at every masked position, as padding holds."""
    rng = np.random.default_rng(seed + 23)
    B = len(OTB_SPANS)
    m = np.zeros((B, OTB_R), dtype=bool)
    for b, spans in enumerate(OTB_SPANS):
        for start, stop in spans:
            m[b, start:stop] = True
    r = rng.normal(0.0, 0.05, size=(B, OTB_R))
    for b in range(B):
        if m[b].any():
            r[b, np.flatnonzero(m[b])[-1]] += float(rng.integers(0, 2))
    logp = -np.abs(rng.normal(0.0, 1.0, size=(B, OTB_R))) - 1e-3
    pi = np.exp(logp)
    s2 = pi**2 + rng.uniform(0.0, 1.0, size=(B, OTB_R)) * (1 - pi) ** 2
    w = np.minimum(np.exp(rng.normal(0.0, 0.4, size=(B, OTB_R))), 2.0)
    garbage = rng.uniform(-3.0, 3.0, size=(4, B, OTB_R))
    batch = {"token_level_rewards": np.where(m, r, garbage[0]), "old_log_probs": np.where(m, logp, garbage[1]),
             "sum_pi_squared": np.where(m, s2, garbage[2]), "rollout_is_weights": np.where(m, w, garbage[3])}
    return {**round_batch(batch, DTYPE), "response_mask": m}


def otb_row(adapter: VerlAdapter, seed: int, name: str, weighted: bool) -> RowResult:
    """``optimal_token_baseline`` / ``tir_optimal_token_baseline`` as ``ray_trainer.compute_advantage`` calls them
    (defaults ``handle_zero_tail=True``, ``epsilon=1e-8``; ``rollout_is_weights`` when the batch has them) on
    ``otb_batch`` in verl's own layout, garbage included; the spec's arrays are that batch behind a one-token
    prompt. Candidates: canonical, preset verl (eps 1e-8 and the count-based zero tail), then each alone."""
    b = otb_batch(seed)
    m_verl = b["response_mask"]
    B = m_verl.shape[0]
    arrays = {k: b[k].astype(np.float32) for k in ("token_level_rewards", "old_log_probs", "sum_pi_squared")}
    if weighted:
        arrays["rollout_is_weights"] = b["rollout_is_weights"].astype(np.float32)
    arrays.update(response_mask=m_verl.astype(np.float32), index=np.arange(B, dtype=np.int64) // OTB_G)
    prompt = np.zeros((B, 1))
    m = np.concatenate([np.zeros((B, 1), dtype=bool), m_verl], axis=1)
    spec = {k: np.concatenate([prompt + 5.0, b[k]], axis=1) for k in ("token_level_rewards", "old_log_probs", "sum_pi_squared",
                                                                    "rollout_is_weights")}
    align = "position" if name == "optimal_token_baseline" else "valid_token"

    def got() -> dict[str, Any]:
        out = adapter.call("advantage", arrays, {"name": name})["outputs"]
        back = {k: np.concatenate([prompt, np.asarray(out[k], dtype=np.float64)], axis=1) for k in ("advantages", "returns")}
        return {"value": np.where(m, back["advantages"], 0.0), "returns": np.where(m, back["returns"], 0.0)}

    def ev(kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            A, R = oracle.optimal_token_baseline_advantages(
                spec["token_level_rewards"], m, OTB_G, spec["old_log_probs"], spec["sum_pi_squared"],
                spec["rollout_is_weights"] if weighted else None, align=align, **kw)
            return {"value": A, "returns": R}
        return run

    asked = f"align={align!r}" + (", is_weights" if weighted else "")
    preset = preset_kwargs("verl", "optimal_token_baseline_advantages")
    cands = [Candidate("canonical", f"optimal_token_baseline_advantages({asked})", ev({}))]
    cands += [Candidate(fmt(kw), f"optimal_token_baseline_advantages({asked}, {fmt(kw)})", ev(kw),
                        preset="verl" if kw == preset else None, kwargs=kw)
              for kw in (preset, {"eps": 1e-8}, {"tail_length": "count"})]
    tol = {"value": tolerance("adv.optimal_token_baseline", DTYPE, "value"),
           "returns": tolerance("adv.optimal_token_baseline", DTYPE, "value")}
    label = "multi-turn batch" + (",rollout_is_weights" if weighted else "")
    return composition_row(f"verl.{name}[{label}]", "adv.optimal_token_baseline",
                           f"verl.compute{'_multi_turn' if align == 'valid_token' else ''}_optimal_token_baseline_advantage",
                           adapter, got, cands, tol, seed=seed)


def gae_whitened_row(adapter: VerlAdapter, seed: int, n_seeds: int = 8) -> RowResult:
    """``compute_gae_advantage_return`` as verl returns it: advantages whitened over the batch
    (``masked_whiten``, unbiased variance, +1e-8) and unwhitened returns:
    ``(whiten(gae(...).advantages), gae(...).returns)``, on the property cases and on the loss batch
    (finite garbage at masked positions, a masked tool token inside a completion)."""
    seeds = seeds_for("verl.gae", seed, n_seeds)
    inputs = []
    for s in seeds:
        case = make_case("gae", s)
        inputs.append((f"seed {s}", case.args["token_rewards"], case.args["values"], case.args["mask"], case.kwargs))
    b = loss_batch(seed)
    inputs.append(("loss batch", b["token_rewards"], b["values"], b["mask"], {"gamma": 0.99, "lam": 0.95}))
    compared: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]] = []
    refused = []

    def got() -> dict[str, Any]:
        out = {}
        for label, r, v, m, kw in inputs:
            r32, v32 = cases.round_to(r, DTYPE), cases.round_to(v, DTYPE)
            if m.sum() <= 1:  # masked_whiten raises on a mask sum of 0 or 1 (torch_functional.py:311-326)
                try:
                    adapter.gae_whitened(r32.astype(np.float32), v32.astype(np.float32), m, **kw)
                except (ValueError, NotImplementedError):  # the adapter declares it not offered
                    refused.append(label)
                    continue
            if label == "loss batch":  # verl itself sees the garbage (the adapter would clean it)
                arrays = {"token_level_rewards": r32.astype(np.float32), "values": v32.astype(np.float32),
                          "response_mask": m.astype(np.float32)}
                res = adapter.call("advantage", arrays, {"name": "gae", **kw})["outputs"]
                A, R = np.where(m, res["advantages"], 0), np.where(m, res["returns"], 0)
            else:
                A, R = adapter.gae_whitened(r32.astype(np.float32), v32.astype(np.float32), m, **kw)
            out[f"advantages[{label}]"], out[f"returns[{label}]"] = A, R
            compared.append((label, r32, v32, m, kw))
        return out

    def canonical() -> dict[str, Any]:
        out = {}
        for label, r32, v32, m, kw in compared:
            ea, er = oracle.gae(r32, v32, m, **kw)
            out[f"advantages[{label}]"], out[f"returns[{label}]"] = oracle.whiten(ea, m), er
        return out

    def note() -> str:
        return (f"({len(refused)} case(s) with at most one valid token: verl raises ValueError there, as documented)"
                if refused else "")

    row = composition_row(
        "verl.compute_gae_advantage_return", "adv.gae+adv.whiten", "verl.compute_gae_advantage_return", adapter, got,
        [Candidate("canonical", "(whiten(gae(...).advantages, mask), gae(...).returns)", canonical)],
        {"value": tolerance("adv.gae", DTYPE), "advantages": tolerance("adv.whiten", DTYPE),
         "returns": tolerance("adv.gae", DTYPE)}, note=note, n_cases=lambda: len(compared))
    row.seeds = list(seeds)
    return row


# ---------------------------------------------------------------------------------------------
# Rollout correction (spec v1.1): the k1 rejection bounds as documented, the corrected losses
# ---------------------------------------------------------------------------------------------

# The k1 options' "lower_upper" threshold. verl documents it as *ratio* bounds, the ratio being
# r = pi_train/pi_rollout = pi_old/pi_rollout: ``log_ratio`` is the "Log ratio of training policy
# probability to rollout policy probability" (rollout_corr_helper.py:219-220), "token_k1" is
# "rejection with -log r (ratio thresholds supplied via rollout_rs_threshold as lower_upper)" and
# seq_sum_k1 / seq_mean_k1 use "ratio bounds" (trainer/config/algorithm.py:107-114, 123-124),
# "Rejects entire sequences based on sequence-level IS weight" (decoupled_seq_is_rs, :245) and
# "Uses geometric mean IS ratio E[log(r)] ... with [lower, upper] threshold bounds ... still uses IS
# ratio semantics" (decoupled_geo_rs, :268-270); the IS threshold of the same config, in the same
# "lower_upper" form, keeps lower <= r <= upper (IcePop, :94; rollout_corr_helper.py:599-601).
# What verl computes: k1 = -log_ratio (:263) kept when log(lower) <= k1 <= log(upper) (:300-301, :316
# and the seq_sum/seq_mean branches :323-349), i.e. 1/upper <= r <= 1/lower: bounds on
# pi_rollout/pi_old. The two agree when lower * upper = 1 (verl's single-number form sets lower =
# 1/upper, :164; its factories use "0.5_2.0" and "0.999_1.001").
K1_OPTIONS = {"token_k1": "token", "seq_sum_k1": "seq_sum", "seq_mean_k1": "seq_mean"}
K1_THRESHOLDS = (
    "0.5_5.0",  # IcePop's [0.5, 5] (arXiv:2510.18855), verl's own IcePop default (algorithm.py:216-234)
    "0.5_2.0",  # verl's decoupled_seq_is_rs default (algorithm.py:240): reciprocal bounds, both readings agree
)
# The minimal reproduction: one valid token per row (so token, sum and mean coincide) with
# r = pi_old/pi_rollout = 3, 0.3, 1.
MINIMAL_RATIOS = (3.0, 0.3, 1.0)


def _bounds(threshold: str) -> tuple[float, float]:
    lo, hi = threshold.split("_")
    return float(lo), float(hi)


def minimal_k1_batch() -> dict[str, np.ndarray]:
    """Three rows, one valid token each (position 1), with r = pi_old/pi_rollout = 3, 0.3, 1:
    rollout_logp = -1, old_logp = -1 + log r (float32-exact enough: the bounds are far)."""
    r = np.array(MINIMAL_RATIOS)
    mask = np.zeros((3, 2), dtype=bool)
    mask[:, 1] = True
    rollout = np.full((3, 2), -1.0)
    old = rollout + np.log(r)[:, None]
    return round_batch({"old_logp": old, "rollout_logp": rollout, "mask": mask}, DTYPE)


def k1_readings(level: str, threshold: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(documented, computed): ``rollout_rejection_mask`` keywords for a k1 option's ``"lo_hi"``
    threshold read as verl documents it (bounds on r = pi_old/pi_rollout) and as verl computes it
    (k1 = rollout - old in [log lo, log hi], i.e. bounds on pi_rollout/pi_old = 1/r)."""
    lo, hi = _bounds(threshold)
    return ({"statistic": "ratio", "level": level, "lo": lo, "hi": hi},
            {"statistic": "k1", "level": level, "lo": math.log(lo), "hi": math.log(hi)})


def verl_rejection_mask(adapter: VerlAdapter, old: np.ndarray, rollout: np.ndarray, m: np.ndarray, option: str, threshold: str) -> np.ndarray:
    """verl's keep mask: ``compute_rollout_correction_and_rejection_mask`` with ``rollout_rs=option`` and
    the threshold string as a user writes it, on float32 inputs (garbage at masked positions included)."""
    f32 = np.float32
    arrays = {"old_log_prob": old.astype(f32), "rollout_log_prob": rollout.astype(f32), "response_mask": m.astype(f32)}
    out = adapter.call("rollout_correction", arrays, {"rollout_rs": option, "rollout_rs_threshold": threshold})["outputs"]
    return (np.asarray(out["response_mask"]) > 0.5) & m


def _conditioned(make: Any, accept: Any, seed: int, tries: int = 200) -> dict[str, np.ndarray]:
    """The first of ``make(seed + 7919 k)`` (k = 0, 1, ...) that ``accept`` takes: decisions and kinks
    off their bounds at the row's precision (the registry's conditioning)."""
    for k in range(tries):
        batch = make(seed + 7919 * k)
        if accept(batch):
            return batch
    raise RuntimeError(f"no well-conditioned batch in {tries} tries from seed {seed}")


def _rejection_conditioned(b: dict[str, np.ndarray], old: str, rollout: str, kws: list[dict[str, Any]]) -> bool:
    args = {"old_logp": b[old], "rollout_logp": b[rollout], "mask": b["mask"]}
    return all(BY_FUNCTION["rollout_rejection_mask"].well_conditioned(args, kw) for kw in kws)


def k1_bounds_row(adapter: VerlAdapter, seed: int, option: str, threshold: str) -> RowResult:
    """``compute_rollout_rejection_mask`` with a k1 option and a ``"lower_upper"`` threshold against the
    meaning verl documents (keep lower <= pi_old/pi_rollout <= upper, for the token, the product or the
    geometric mean): ``pass`` when verl keeps exactly those, ``fail`` otherwise, saying whether verl's
    mask is the inverted reading (bounds on pi_rollout/pi_old). Cases: the seeded loss batch (ragged,
    garbage at masked positions; old = ``old_logp``, rollout = ``logp``, so log r spans +-2.3) and the
    minimal reproduction (r = 3, 0.3, 1)."""
    level = K1_OPTIONS[option]
    documented, computed = k1_readings(level, threshold)
    lo, hi = _bounds(threshold)
    batches: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    shown: dict[str, np.ndarray] = {}

    def got() -> dict[str, Any]:
        batch = _conditioned(lambda s: round_batch(loss_batch(s), DTYPE),
                             lambda b: _rejection_conditioned(b, "old_logp", "logp", [documented, computed]), seed)
        minimal = minimal_k1_batch()
        batches["loss batch"] = (batch["old_logp"], batch["logp"], batch["mask"])
        batches["minimal"] = (minimal["old_logp"], minimal["rollout_logp"], minimal["mask"])
        out = {f"keep[{label}]": verl_rejection_mask(adapter, *arrays[:2], arrays[2], option, threshold)
               for label, arrays in batches.items()}
        shown["minimal"] = out["keep[minimal]"][:, 1]
        return out

    def reading(keywords: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        return lambda: {f"keep[{label}]": oracle.rollout_rejection_mask(*arrays, **keywords)
                        for label, arrays in batches.items()}

    documented_text = f"rollout_rejection_mask({fmt(documented)}): keep {lo:g} <= pi_old/pi_rollout <= {hi:g}"
    computed_text = (f"rollout_rejection_mask({fmt(computed)}) = rollout_rejection_mask(statistic='ratio', level={level!r}, "
                     f"lo={1 / hi:g}, hi={1 / lo:g}): keep {lo:g} <= pi_rollout/pi_old <= {hi:g} (k1 = -log_ratio vs "
                     "[log lower, log upper], rollout_corr_helper.py:263, :300-301, :316): the bounds act on the inverse ratio")
    inverted = Candidate("the inverted bounds", computed_text, reading(computed))
    canonical = Candidate("canonical", f"{documented_text}, as verl documents a k1 'lower_upper' threshold "
                          "(algorithm.py:107-124, rollout_corr_helper.py:219-227)", reading(documented),
                          contrasts=[inverted] if lo * hi != 1.0 else [])

    def note() -> str:
        if "minimal" not in shown:
            return ""
        expected = oracle.rollout_rejection_mask(*batches["minimal"], **documented)[:, 1]
        if np.array_equal(shown["minimal"], expected):
            return ""
        return (f"\nminimal reproduction: r = pi_old/pi_rollout = {list(MINIMAL_RATIOS)} (rollout_logp = -1, old_logp = "
                f"-1 + log r, one valid token per row), rollout_rs={option!r}, rollout_rs_threshold={threshold!r}: verl keeps "
                f"{[bool(x) for x in shown['minimal']]}, the documented reading keeps {[bool(x) for x in expected]}")

    return composition_row(f"verl.compute_rollout_rejection_mask[{option},{threshold}]", "offpolicy.rejection",
                           "verl.compute_rollout_rejection_mask", adapter, got, [canonical],
                           {"value": tolerance("offpolicy.rejection", DTYPE)}, seed=seed, note=note, n_cases=2)


def rollout_batch(seed: int, kinks: tuple[float, ...] = KINKS, scale: float = 0.3) -> dict[str, np.ndarray]:
    """``loss_batch`` (float32-rounded) plus ``rollout_logp``: the inference engine's log-probs of the same
    tokens, ``old_logp - e`` with e ~ N(0, scale) (so pi_old/pi_rollout = e^e), garbage at masked positions."""
    b = loss_batch(seed, kinks=kinks)
    rng = np.random.default_rng(seed + 1)
    e = rng.normal(0.0, scale, size=b["mask"].shape)
    b["rollout_logp"] = np.where(b["mask"], b["old_logp"] - e, rng.uniform(-3.0, 0.0, size=e.shape))
    return round_batch(b, DTYPE)


def _weighted(piece: Piece, w: np.ndarray) -> Piece:
    """``piece`` times the constant per-token weight ``w`` (no gradient reaches ``w``)."""
    return Piece(piece.value * w, lambda u: piece.vjp(u * w))


def corrected_loss_row(adapter: VerlAdapter, seed: int, label: str, rollout_correction: dict[str, Any], batch: dict[str, np.ndarray],
                       old: np.ndarray, cands: list[Candidate], name: str = "vanilla", mode: str = "token-mean",
                       note: str = "") -> RowResult:
    """``policy_loss`` op (``loss_agg_mode=mode``, engine global batch info, ActorConfig defaults) with a
    ``RolloutCorrectionConfig``: value and gradient w.r.t. ``log_prob`` against ``cands``. ``old`` is what
    the loss gets as ``old_log_prob`` (the recomputed log-probs in decoupled mode, the rollout's in bypass
    mode, as ``apply_bypass_mode`` sets it, rollout_corr_helper.py:1138)."""
    m = batch["mask"]
    kw, _ = _global(mode, m, True)

    def got() -> dict[str, Any]:
        f32 = np.float32
        arrays = {"old_log_prob": old.astype(f32), "log_prob": batch["logp"].astype(f32),
                  "rollout_log_prob": batch["rollout_logp"].astype(f32),
                  "advantages": broadcast_advantages(batch).astype(f32), "response_mask": m.astype(f32)}
        r = adapter.call("policy_loss", arrays, {"name": name, "loss_agg_mode": mode, "global_batch_info": kw,
                                                 "rollout_correction": rollout_correction},
                         wrt=["log_prob"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_prob"]}

    return composition_row(f"verl.policy_loss[{label}]", "offpolicy.decoupled_ppo+agg", f"verl.compute_policy_loss_{name}",
                           adapter, got, cands, loss_tolerances(DTYPE, "offpolicy.decoupled_ppo"), seed=seed, note=note)


def _ppo_piece(lp: np.ndarray, old: np.ndarray, b: dict[str, np.ndarray], **kw: Any) -> Piece:
    A, m = b["advantages"], b["mask"]
    return Piece(oracle.ppo_token_loss(lp, old, A, m, **kw), lambda u: oracle.ppo_token_loss_grad(lp, old, A, m, u, **kw))


def decoupled_loss_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    """verl's decoupled mode (``bypass_mode=False``): the driver's ``compute_rollout_correction_and_add_to_batch``
    on (old, rollout), then ``compute_policy_loss_vanilla`` against ``old`` times ``rollout_is_weights``
    (core_algos.py:1365). Token TIS is ``decoupled_ppo_token_loss(behav_cap=threshold)``; sequence TIS
    (``decoupled_seq_is``, the ``RolloutCorrectionConfig`` default level, algorithm.py:179) has one
    weight per row, which no ``decoupled_ppo_token_loss`` keyword expresses: it is composed as
    ``ppo_token_loss(logp, old) * rollout_is_weights(old, rollout, level='sequence')``."""
    b = rollout_batch(seed)
    m, lp, old, ro = b["mask"], b["logp"], b["old_logp"], b["rollout_logp"]
    _, agg = _global("token-mean", m, True)
    A = b["advantages"]
    rows = []

    # token TIS, threshold 2.0 (decoupled_token_is, algorithm.py:187-199)
    def dec(**kw: Any) -> Any:
        def ev() -> dict[str, Any]:
            piece = Piece(oracle.decoupled_ppo_token_loss(lp, old, ro, A, m, **kw),
                          lambda u: oracle.decoupled_ppo_token_loss_grad(lp, old, ro, A, m, u, **kw))
            return compose(piece, m, agg, "grad[logp]")
        return ev

    asked = {"behav_cap": 2.0}
    preset = {**preset_kwargs("verl", "decoupled_ppo_token_loss"), **asked}
    cands = [Candidate("canonical", f"aggregate(decoupled_ppo_token_loss({fmt(asked)}), {fmt(agg)})", dec(**asked))]
    cands.append(Candidate(fmt({k: v for k, v in preset.items() if k not in asked}),
                           f"aggregate(decoupled_ppo_token_loss({fmt(preset)}), {fmt(agg)})", dec(**preset), preset="verl",
                           kwargs={k: v for k, v in preset.items() if k not in asked}))
    rows.append(corrected_loss_row(adapter, seed, "vanilla,token-mean,rollout_is=token,rollout_is_threshold=2.0",
                                   {"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": False}, b, old, cands))

    # sequence TIS, threshold 2.0 (decoupled_seq_is, algorithm.py:201-213)
    def seq(ppo_kw: dict[str, Any], is_kw: dict[str, Any]) -> Any:
        def ev() -> dict[str, Any]:
            w = oracle.rollout_is_weights(old, ro, m, level="sequence", hi=2.0, **is_kw)
            return compose(_weighted(_ppo_piece(lp, old, b, **ppo_kw), w), m, agg, "grad[logp]")
        return ev

    ppo_preset = preset_kwargs("verl", "ppo_token_loss")
    is_preset = preset_kwargs("verl", "rollout_is_weights")
    formula = "aggregate(ppo_token_loss(logp, old{}) * rollout_is_weights(old, rollout, level='sequence', hi=2.0{}), {})"
    cands = [Candidate("canonical", formula.format("", "", fmt(agg)), seq({}, {})),
             Candidate(f"ppo_token_loss({fmt(ppo_preset)}), rollout_is_weights({fmt(is_preset)})",
                       formula.format(", " + fmt(ppo_preset), ", " + fmt(is_preset), fmt(agg)), seq(ppo_preset, is_preset),
                       preset="verl", kwargs={"ppo_token_loss": ppo_preset, "rollout_is_weights": is_preset})]
    rows.append(corrected_loss_row(adapter, seed, "vanilla,token-mean,rollout_is=sequence,rollout_is_threshold=2.0",
                                   {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "bypass_mode": False}, b, old, cands))
    return rows


BYPASS_K3 = 0.5  # seq_mean_k3 threshold; verl's bypass_ppo_clip_k3_rs default 0.01 (algorithm.py:330) rejects every row of this batch


def bypass_loss_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    """verl's bypass mode (``bypass_mode=True``, old_log_prob := rollout_log_prob): ``compute_policy_loss_bypass_mode``
    (core_algos.py:2413-2549) computes the IS weights and rejection mask of the *current* log-probs against
    the rollout's (``old_log_prob=log_prob``, :2499, under no_grad) and then
    - ``loss_type="ppo_clip"``: ``compute_policy_loss_vanilla`` against the rollout log-probs on the
      rejection-masked response (:2529-2539): aggregate(ppo_token_loss(logp, rollout) * rollout_rejection_mask(
      logp, rollout), mask) with the engine's token count of the unmasked batch;
    - ``loss_type="reinforce"``: ``compute_policy_loss_reinforce`` (:2333-2410): -A * logp * w (:2389), i.e.
      aggregate(pg_token_loss(logp) * rollout_is_weights(logp, rollout), mask), w a constant.
    No v1.1 function is either (the statistics are of pi_theta, not of a fixed pi_old): composition rows."""
    rows = []
    rs_kw = {"statistic": "k3", "level": "seq_mean", "hi": BYPASS_K3}
    # bypass: the PPO ratio is against the rollout, so the batch's old_logp plays the rollout log-probs
    b = _conditioned(lambda s: round_batch(loss_batch(s, kinks=KINKS), DTYPE),
                     lambda bb: _rejection_conditioned(bb, "logp", "old_logp", [rs_kw]), seed)
    b["rollout_logp"] = b["old_logp"]
    m, lp, ro = b["mask"], b["logp"], b["rollout_logp"]
    _, agg = _global("token-mean", m, True)
    keep = oracle.rollout_rejection_mask(lp, ro, m, **rs_kw).astype(np.float64)

    def clip(ppo_kw: dict[str, Any]) -> Any:
        return lambda: compose(_weighted(_ppo_piece(lp, ro, b, **ppo_kw), keep), m, agg, "grad[logp]")

    ppo_preset = preset_kwargs("verl", "ppo_token_loss")
    formula = "aggregate(ppo_token_loss(logp, rollout{}) * rollout_rejection_mask(logp, rollout, {}), {})"
    cands = [Candidate("canonical", formula.format("", fmt(rs_kw), fmt(agg)), clip({})),
             Candidate(fmt(ppo_preset), formula.format(", " + fmt(ppo_preset), fmt(rs_kw), fmt(agg)), clip(ppo_preset),
                       preset="verl", kwargs=ppo_preset)]
    rows.append(corrected_loss_row(
        adapter, seed, f"bypass_mode,ppo_clip,token-mean,rollout_rs=seq_mean_k3,rollout_rs_threshold={BYPASS_K3:g}",
        {"rollout_is": None, "rollout_rs": "seq_mean_k3", "rollout_rs_threshold": BYPASS_K3, "bypass_mode": True,
         "loss_type": "ppo_clip"}, b, ro, cands, name="bypass_mode",
        note=f"({int((keep.sum(axis=1) > 0).sum())} of {int((m.sum(axis=1) > 0).sum())} rows kept)"))

    # reinforce with sequence TIS (bypass_pg_is, algorithm.py:353-371)
    def pg(is_kw: dict[str, Any]) -> Any:
        def ev() -> dict[str, Any]:
            w = oracle.rollout_is_weights(lp, ro, m, level="sequence", hi=2.0, **is_kw)
            piece = Piece(oracle.pg_token_loss(lp, b["advantages"], m), lambda u: oracle.pg_token_loss_grad(lp, b["advantages"], m, u))
            return compose(_weighted(piece, w), m, agg, "grad[logp]")
        return ev

    is_preset = preset_kwargs("verl", "rollout_is_weights")
    formula = "aggregate(pg_token_loss(logp) * rollout_is_weights(logp, rollout, level='sequence', hi=2.0{}), {})"
    cands = [Candidate("canonical", formula.format("", fmt(agg)), pg({})),
             Candidate(fmt(is_preset), formula.format(", " + fmt(is_preset), fmt(agg)), pg(is_preset), preset="verl", kwargs=is_preset)]
    rows.append(corrected_loss_row(
        adapter, seed, "bypass_mode,reinforce,token-mean,rollout_is=sequence,rollout_is_threshold=2.0",
        {"rollout_is": "sequence", "rollout_is_threshold": 2.0, "bypass_mode": True, "loss_type": "reinforce"},
        b, ro, cands, name="bypass_mode"))
    return rows


def offpolicy_rows(adapter: VerlAdapter, seed: int) -> list[RowResult]:
    rows = [k1_bounds_row(adapter, seed, option, threshold) for threshold in K1_THRESHOLDS for option in K1_OPTIONS]
    return rows + decoupled_loss_rows(adapter, seed) + bypass_loss_rows(adapter, seed)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def extra_rows(adapter: VerlAdapter, seed: int = 0) -> list[RowResult]:
    """Every verl-specific row."""
    return (agg_rows(adapter, seed) + loss_rows(adapter, seed) + modern_loss_rows(adapter, seed) + kl_rows(adapter, seed)
            + advantage_rows(adapter, seed) + offpolicy_rows(adapter, seed))


__all__ = ["extra_rows", "agg_rows", "loss_rows", "modern_loss_rows", "modern_policy_row", "kl_rows", "kl_loss_rows", "advantage_rows",
           "offpolicy_rows", "policy_row", "value_row", "dp_row", "k1_bounds_row", "k1_readings", "minimal_k1_batch",
           "verl_rejection_mask", "MINIMAL_RATIOS", "MODERN", "HARD_CODED", "COVARIANCE", "covariance_row",
           "covariance_rows"]
