"""torchrl rows that are not single core-API calls: its other value functions and estimators (the vectorised
GAE and TD(lambda), the ``GAE`` / ``TDLambdaEstimator`` modules), ``MCAdvantage`` on groups of two or more
(per-step and ``trajectory_return="sum"``), and the LLM losses' whole ``forward`` driven as a trainer drives
it: a tiny random-weight causal model behind torchrl's ``LLMWrapperBase`` interface (``ops.py``), torchrl's
default ``masking_strategy="sft"`` on a batch laid out as its collector lays it out (prompts left-padded,
completions right-padded), ``GRPOLoss`` / ``DAPO`` / ``CISPOLoss`` with their defaults (entropy bonus 0.01,
``token_mean``), ``prompt_mean``, the ``"rlhf"`` mask of a multi-turn completion, the KL to the reference, the
KL-Mask trust region and the clip fraction it logs.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]``; ids like ``torchrl.vec_generalized_advantage_estimate``,
``torchrl.MCAdvantage[trajectory_return=sum]``, ``torchrl.GRPOLoss[kl_to_ref_coeff=0.1]``.

How a loss row is checked: float32 (the tiny model's dtype). The worker returns the loss terms, the model's
logits ``z`` ([B, T, V], position t predicts token t + 1: the spec's logits) and, after ``backward()`` on the
summed ``loss_*`` terms, their gradient w.r.t. ``z``. The oracle (float64 on the same ``z``) composes
``token_logprobs`` / ``token_entropy`` of ``z``, the policy loss, ``aggregate`` and ``entropy_bonus``; its
gradient w.r.t. ``z`` is the chain of their ``_grad`` functions. The batch's old and reference log-probs
are the spec's log-probs of ``z`` moved by log-ratios inside and far outside every clip range, with finite
garbage at every masked position (padding).

Sources: torchrl 0.14.1, ``torchrl/objectives/llm/grpo.py`` (``GRPOLoss`` :361, ``forward`` :664-767,
``_compute_policy_objective`` :769 / CISPO :1008, ``_aggregate_loss_value`` :784, ``_kl_to_ref`` :868,
``_log_weight`` :918, ``MCAdvantage`` :1019), ``torchrl/objectives/value/functional.py`` (:120, :271, :791, :1057)
and ``advantages.py`` (``TDLambdaEstimator`` :1620, ``GAE`` :1960), ``torchrl/modules/llm/policies/common.py``
(``_get_dist_with_prompt_mask`` :1215, ``_get_dist_with_assistant_mask`` :1332).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.composite import Candidate, FunctionView, composition_row, fixed_row
from conformance.records.pieces import fmt
from conformance.runner.rows import RowResult
from conformance.tolerances import Tol, tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.torchrl.adapter import TorchRLAdapter

DTYPE = "float32"
KL_COEF = 0.1
KL_MASK_THRESHOLD = 0.08  # 0.5 * d^2 <= 0.08: |d| <= 0.4
KINKS = tuple(math.log(x) for x in (0.8, 1.2, 1.28)) + (-0.4, 0.4)
VOCAB, HIDDEN = 11, 6

# ---------------------------------------------------------------------------------------------
# value functions and estimators: spec gae rows
# ---------------------------------------------------------------------------------------------

LAMBDA_ZERO = "gamma * lmbda = 0 raises IndexError in the vectorised path (functional.py:197-198, value/utils.py:77)"


def _no_zero_discount(case: Any) -> str | None:
    kw = case.kwargs
    return LAMBDA_ZERO if kw.get("gamma", 1.0) * kw.get("lam", 1.0) == 0 else None


def value_rows(adapter: TorchRLAdapter, seed: int) -> list[RowResult]:
    """Each value function and estimator as the spec's ``gae`` (advantage, and value target = returns)."""
    rows = []
    for name, op, params, skip in (
        ("vec_generalized_advantage_estimate", "value_function", {}, None),
        ("vec_generalized_advantage_estimate", "value_function", {}, _no_zero_discount),
        ("td_lambda_return_estimate", "value_function", {}, None),
        ("vec_td_lambda_return_estimate", "value_function", {}, None),
        ("vec_td_lambda_return_estimate", "value_function", {}, _no_zero_discount),
        ("GAE", "value_estimator", {}, None),
        ("GAE", "value_estimator", {"vectorized": True}, None),
        ("TDLambdaEstimator", "value_estimator", {}, None),
    ):
        def gae(r: Any, v: Any, m: Any, *, gamma: float = 1.0, lam: float = 1.0, name: str = name, op: str = op,
                params: dict[str, Any] = params) -> tuple[np.ndarray, np.ndarray]:
            return adapter.value_function(name, r, v, m, gamma, lam, op=op, **params)

        suffix = ",".join([f"{k}={v}" for k, v in params.items()] + (["gamma*lmbda>0"] if skip else []))
        row_id = f"torchrl.{name}" + (f"[{suffix}]" if suffix else "")
        rows.append(fixed_row(FunctionView(adapter, "gae", gae), "gae", row_id=row_id, fixed={}, seed=seed, skip=skip))
    return rows


