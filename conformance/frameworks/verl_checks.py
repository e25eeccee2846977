"""verl rows that are not single core-API calls: every ``agg_loss`` mode (with the engine's global batch
info, with verl's local fallback, and split over two data-parallel ranks), the aggregated policy losses
(vanilla, GSPO, CISPO) and value loss (value and gradient w.r.t. the log-probs / values), GRPO with and
without std scaling, the vectorised estimators, every ``kl_penalty`` name and GAE's whitened output.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.adapters.verl_adapter.VerlAdapter``). Row ids look like ``verl.agg_loss[seq-mean-token-mean,local]``,
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
RLOO :588/:834, GAE :216); ``verl/workers/utils/losses.py:57-69`` (the global batch info the engine sets).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

import oracle
from conformance import cases
from conformance.frameworks import spec_io as io
from conformance.frameworks.checks import (
    NP,
    Candidate,
    FunctionView,
    aggregate_eval,
    broadcast_advantages,
    compose,
    composition_row,
    fixed_row,
    fmt,
    loss_batch,
    loss_call,
    loss_tolerances,
    mean_over_ranks,
    not_implemented_row,
    policy_piece,
    round_batch,
    upstream_for,
    value_and_grad_tolerances,
    value_loss_candidates,
)
from conformance.suite import RowResult
from conformance.tolerances import tolerance
from conformance.trl_checks import Comparison

DTYPE = "float32"  # the framework rows run in float32, verl's training dtype for these tensors
MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "token-sum")
SPEC_MODE = {v: k for k, v in io.AGG_MODES.items()}
NORM = 16.0  # loss_scale_factor for seq-mean-token-sum-norm (a constant, as verl's docstring advises)
# clip kinks in log space: 1 -+ 0.2, 1 + 0.28, dual clip 3, 10; CISPO 1 +- 0.2
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28, 3.0, 10.0))


def _arrays(batch: dict[str, np.ndarray], names: dict[str, str], dtype: str = DTYPE) -> dict[str, np.ndarray]:
    return {verl_name: batch[name].astype(NP[dtype]) for verl_name, name in names.items()}


def _mask(batch: dict[str, np.ndarray], dtype: str = DTYPE) -> np.ndarray:
    return batch["mask"].astype(NP[dtype])


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


def agg_rows(adapter: Any, seed: int) -> list[RowResult]:
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


def dp_row(adapter: Any, batch: dict[str, np.ndarray], mode: str, seed: int, tol: dict[str, Any], dp: int = 2) -> RowResult:
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


def policy_row(adapter: Any, seed: int, name: str, mode: str, *, config: dict[str, Any] | None = None,
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
        arrays = _arrays(batch, {"old_log_prob": "old_logp", "log_prob": "logp"})
        arrays["advantages"] = broadcast_advantages(batch).astype(np.float32)
        arrays["response_mask"] = _mask(batch)
        r = adapter.call("policy_loss", arrays, {"name": name, "loss_agg_mode": mode, "config": config, "global_batch_info": kw},
                         wrt=["log_prob"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["log_prob"]}

    def ev(kwargs: dict[str, Any]) -> Any:
        return lambda: compose(policy_piece(function, batch["logp"], batch, **kwargs), m, agg, "grad[logp]")

    preset = {**oracle.presets.preset_kwargs("verl", function), **asked}
    cands = [Candidate("canonical", f"aggregate({function}({fmt(asked)}), {fmt(agg)})", ev(asked))]
    if preset != asked:
        cands.append(Candidate(fmt({k: v for k, v in preset.items() if asked.get(k, object()) != v}), f"aggregate({function}({fmt(preset)}), {fmt(agg)})",
                               ev(preset), preset="verl", kwargs={k: v for k, v in preset.items() if asked.get(k, object()) != v}))
    parts = [name, mode] + [f"{k}={v}" for k, v in config.items()] + (["A=[B,T]"] if per_token_advantages else [])
    return composition_row(f"verl.policy_loss[{','.join(parts)}]", f"{spec_id}+agg", f"verl.compute_policy_loss_{name}",
                           adapter, got, cands, loss_tolerances(DTYPE, spec_id), seed=seed)


def value_row(adapter: Any, seed: int, mode: str, cliprange: float, asked: dict[str, Any]) -> RowResult:
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


def loss_rows(adapter: Any, seed: int) -> list[RowResult]:
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
# kl_penalty under every name verl accepts
# ---------------------------------------------------------------------------------------------

KL_ESTIMATOR = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def kl_rows(adapter: Any, seed: int) -> list[RowResult]:
    rows = []
    for name, est in KL_ESTIMATOR.items():
        view = FunctionView(
            adapter, "kl_penalty",
            lambda lp, ref, m, *, estimator="k1", name=name: adapter.verl_kl_penalty(lp, ref, m, name),
            lambda lp, ref, m, up, *, estimator="k1", name=name: adapter.verl_kl_penalty(lp, ref, m, name, up),
        )
        rows.append(fixed_row(view, "kl_penalty", row_id=f"verl.kl_penalty[{name}]", fixed={"estimator": est}, seed=seed))
    rows += [kl_straight_through_row(adapter, seed, name) for name in ("k3+", "low_var_kl+", "k1+")]
    rows.append(not_implemented_row("verl.kl_penalty[abs]", "kl.estimator", "verl.kl_penalty", adapter,
                                    "'abs' = |logp - ref_logp| (core_algos.py:2216-2250) is not a spec v1 estimator"))
    return rows


def kl_straight_through_row(adapter: Any, seed: int, name: str) -> RowResult:
    """``"<name>+"``: verl keeps the estimator's value and takes k2's gradient (straight-through,
    core_algos.py:2188-2213)."""
    base = KL_ESTIMATOR[name[:-1]]
    batch = round_batch(loss_batch(seed), DTYPE)
    m, lp, ref = batch["mask"], batch["logp"], batch["ref_logp"]
    u = upstream_for(m.shape, seed + 7, DTYPE)
    value_kw = {"estimator": base, **({"log_ratio_clamp": 20.0, "clamp": 10.0} if base == "k3" else {})}

    def got() -> dict[str, Any]:
        f32 = np.float32
        return {"value": adapter.verl_kl_penalty(lp.astype(f32), ref.astype(f32), m, name),
                "grad[logp]": adapter.verl_kl_penalty(lp.astype(f32), ref.astype(f32), m, name, u.astype(f32))}

    def ev(value_kw: dict[str, Any], grad_kw: dict[str, Any]) -> Any:
        return lambda: {"value": oracle.kl_penalty(lp, ref, m, **value_kw), "grad[logp]": oracle.kl_penalty_grad(lp, ref, m, u, **grad_kw)}

    cands = [
        Candidate("canonical", f"kl_penalty({fmt(value_kw)}) (value and gradient)", ev(value_kw, value_kw)),
        Candidate("straight-through: value of " + base + ", gradient of k2",
                  f"value kl_penalty({fmt(value_kw)}), gradient kl_penalty_grad(estimator='k2')",
                  ev(value_kw, {"estimator": "k2"}), kwargs={"gradient": "k2 (straight-through)"}),
    ]
    return composition_row(f"verl.kl_penalty[{name}]", "kl.estimator", "verl.kl_penalty", adapter, got, cands,
                           value_and_grad_tolerances("kl.estimator", DTYPE), seed=seed)


# ---------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------


def advantage_rows(adapter: Any, seed: int) -> list[RowResult]:
    rows = []
    for estimator in ("grpo", "grpo_vectorized"):
        for norm in (True, False):
            # the vectorised estimator computes its group statistics in float32 whatever the input dtype
            # (utils/groupwise.py::group_mean_std, :191): a precision finding for float64 inputs
            view = FunctionView(adapter, "grpo_advantages",
                                lambda r, G, *, scale="group", e=estimator, n=norm: adapter.outcome_advantages(e, r, G, norm_adv_by_std_in_grpo=n))
            if estimator.endswith("vectorized"):
                view.precision_notes = {"grpo_advantages": "group_mean_std computes in float32"}
            rows.append(fixed_row(view, "grpo_advantages", row_id=f"verl.{estimator}_advantages[norm_adv_by_std_in_grpo={norm}]",
                                  fixed={"scale": "group" if norm else "none"}, seed=seed))
    view = FunctionView(adapter, "rloo_advantages", lambda r, G: adapter.outcome_advantages("rloo_vectorized", r, G))
    rows.append(fixed_row(view, "rloo_advantages", row_id="verl.rloo_vectorized_advantages", fixed={}, seed=seed))
    rows.append(gae_whitened_row(adapter, seed))
    return rows


def gae_whitened_row(adapter: Any, seed: int, n_seeds: int = 8) -> RowResult:
    """``compute_gae_advantage_return`` as verl returns it: advantages whitened over the batch
    (``masked_whiten``, unbiased variance, +1e-8) and unwhitened returns:
    ``(whiten(gae(...).advantages), gae(...).returns)``, on the property cases and on the loss batch
    (finite garbage at masked positions, a masked tool token inside a completion)."""
    from conformance.suite import seeds_for

    t0 = time.perf_counter()
    row = RowResult(id="verl.compute_gae_advantage_return", spec_id="adv.gae+adv.whiten", function="verl.compute_gae_advantage_return",
                    adapter=adapter.name, status="pass")
    c = Comparison()
    refused = 0
    inputs = []
    for s in seeds_for("verl.gae", seed, n_seeds):
        case = cases.make_case("gae", s)
        inputs.append((f"seed {s}", case.args["token_rewards"], case.args["values"], case.args["mask"], case.kwargs))
        row.seeds.append(s)
    b = loss_batch(seed)
    inputs.append(("loss batch", b["token_rewards"], b["values"], b["mask"], {"gamma": 0.99, "lam": 0.95}))
    try:
        for label, r, v, m, kw in inputs:
            r32, v32 = cases.round_to(r, DTYPE), cases.round_to(v, DTYPE)
            if m.sum() <= 1:  # masked_whiten raises on a mask sum of 0 or 1 (torch_functional.py:311-326)
                try:
                    adapter.gae_whitened(r32.astype(np.float32), v32.astype(np.float32), m, **kw)
                except ValueError:
                    refused += 1
                    continue
            if label == "loss batch":  # verl itself sees the garbage (the adapter would clean it)
                arrays = {"token_level_rewards": r32.astype(np.float32), "values": v32.astype(np.float32), "response_mask": m.astype(np.float32)}
                out = adapter.call("advantage", arrays, {"name": "gae", **kw})["outputs"]
                A, R = np.where(m, out["advantages"], 0), np.where(m, out["returns"], 0)
            else:
                A, R = adapter.gae_whitened(r32.astype(np.float32), v32.astype(np.float32), m, **kw)
            ea, er = oracle.gae(r32, v32, m, **kw)
            c.add(f"advantages[{label}]", A, oracle.whiten(ea, m), tolerance("adv.whiten", DTYPE))
            c.add(f"returns[{label}]", R, er, tolerance("adv.gae", DTYPE))
            row.n_cases += 1
    except Exception as exc:
        row.status, row.message = "error", f"{type(exc).__name__}: {exc}"
        row.seconds = time.perf_counter() - t0
        return row
    row.max_abs_err, row.max_rel_err = c.max_abs, c.max_rel
    row.checks = {"value": "pass" if c.ok else "fail"}
    note = f" ({refused} case(s) with at most one valid token: verl raises ValueError there, as documented)" if refused else ""
    if c.ok:
        row.message = "= (whiten(gae(...).advantages, mask), gae(...).returns)" + note
    else:
        row.status = "fail"
        row.message = "\n".join(["(whiten(gae(...).advantages, mask), gae(...).returns):"] + [m.describe() for m in c.mismatches]) + note
    row.seconds = time.perf_counter() - t0
    return row


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


def extra_rows(adapter: Any, seed: int = 0) -> list[RowResult]:
    """Every verl-specific row."""
    return agg_rows(adapter, seed) + loss_rows(adapter, seed) + kl_rows(adapter, seed) + advantage_rows(adapter, seed)


__all__ = ["extra_rows", "agg_rows", "loss_rows", "kl_rows", "advantage_rows", "policy_row", "value_row", "dp_row"]