# ---------------------------------------------------------------------------------------------
# MCAdvantage
# ---------------------------------------------------------------------------------------------

SINGLETON = "a one-sample group: NaN per step (std of one reward), refused with trajectory_return (grpo.py:1165-1170)"


def mc_advantage_rows(adapter: TorchRLAdapter, seed: int) -> list[RowResult]:
    rows = []
    for trajectory_return in (None, "sum"):
        def grpo(r: Any, G: Any, *, scale: str = "group", trajectory_return: str | None = trajectory_return) -> np.ndarray:
            return adapter.mc_advantages(np.asarray(r), int(G), trajectory_return=trajectory_return)

        label = "grpo_size>=2" if trajectory_return is None else f"trajectory_return={trajectory_return}"
        rows.append(fixed_row(FunctionView(adapter, "grpo_advantages", grpo), "grpo_advantages", row_id=f"torchrl.MCAdvantage[{label}]",
                              fixed={"scale": "group"}, seed=seed,
                              skip=lambda case: SINGLETON if case.args["group_size"] == 1 else None))
    return rows


# ---------------------------------------------------------------------------------------------
# The loss forward with a tiny model (trainer level)
# ---------------------------------------------------------------------------------------------

# (prompt length, completion length, masked tool position inside the completion or None) per row
LAYOUT = ((2, 5, 2), (1, 3, None), (3, 6, None), (2, 0, None), (1, 4, 1), (3, 2, None))


def layout(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """torchrl's collector layout: prompts left-padded to P, completions right-padded; ``mask`` is what
    ``masking_strategy="sft"`` computes (attention mask and column >= P), ``turns`` the same with each
    row's tool token masked too (a multi-turn assistant mask, ``"rlhf"``)."""
    P = max(p for p, _, _ in LAYOUT)
    T = P + max(n for _, n, _ in LAYOUT)
    B = len(LAYOUT)
    tokens = rng.integers(0, VOCAB, size=(B, T))
    prompt = np.full((B, P), -100)
    attention = np.zeros((B, T), dtype=bool)
    turns = np.zeros((B, T), dtype=bool)
    for b, (p, n, tool) in enumerate(LAYOUT):
        prompt[b, P - p:] = tokens[b, P - p:P]
        attention[b, P - p:P + n] = True
        turns[b, P:P + n] = True
        if tool is not None:
            turns[b, P + tool] = False
    mask = attention & (np.arange(T) >= P)[None, :]
    return {"tokens": tokens, "prompt": prompt, "attention_mask": attention, "mask": mask, "turns": turns}


def _far_ratios(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    d = np.zeros(shape)
    for idx in np.ndindex(*shape):
        while True:
            u = rng.random()
            x = float(rng.uniform(-0.15, 0.15) if u < 0.35 else rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 0.8) if u < 0.7
                      else rng.choice([-1.0, 1.0]) * rng.uniform(1.3, 2.3))
            if all(abs(x - k) > 0.03 for k in KINKS):
                d[idx] = x
                break
    return d


def loss_batch(adapter: TorchRLAdapter, seed: int) -> dict[str, np.ndarray]:
    """The layout, the tiny model's logits ``z`` (one forward), and old / reference log-probs around the
    spec's log-probs of ``z``, float32, finite garbage where masked."""
    rng = np.random.default_rng(seed)
    b = layout(rng)
    B, T = b["mask"].shape
    f = np.float32
    advantages = (np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0]) * (0.3 + np.abs(rng.normal(0.0, 1.0, size=B)))).astype(f)
    probe = {"tokens": b["tokens"], "mask": b["mask"], "old_log_probs": np.zeros((B, T), dtype=f), "advantage": np.zeros((B, T), dtype=f),
             "prompt": b["prompt"], "attention_mask": b["attention_mask"]}
    z = adapter.call("grpo_loss", probe, _params("GRPOLoss", {}, seed))["outputs"]["model_logits"]
    valid = b["mask"] | b["turns"]
    lp = oracle.token_logprobs(z.astype(np.float64), b["tokens"], valid)
    garbage = rng.uniform(-3.0, 0.0, size=(B, T))
    old = np.where(valid, lp - _far_ratios(rng, (B, T)), garbage).astype(f)
    ref = np.where(valid, lp - rng.uniform(-0.6, 0.6, size=(B, T)), garbage).astype(f)
    return {**b, "z": z, "advantages": advantages, "old_logp": old, "ref_logp": ref, "seed": np.array(seed)}


def _params(loss: str, init: dict[str, Any], seed: int) -> dict[str, Any]:
    return {"loss": loss, "init": init, "actor": "tiny", "tiny": {"vocab": VOCAB, "hidden": HIDDEN, "seed": int(seed)},
            "backward": True}


def forward(adapter: TorchRLAdapter, batch: dict[str, np.ndarray], loss: str, init: dict[str, Any], mask: str) -> dict[str, Any]:
    """The loss ``forward`` and ``backward()`` in the worker: every output, the model's logits and their gradient."""
    arrays = {"tokens": batch["tokens"], "mask": batch[mask], "old_log_probs": batch["old_logp"],
              "advantage": np.broadcast_to(batch["advantages"][:, None], batch["mask"].shape).astype(np.float32),
              "ref_log_probs": batch["ref_logp"]}
    if init.get("masking_strategy", "sft") == "sft":
        arrays.update(prompt=batch["prompt"], attention_mask=batch["attention_mask"])
    out = adapter.call("grpo_loss", arrays, _params(loss, init, int(batch["seed"])))["outputs"]
    if not np.array_equal(out["model_logits"], batch["z"]):
        raise AssertionError("the tiny model's logits changed between two forwards")
    return out


def spec_loss(batch: dict[str, np.ndarray], mask: np.ndarray, policy: dict[str, Any], agg: dict[str, Any],
              entropy_coef: float, kl_coef: float = 0.0) -> dict[str, Any]:
    """The oracle's total loss and its gradient w.r.t. the logits ``z``: ``policy`` names the spec loss and its
    keywords (``ppo_token_loss`` / ``cispo_token_loss``; with ``kl_coef``, ``policy_loss``), plus
    ``entropy_bonus(token_entropy(z), mask, entropy_coef, **agg)``."""
    z = batch["z"].astype(np.float64)
    ids, A = batch["tokens"], batch["advantages"].astype(np.float64)
    old, ref = batch["old_logp"].astype(np.float64), batch["ref_logp"].astype(np.float64)
    lp = oracle.token_logprobs(z, ids, mask)
    H = oracle.token_entropy(z, mask)
    name, kw = policy["function"], policy["kwargs"]
    if name == "policy_loss":
        value = oracle.policy_loss(lp, old, ref, A, mask, **kw, kl_coef=kl_coef, **agg)
        up_lp = oracle.policy_loss_grad(lp, old, ref, A, mask, 1.0, **kw, kl_coef=kl_coef, **agg)
    else:
        token = getattr(oracle, name)(lp, old, A, mask, **kw)
        value = oracle.aggregate(token, mask, **agg)
        up_lp = getattr(oracle, f"{name}_grad")(lp, old, A, mask, oracle.aggregate_grad(token, mask, 1.0, **agg), **kw)
    value += oracle.entropy_bonus(H, mask, entropy_coef=entropy_coef, **agg)
    up_h = oracle.entropy_bonus_grad(H, mask, 1.0, entropy_coef=entropy_coef, **agg)
    grad = oracle.token_logprobs_grad(z, ids, mask, up_lp) + oracle.token_entropy_grad(z, mask, up_h)
    return {"value": value, "grad[logits]": grad}


def _tolerances() -> dict[str, Tol]:
    return {"value": tolerance("agg", DTYPE, "value"), "grad": tolerance("logprob.token", DTYPE, "grad")}


def loss_row(adapter: TorchRLAdapter, batch: dict[str, np.ndarray], seed: int, loss: str, init: dict[str, Any], *, mask: str = "mask",
             agg: dict[str, Any] | None = None, candidates: list[tuple[str, dict[str, Any], str | None]],
             kl_coef: float = 0.0, keep: np.ndarray | None = None, label: str | None = None, note: str = "") -> RowResult:
    """``loss(**init)``'s total (``loss_objective + loss_entropy [+ loss_kl_to_ref]``) and its gradient w.r.t. the
    logits, against ``candidates`` ((label, policy, preset): the first is canonical). ``keep``: the tokens the
    spec composition keeps (the KL-Mask); the policy and entropy terms are aggregated over ``mask & keep``."""
    m = batch[mask] if keep is None else batch[mask] & keep
    agg = agg or {"mode": "token_mean"}
    entropy_coef = init.get("entropy_coeff", 0.01) if init.get("entropy_bonus", True) else 0.0

    def got() -> dict[str, Any]:
        out = forward(adapter, batch, loss, init, mask)
        return {"value": np.reshape(out["total"], ()), "grad[logits]": out["grad_model_logits"]}

    cands = []
    for cand_label, policy, preset in candidates:
        def ev(policy: dict[str, Any] = policy) -> dict[str, Any]:
            return spec_loss(batch, m, policy, agg, entropy_coef, kl_coef)

        args = ", ".join(x for x in ("token_logprobs(z)", fmt({**policy["kwargs"], **({"kl_coef": kl_coef} if kl_coef else {})}),
                                     fmt(agg) if policy["function"] == "policy_loss" else "") if x)
        formula = (f"{policy['function']}({args})"
                   + ("" if policy["function"] == "policy_loss" else f" aggregated {fmt(agg)}")
                   + f" + entropy_bonus(token_entropy(z), entropy_coef={entropy_coef}, {fmt(agg)})")
        cands.append(Candidate(cand_label, formula, ev, preset=preset, kwargs=dict(policy["kwargs"]) if preset else {}))
    parts = [f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in init.items()]
    row_id = f"torchrl.{loss}" + (f"[{label or ','.join(parts)}]" if (label or parts) else "")
    return composition_row(row_id, "loss.ppo+agg+loss.entropy", f"torchrl.{loss}", adapter, got, cands, _tolerances(), seed=seed,
                           note=note)


def _ppo(**kw: Any) -> dict[str, Any]:
    return {"function": "ppo_token_loss", "kwargs": kw}


def clip_fraction_row(adapter: TorchRLAdapter, batch: dict[str, np.ndarray], seed: int) -> RowResult:
    """The ``clip_fraction`` GRPOLoss logs, against the token mean of the spec's ``ppo_clipped_mask``."""
    m = batch["mask"]
    lp = oracle.token_logprobs(batch["z"].astype(np.float64), batch["tokens"], m)
    old, A = batch["old_logp"].astype(np.float64), batch["advantages"].astype(np.float64)

    def got() -> dict[str, Any]:
        return {"value": forward(adapter, batch, "GRPOLoss", {}, "mask")["clip_fraction"]}

    def ev() -> dict[str, Any]:
        return {"value": oracle.aggregate(oracle.ppo_clipped_mask(lp, old, A, m).astype(np.float64), m, mode="token_mean")}

    cands = [Candidate("canonical", "aggregate(ppo_clipped_mask(token_logprobs(z), ...), mode='token_mean')", ev)]
    return composition_row("torchrl.GRPOLoss.clip_fraction", "metric.clip", "torchrl.GRPOLoss", adapter, got, cands,
                           {"value": tolerance("metric.clip", DTYPE, "value")}, seed=seed,
                           note="(torchrl: mean over all B*T positions, the prompt columns and padding included, of "
                                "|log r| outside the clip range whatever A's sign, grpo.py:778: the denominator is the bug "
                                "clip-fraction-counts-every-position, the sign the convention "
                                "clip-fraction-ignores-advantage-sign; see findings.toml)")


def loss_rows(adapter: TorchRLAdapter, seed: int) -> list[RowResult]:
    batch = loss_batch(adapter, seed)
    ppo = [("canonical", _ppo(), None)]
    z64 = batch["z"].astype(np.float64)
    lp = oracle.token_logprobs(z64, batch["tokens"], batch["mask"])
    keep = oracle.rollout_rejection_mask(lp, batch["old_logp"].astype(np.float64), batch["mask"], statistic="k2",
                                         hi=KL_MASK_THRESHOLD)
    torchrl_cispo = preset_kwargs("torchrl", "cispo_token_loss")
    return [
        loss_row(adapter, batch, seed, "GRPOLoss", {}, candidates=ppo),
        loss_row(adapter, batch, seed, "DAPO", {"clip_epsilon": [0.2, 0.28]},
                 candidates=[("canonical", _ppo(eps_high=0.28), None)]),
        loss_row(adapter, batch, seed, "CISPOLoss", {},
                 candidates=[("canonical", {"function": "cispo_token_loss", "kwargs": {}}, None),
                             (fmt(torchrl_cispo), {"function": "cispo_token_loss", "kwargs": torchrl_cispo}, "torchrl")]),
        loss_row(adapter, batch, seed, "GRPOLoss", {"aggregation": "prompt_mean"}, agg={"mode": "seq_mean_token_mean"},
                 candidates=ppo),
        loss_row(adapter, batch, seed, "GRPOLoss", {"masking_strategy": "rlhf"}, mask="turns", candidates=ppo),
        loss_row(adapter, batch, seed, "GRPOLoss", {"kl_to_ref_coeff": KL_COEF}, kl_coef=KL_COEF,
                 candidates=[("canonical", {"function": "policy_loss", "kwargs": {}}, None)]),
        loss_row(adapter, batch, seed, "GRPOLoss", {"kl_mask_threshold": KL_MASK_THRESHOLD}, keep=keep, candidates=ppo,
                 note=f"(both terms over mask & keep, keep = rollout_rejection_mask(logp, old_logp, mask, statistic='k2', "
                      f"hi={KL_MASK_THRESHOLD}): {int((batch['mask'] & ~keep).sum())} of {int(batch['mask'].sum())} tokens dropped)"),
        clip_fraction_row(adapter, batch, seed),
    ]


def extra_rows(adapter: TorchRLAdapter, seed: int = 0) -> list[RowResult]:
    return value_rows(adapter, seed) + mc_advantage_rows(adapter, seed) + loss_rows(adapter, seed)


__all__ = ["LAMBDA_ZERO", "extra_rows", "forward", "layout", "loss_batch", "spec_loss"]
