"""Input generators for every quantity: realistic RL batches, built from one integer seed.

A generator takes a `numpy.random.Generator` and returns a `Case`: the positional arguments in the
order of the spec function, the keyword arguments, and which arguments carry a gradient. Everything
about a case (shapes, padding side, ties, extremes) comes from the seed, so `(spec id, function,
seed)` reproduces it exactly; Hypothesis drives the seeds (`strategy`) and pins regressions with
`@example(seed)`.

What the generators produce, on purpose:
- ragged masks with left and right padding, prompt tokens before the completion, rows with no valid
  token, single-token completions, multi-turn gaps (a masked tool token inside a completion);
- pad == eos rows (padding holds the EOS id; the mask still comes from positions) and rows with no
  EOS (truncated);
- logits up to +-30, temperatures other than 1;
- old / reference log-probs near (on-policy noise) and far (several nats) from the current ones;
- groups with ties, all-equal groups, size-1 groups, rewards with a large offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
EOS_ID = 0


@dataclass
class Case:
    """One input of one quantity: positional args (in order), keyword args, gradient arguments."""

    function: str
    args: dict[str, Any]
    kwargs: dict[str, Any]
    grad_args: tuple[str, ...] = ()
    seed: int | None = None
    note: str = ""
    upstream_seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def shapes(self) -> str:
        parts = []
        for name, value in self.args.items():
            if isinstance(value, np.ndarray):
                parts.append(f"{name}={list(value.shape)}")
            else:
                parts.append(f"{name}={value!r}")
        return ", ".join(parts)


def is_float_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def round_to(value: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values that an array takes once stored in `dtype` (round to nearest even)."""
    array = np.asarray(value, dtype=np.float64)
    return torch.tensor(array).to(TORCH_DTYPES[dtype]).to(torch.float64).numpy().reshape(array.shape)


def rounded_args(case: Case, dtype: str) -> dict[str, Any]:
    """Float arrays rounded to `dtype` and held in float64: what the oracle sees."""
    return {k: round_to(v, dtype) if is_float_array(v) else v for k, v in case.args.items()}


def torch_args(rounded: dict[str, Any], dtype: str, grad_args: tuple[str, ...]) -> dict[str, Any]:
    """The same rounded values as torch tensors of `dtype` (what a torch implementation sees)."""
    out: dict[str, Any] = {}
    for name, value in rounded.items():
        if is_float_array(value):
            t = torch.tensor(value, dtype=TORCH_DTYPES[dtype])
            out[name] = t.requires_grad_(name in grad_args)
        elif isinstance(value, np.ndarray):
            out[name] = torch.from_numpy(value.copy())
        else:
            out[name] = value
    return out


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


def ragged_mask(rng: np.random.Generator, B: int, T: int, *, empty_rows: bool = True) -> np.ndarray:
    """[B, T] completion mask: per row a left- or right-padded [prompt | completion] span."""
    mask = np.zeros((B, T), dtype=bool)
    for b in range(B):
        length = int(rng.integers(2, T + 1)) if T >= 2 else 1
        start = T - length if rng.random() < 0.5 else 0  # left padding puts content at the end
        prompt = int(rng.integers(1, length)) if length >= 2 else 1
        completion = length - prompt
        if empty_rows and rng.random() < 0.08:
            completion = 0
        mask[b, start + prompt : start + prompt + completion] = True
        span = np.flatnonzero(mask[b])
        if span.size >= 3 and rng.random() < 0.2:  # a masked tool token inside the completion
            mask[b, int(rng.choice(span[1:-1]))] = False
    if not empty_rows and not mask.any():
        mask[:, -1] = True
    return mask


def token_ids(rng: np.random.Generator, mask: np.ndarray, V: int) -> np.ndarray:
    """Token ids; some rows end with EOS and pad with EOS (pad == eos), others are truncated."""
    ids = rng.integers(0, V, size=mask.shape).astype(np.int64)
    for b in range(mask.shape[0]):
        valid = np.flatnonzero(mask[b])
        if valid.size and rng.random() < 0.5:
            last = int(valid[-1])
            ids[b, last] = EOS_ID
            ids[b, last + 1 :] = EOS_ID  # right padding with the EOS id
    return ids


def logits_like(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    scale = float(rng.choice([0.5, 2.0, 6.0, 15.0]))
    z = rng.normal(0.0, scale, size=shape)
    if rng.random() < 0.3:  # one very confident prediction per row
        z[..., int(rng.integers(0, shape[-1]))] += float(rng.choice([-30.0, 30.0]))
    return np.clip(z, -30.0, 30.0)


def logprobs_like(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return -np.abs(rng.normal(0.0, float(rng.choice([0.3, 1.5, 4.0])), size=shape)) - 1e-3


def nearby(rng: np.random.Generator, logp: np.ndarray) -> np.ndarray:
    """Old or reference log-probs near (on-policy noise) or far from `logp`."""
    scale = float(rng.choice([0.0, 0.02, 0.1, 0.4, 2.0]))
    return logp + rng.normal(0.0, scale, size=logp.shape)


def advantages_like(rng: np.random.Generator, B: int, T: int) -> np.ndarray:
    if rng.random() < 0.5:
        return rng.normal(0.0, 1.0, size=B)
    return rng.normal(0.0, 1.0, size=(B, T))


def group_rewards(rng: np.random.Generator, B: int, G: int) -> np.ndarray:
    kind = rng.choice(["binary", "integer", "continuous", "offset"])
    if kind == "binary":
        r = rng.integers(0, 2, size=B).astype(np.float64)
    elif kind == "integer":
        r = rng.integers(0, 4, size=B).astype(np.float64)
    elif kind == "continuous":
        r = rng.normal(0.0, 1.0, size=B)
    else:
        r = 10.0 + rng.integers(0, 4, size=B)
    for g in range(B // G):
        if rng.random() < 0.25:  # an all-equal group
            r[g * G : (g + 1) * G] = r[g * G]
    return r


def batch_dims(rng: np.random.Generator, max_B: int = 5, max_T: int = 10) -> tuple[int, int]:
    return int(rng.integers(1, max_B + 1)), int(rng.integers(2, max_T + 1))


def group_dims(rng: np.random.Generator) -> tuple[int, int]:
    G = int(rng.choice([1, 2, 3, 4, 8]))
    return G * int(rng.integers(1, 4)), G


def temperature(rng: np.random.Generator) -> float:
    return float(rng.choice([1.0, 1.0, 0.5, 0.7, 1.3]))


# ---------------------------------------------------------------------------------------------
# One generator per function
# ---------------------------------------------------------------------------------------------


def case_token_logprobs(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    mask = ragged_mask(rng, B, T)
    return Case(
        "token_logprobs",
        {"logits": logits_like(rng, (B, T, V)), "input_ids": token_ids(rng, mask, V), "mask": mask},
        {"temperature": temperature(rng)},
        grad_args=("logits",),
    )


def case_token_entropy(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 13))
    mask = ragged_mask(rng, B, T)
    return Case(
        "token_entropy",
        {"logits": logits_like(rng, (B, T, V)), "mask": mask},
        {"temperature": temperature(rng)},
        grad_args=("logits",),
    )


def _hidden_case(rng: np.random.Generator) -> tuple[dict[str, Any], np.ndarray]:
    B, T = batch_dims(rng)
    V = int(rng.integers(2, 40))
    D = int(rng.integers(1, 9))
    mask = ragged_mask(rng, B, T)
    hidden = rng.normal(0.0, 1.0, size=(B, T, D))
    weight = rng.normal(0.0, float(rng.choice([0.5, 2.0])), size=(V, D))
    return {"hidden": hidden, "weight": weight}, mask


def case_token_logprobs_from_hidden(rng: np.random.Generator) -> Case:
    arrays, mask = _hidden_case(rng)
    V = arrays["weight"].shape[0]
    return Case(
        "token_logprobs_from_hidden",
        {**arrays, "input_ids": token_ids(rng, mask, V), "mask": mask},
        {"temperature": temperature(rng)},
        grad_args=("hidden", "weight"),
    )


def case_token_entropy_from_hidden(rng: np.random.Generator) -> Case:
    arrays, mask = _hidden_case(rng)
    return Case(
        "token_entropy_from_hidden",
        {**arrays, "mask": mask},
        {"temperature": temperature(rng)},
        grad_args=("hidden", "weight"),
    )


def case_reinforce_advantages(rng: np.random.Generator) -> Case:
    B = int(rng.integers(1, 9))
    return Case(
        "reinforce_advantages",
        {"rewards": group_rewards(rng, B, 1)},
        {"baseline": str(rng.choice(["none", "batch_mean"]))},
    )


def case_rloo_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    return Case("rloo_advantages", {"rewards": group_rewards(rng, B, G), "group_size": G}, {})


def case_grpo_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    return Case(
        "grpo_advantages",
        {"rewards": group_rewards(rng, B, G), "group_size": G},
        {
            "scale": str(rng.choice(["group", "batch", "none"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-9, 1e-6, 1e-4])),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def case_rlhf_token_rewards(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return Case(
        "rlhf_token_rewards",
        {
            "scores": rng.normal(0.0, 2.0, size=B),
            "logp": logp,
            "ref_logp": nearby(rng, logp),
            "mask": mask,
        },
        {
            "kl_coef": float(rng.choice([0.0, 0.01, 0.05, 0.5])),
            "estimator": str(rng.choice(["k1", "k2", "k3"])),
        },
    )


def case_gae(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng, max_T=16)
    mask = ragged_mask(rng, B, T)
    return Case(
        "gae",
        {
            "token_rewards": rng.normal(0.0, 1.0, size=(B, T)),
            "values": rng.normal(0.0, 2.0, size=(B, T)),
            "mask": mask,
        },
        {
            "gamma": float(rng.choice([1.0, 0.99, 0.9])),
            "lam": float(rng.choice([1.0, 0.95, 0.5, 0.0])),
        },
    )


def case_whiten(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return Case(
        "whiten",
        {"x": rng.normal(float(rng.choice([0.0, 5.0])), 2.0, size=(B, T)), "mask": mask},
        {
            "shift_mean": bool(rng.random() < 0.7),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6])),
        },
    )


def case_kl_penalty(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return Case(
        "kl_penalty",
        {"logp": logp, "ref_logp": nearby(rng, logp), "mask": mask},
        {
            "estimator": str(rng.choice(["k1", "k2", "k3"])),
            "log_ratio_clamp": rng.choice([None, 20.0, 1.0]),
            "clamp": rng.choice([None, 10.0, 0.5]),
        },
        grad_args=("logp",),
    )


def case_pg_token_loss(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return Case(
        "pg_token_loss",
        {"logp": logprobs_like(rng, (B, T)), "advantages": advantages_like(rng, B, T), "mask": mask},
        {},
        grad_args=("logp",),
    )


def _policy_args(rng: np.random.Generator) -> dict[str, Any]:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return {
        "logp": logp,
        "old_logp": nearby(rng, logp),
        "advantages": advantages_like(rng, B, T),
        "mask": mask,
    }


def case_ppo_token_loss(rng: np.random.Generator) -> Case:
    eps_low = float(rng.choice([0.2, 0.1]))
    return Case(
        "ppo_token_loss",
        _policy_args(rng),
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
        grad_args=("logp",),
    )


def case_gspo_token_loss(rng: np.random.Generator) -> Case:
    eps = [(3e-4, 4e-4), (0.2, 0.2), (0.05, 0.1)][int(rng.integers(0, 3))]
    return Case(
        "gspo_token_loss",
        _policy_args(rng),
        {"eps_low": eps[0], "eps_high": eps[1], "form": str(rng.choice(["sequence", "token_sg"]))},
        grad_args=("logp",),
    )


def case_cispo_token_loss(rng: np.random.Generator) -> Case:
    bound = str(rng.choice(["relative", "absolute"]))
    return Case(
        "cispo_token_loss",
        _policy_args(rng),
        {
            "eps_low": rng.choice([None, 0.2]),
            "eps_high": float(rng.choice([0.28, 2.0])) if bound == "relative" else 5.0,
            "bound": bound,
        },
        grad_args=("logp",),
    )


def case_value_token_loss(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    values = rng.normal(0.0, 2.0, size=(B, T))
    return Case(
        "value_token_loss",
        {
            "values": values,
            "old_values": values + rng.normal(0.0, float(rng.choice([0.0, 0.1, 1.0])), size=(B, T)),
            "returns": rng.normal(0.0, 2.0, size=(B, T)),
            "mask": mask,
        },
        {"clip": rng.choice([None, 0.2, 0.5])},
        grad_args=("values",),
    )


AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")


def case_aggregate(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {"mode": mode}
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([T, 16, 4096]))
    return Case(
        "aggregate",
        {"token_loss": rng.normal(0.0, 1.0, size=(B, T)), "mask": mask},
        kwargs,
        grad_args=("token_loss",),
    )


def case_ppo_clipped_mask(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    # log-ratios on both sides of every clip boundary, up to ratios beyond a dual clip of 3
    old_logp = logp + rng.normal(0.0, float(rng.choice([0.1, 0.3, 0.8, 1.5])), size=(B, T))
    args = {"logp": logp, "old_logp": old_logp, "advantages": advantages_like(rng, B, T), "mask": mask}
    eps_low = float(rng.choice([0.2, 0.1]))
    return Case(
        "ppo_clipped_mask",
        args,
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
    )


def case_policy_loss(rng: np.random.Generator) -> Case:
    args = _policy_args(rng)
    mask = args.pop("mask")
    advantages = args.pop("advantages")
    args["ref_logp"] = nearby(rng, args["logp"])
    args["advantages"] = advantages
    args["mask"] = mask
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {
        "eps_low": 0.2,
        "eps_high": float(rng.choice([0.2, 0.28])),
        "dual_clip": rng.choice([None, 3.0]),
        "kl_coef": float(rng.choice([0.0, 0.04, 0.1, 1.0])),
        "kl_estimator": str(rng.choice(["k1", "k2", "k3"])),
        "mode": mode,
    }
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([mask.shape[1], 16]))
    return Case("policy_loss", args, kwargs, grad_args=("logp",))


# ---------------------------------------------------------------------------------------------
# Spec v1.1: policy losses of 2025-26 (api.md "Spec v1.1: policy losses")
# ---------------------------------------------------------------------------------------------


def case_sapo_token_loss(rng: np.random.Generator) -> Case:
    return Case(
        "sapo_token_loss",
        _policy_args(rng),
        {
            "tau_pos": float(rng.choice([1.0, 0.5, 2.0])),
            "tau_neg": float(rng.choice([1.05, 1.0, 3.0])),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
        grad_args=("logp",),
    )


def case_gmpo_token_loss(rng: np.random.Generator) -> Case:
    eps = [(0.4, 0.4), (0.2, 0.2), (0.2, 0.3)][int(rng.integers(0, 3))]
    return Case("gmpo_token_loss", _policy_args(rng), {"eps_low": eps[0], "eps_high": eps[1]}, grad_args=("logp",))


def case_dppo_token_loss(rng: np.random.Generator) -> Case:
    return Case(
        "dppo_token_loss",
        _policy_args(rng),
        {
            "divergence": str(rng.choice(["tv", "kl"])),
            "delta_low": float(rng.choice([0.2, 0.05, 0.5])),
            "delta_high": float(rng.choice([0.2, 0.05, 0.5])),
            "ratio_cap": rng.choice([None, 3.0, 20.0]),
            "log_ratio_clamp": rng.choice([None, 20.0]),
        },
        grad_args=("logp",),
    )


def case_vespo_token_loss(rng: np.random.Generator) -> Case:
    return Case(
        "vespo_token_loss",
        _policy_args(rng),
        {
            "k_pos": float(rng.choice([2.0, 1.0])),
            "lambda_pos": float(rng.choice([3.0, 1.5])),
            "k_neg": float(rng.choice([3.0, 0.5])),
            "lambda_neg": float(rng.choice([2.0, 4.0])),
        },
        grad_args=("logp",),
    )


def case_dro_token_loss(rng: np.random.Generator) -> Case:
    return Case("dro_token_loss", _policy_args(rng), {"beta": float(rng.choice([0.01, 0.1, 1.0]))}, grad_args=("logp",))


# ---------------------------------------------------------------------------------------------
# Spec v1.1: advantage estimators (api.md "Spec v1.1: advantage estimators"). Groups of every size
# (pass@k: >= 2) with ties, all-equal groups, zero rewards (GPG counts them) and offsets; ragged masks
# with tool gaps and empty rows for the per-token estimators.
# ---------------------------------------------------------------------------------------------


def _outcome_token_rewards(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """[B, T] rewards: a score on each row's last valid token and, half the time, a dense per-token
    term (a KL reward); masked positions hold finite garbage."""
    B, T = mask.shape
    r = rng.normal(0.0, float(rng.choice([0.05, 0.5])), size=(B, T)) if rng.random() < 0.5 else np.zeros((B, T))
    for b in range(B):
        valid = np.flatnonzero(mask[b])
        if valid.size:
            r[b, valid[-1]] += float(rng.choice([0.0, 1.0, -1.0, rng.normal(0.0, 2.0)]))
    return np.where(mask, r, rng.uniform(-3.0, 3.0, size=(B, T)))


def case_reinforce_pp_advantages(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng, max_T=12)
    mask = ragged_mask(rng, B, T)
    return Case(
        "reinforce_pp_advantages",
        {"token_rewards": _outcome_token_rewards(rng, mask), "mask": mask},
        {
            "gamma": float(rng.choice([1.0, 0.99, 0.9, 0.5])),
            "gap": str(rng.choice(["skip", "reset", "discount"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6])),
        },
    )


def case_reinforce_pp_baseline_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    T = int(rng.integers(2, 9))
    mask = ragged_mask(rng, B, T)
    return Case(
        "reinforce_pp_baseline_advantages",
        {"rewards": group_rewards(rng, B, G), "group_size": G, "mask": mask},
        {
            "level": str(rng.choice(["token", "sequence"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([1e-8, 1e-6, 1e-4])),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def case_remax_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    rewards = group_rewards(rng, B, G)
    greedy = np.array([float(rng.choice(rewards[g * G:(g + 1) * G])) if rng.random() < 0.5 else float(rng.normal(0.0, 1.0))
                       for g in range(B // G)])
    return Case("remax_advantages", {"rewards": rewards, "greedy_rewards": greedy, "group_size": G}, {})


def case_opo_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    T = int(rng.integers(2, 10))
    mask = ragged_mask(rng, B, T)
    if rng.random() < 0.3:  # a group whose rows have no valid token (its baseline would be 0/0)
        g = int(rng.integers(0, B // G))
        mask[g * G:(g + 1) * G] = False
    return Case("opo_advantages", {"rewards": group_rewards(rng, B, G), "group_size": G, "mask": mask},
                {"singleton": str(rng.choice(["zero", "raw"]))})


def case_grpo_passk_advantages(rng: np.random.Generator) -> Case:
    G = int(rng.choice([2, 3, 4, 8]))
    B = G * int(rng.integers(1, 4))
    return Case(
        "grpo_passk_advantages",
        {"rewards": group_rewards(rng, B, G), "group_size": G},
        {
            "scale": str(rng.choice(["group", "none"])),
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-9, 1e-6, 1e-4])),
        },
    )


def case_gdpo_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    K = int(rng.integers(1, 4))
    rewards = np.stack([group_rewards(rng, B, G) for _ in range(K)], axis=1)
    weights = None if rng.random() < 0.4 else [float(rng.choice([1.0, 0.5, 2.0, -1.0])) for _ in range(K)]
    return Case(
        "gdpo_advantages",
        {"rewards": rewards, "group_size": G},
        {
            "reward_weights": weights,
            "std_ddof": int(rng.choice([0, 1])),
            "eps": float(rng.choice([0.0, 1e-8, 1e-6, 1e-4])),
            "batch_normalize": bool(rng.random() < 0.7),
            "singleton": str(rng.choice(["zero", "raw"])),
        },
    )


def case_maxrl_advantages(rng: np.random.Generator) -> Case:
    """Success-rate rewards in [0, 1] (binary, graded or continuous): the group mean is a pass rate."""
    B, G = group_dims(rng)
    kind = rng.choice(["binary", "graded", "continuous"])
    if kind == "binary":
        r = rng.integers(0, 2, size=B).astype(np.float64)
    elif kind == "graded":
        r = rng.integers(0, 5, size=B) / 4.0
    else:
        r = rng.uniform(0.0, 1.0, size=B)
    for g in range(B // G):
        if rng.random() < 0.25:
            r[g * G:(g + 1) * G] = r[g * G]
    return Case("maxrl_advantages", {"rewards": r, "group_size": G},
                {"eps": float(rng.choice([1e-6, 1e-8, 1e-4])), "singleton": str(rng.choice(["zero", "raw"]))})


def case_gpg_advantages(rng: np.random.Generator) -> Case:
    B, G = group_dims(rng)
    return Case("gpg_advantages", {"rewards": group_rewards(rng, B, G), "group_size": G},
                {"singleton": str(rng.choice(["zero", "raw"]))})


def _group_completions(rng: np.random.Generator, B: int, G: int, T: int) -> np.ndarray:
    """[B, T] mask: each group's completions start at one column (its shared prompt), with lengths from
    empty to the whole width, ties for the longest at times and masked tool tokens inside."""
    mask = np.zeros((B, T), dtype=bool)
    for g in range(B // G):
        start = int(rng.integers(1, max(T // 2, 1) + 1))
        lengths = rng.integers(0, T - start + 1, size=G)
        if rng.random() < 0.25:  # a tie for the longest completion: no zero tail
            lengths[int(rng.integers(0, G))] = lengths.max()
        for i, length in enumerate(lengths):
            b = g * G + i
            mask[b, start:start + int(length)] = True
            span = np.flatnonzero(mask[b])
            if span.size >= 3 and rng.random() < 0.3:  # a tool observation inside the completion
                mask[b, int(rng.choice(span[1:-1]))] = False
    return mask


def case_optimal_token_baseline_advantages(rng: np.random.Generator) -> Case:
    """Groups whose completions start together (one prompt each) or ragged masks (any padding), tool
    gaps and empty rows; outcome scores (all-equal groups at times) with or without dense rewards; sampled
    tokens from confident to flat (Σπ² = π² + f·(1 - π)², f in [0, 1], the range a real distribution
    allows, so w = (1 + f)·(1 - π)²); rollout IS weights of 1, truncated at 2, or with zeros; finite
    garbage at masked positions."""
    B, G = group_dims(rng)
    T = int(rng.integers(2, 10))
    mask = _group_completions(rng, B, G, T) if rng.random() < 0.6 else ragged_mask(rng, B, T)
    scores = group_rewards(rng, B, G)
    rewards = _outcome_token_rewards(rng, mask)
    for b in range(B):  # the group's scores on each row's last valid token
        valid = np.flatnonzero(mask[b])
        if valid.size:
            rewards[b, valid[-1]] = scores[b] + (rewards[b, valid[-1]] if rng.random() < 0.3 else 0.0)
    old_logp = logprobs_like(rng, (B, T))
    pi = np.exp(old_logp)
    spread = rng.choice([0.0, 1.0, 0.5]) if rng.random() < 0.3 else rng.uniform(0.0, 1.0, size=(B, T))
    sum_pi_squared = pi**2 + spread * (1.0 - pi) ** 2
    kind = rng.choice(["ones", "truncated", "masked"])
    weights = np.ones((B, T)) if kind == "ones" else np.minimum(np.exp(rng.normal(0.0, 0.4, size=(B, T))), 2.0)
    if kind == "masked":
        weights = np.where(rng.random((B, T)) < 0.2, 0.0, weights)
    garbage = rng.uniform(-3.0, 3.0, size=(3, B, T))
    return Case(
        "optimal_token_baseline_advantages",
        {"token_rewards": rewards, "mask": mask, "group_size": G, "old_logp": np.where(mask, old_logp, garbage[0]),
         "sum_pi_squared": np.where(mask, sum_pi_squared, garbage[1]), "is_weights": np.where(mask, weights, garbage[2])},
        {
            "align": str(rng.choice(["position", "valid_token"])),
            "zero_tail": bool(rng.random() < 0.7),
            "tail_length": str(rng.choice(["extent", "count"])),
            "eps": float(rng.choice([0.0, 1e-8, 1e-3])),
        },
    )


# ---------------------------------------------------------------------------------------------
# Spec v1.1: reward shaping before the advantage (api.md "Spec v1.1: reward shaping")
# ---------------------------------------------------------------------------------------------


def case_overlong_penalty(rng: np.random.Generator) -> Case:
    """Completion lengths on and next to both boundaries (L_start = max_length - buffer and
    max_length), empty completions and lengths beyond max_length (where the frameworks disagree);
    buffers of 0 (a hard step) up to max_length (the penalty from the first token)."""
    max_length = int(rng.choice([4, 8, 16, 100]))
    buffer = int(rng.choice([0, 1, max_length // 4, max_length // 2, max_length]))
    start = max_length - buffer
    near = [0, start - 1, start, start + 1, max_length - 1, max_length, max_length + 1, max_length + buffer + 2]
    B = int(rng.integers(1, 9))
    lengths = [int(rng.choice(near)) if rng.random() < 0.7 else int(rng.integers(0, max_length + buffer + 4)) for _ in range(B)]
    return Case(
        "overlong_penalty",
        {"lengths": np.maximum(np.array(lengths, dtype=np.int64), 0)},
        {
            "max_length": max_length,
            "buffer": buffer,
            "factor": float(rng.choice([1.0, 0.5, 2.0, 0.3])),  # 0.3: not exact in float32
            "beyond": "linear" if buffer > 0 and rng.random() < 0.3 else "floor",
        },
    )


def case_shaped_rewards(rng: np.random.Generator) -> Case:
    """Rewards of several scales (some beyond the ±10 / ±20 clip ranges) or binary, truncated rows
    (no EOS: finish_reason 'length'), one truncation rule and one clip range per case."""
    B = int(rng.integers(1, 9))
    if rng.random() < 0.3:
        rewards = rng.integers(0, 2, size=B).astype(np.float64)
    else:
        rewards = rng.normal(0.0, float(rng.choice([1.0, 5.0, 25.0])), size=B)
    truncated = rng.random(B) < float(rng.choice([0.0, 0.3, 0.7, 1.0]))
    rule = str(rng.choice(["none", "scale", "value", "value_shift", "shift"]))
    kwargs: dict[str, Any] = {"truncated_scale": 1.0, "truncated_value": None, "truncated_shift": 0.0}
    if rule == "scale":
        kwargs["truncated_scale"] = float(rng.choice([0.0, 0.5]))
    if rule in ("value", "value_shift"):
        kwargs["truncated_value"] = float(rng.choice([-1.0, -0.5, 0.0]))
    if rule in ("value_shift", "shift"):
        kwargs["truncated_shift"] = float(rng.choice([-1.0, -0.5]))
    lo, hi = [(None, None), (-10.0, 10.0), (-20.0, 20.0), (-1.0, 1.0), (None, 1.0), (-1.0, None)][int(rng.integers(0, 6))]
    kwargs.update(clip_low=lo, clip_high=hi)
    return Case("shaped_rewards", {"rewards": rewards, "truncated": truncated}, kwargs)


def case_kl_loss_term(rng: np.random.Generator) -> Case:
    """kl.loss (spec v1.1): reference and old log-probs near or far (ratios beyond the weight cap),
    every estimator and gradient form; old_logp always given, so one case can be judged under each form."""
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return Case(
        "kl_loss_term",
        {"logp": logp, "ref_logp": nearby(rng, logp), "mask": mask, "old_logp": nearby(rng, logp)},
        {
            "estimator": str(rng.choice(["k1", "k2", "k3", "abs"])),
            "gradient": str(rng.choice(["estimator", "straight_through", "unbiased", "bias_corrected"])),
            "log_ratio_clamp": rng.choice([None, 20.0, 1.0]),
            "clamp": rng.choice([None, 10.0, 0.5]),
            "weight_cap": rng.choice([10.0, None, 2.0]),
        },
        grad_args=("logp",),
    )


# ---------------------------------------------------------------------------------------------
# Spec v1.1: covariance-selected tokens (api.md "Spec v1.1: covariance-selected tokens"). Advantages
# scaled up at times so that covariances (A − Ā)·(logp − l̄) reach Clip-Cov's default window (1, 5);
# fractions from verl's 2e-4 (n = 1) to every token.
# ---------------------------------------------------------------------------------------------


def _covariance_args(rng: np.random.Generator) -> dict[str, Any]:
    args = _policy_args(rng)
    args["advantages"] = args["advantages"] * float(rng.choice([1.0, 3.0]))
    return args


def case_clip_cov_mask(rng: np.random.Generator) -> Case:
    args = _covariance_args(rng)
    args["draws"] = rng.random(args["mask"].shape)
    cov_low, cov_high = [(1.0, 5.0), (0.05, 2.0), (-1.0, 1.0), (0.2, 50.0)][int(rng.integers(0, 4))]
    eps_low = float(rng.choice([0.2, 0.1]))
    return Case(
        "clip_cov_mask",
        args,
        {
            "fraction": float(rng.choice([2e-4, 0.2, 0.5, 1.0])),
            "cov_low": cov_low,
            "cov_high": cov_high,
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
        },
    )


def case_kl_cov_token_loss(rng: np.random.Generator) -> Case:
    return Case(
        "kl_cov_token_loss",
        _covariance_args(rng),
        {"fraction": float(rng.choice([2e-4, 0.1, 0.25, 0.5, 1.0])), "coef": float(rng.choice([0.1, 1.0, 2.5]))},
        grad_args=("logp",),
    )


# ---------------------------------------------------------------------------------------------
# Spec v1.1: entropy terms and coefficient controllers (api.md "Spec v1.1: entropy terms and
# coefficient controllers")
# ---------------------------------------------------------------------------------------------


def token_entropies(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Per-token entropies as a policy gives them: mostly near 0 (confident tokens), a few high ones,
    capped at log V; half the time on a grid of 1/16 nat (ties, exact in every dtype)."""
    H = np.minimum(rng.exponential(float(rng.choice([0.1, 0.5, 2.0])), size=shape), np.log(32000.0))
    if rng.random() < 0.5:
        H = np.round(H * 16.0) / 16.0
    return H


def case_entropy_top_mask(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    return Case(
        "entropy_top_mask",
        {"entropy": token_entropies(rng, (B, T)), "mask": mask},
        {"rho": float(rng.choice([0.2, 0.5, 0.8, 0.05, 0.35, 1.0, 0.0]))},
    )


def case_entropy_bonus(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    mode = str(rng.choice(AGG_MODES))
    kwargs: dict[str, Any] = {"entropy_coef": float(rng.choice([0.01, 0.001, 0.1, 1.0, -0.01])), "mode": mode}
    if mode == "seq_mean_token_sum_norm":
        kwargs["norm_length"] = float(rng.choice([T, 16]))
    return Case("entropy_bonus", {"entropy": token_entropies(rng, (B, T)), "mask": mask}, kwargs,
                grad_args=("entropy",))


def case_kl_controller_update(rng: np.random.Generator) -> Case:
    """The measured KL near its target (inside the +-20% clip), far above or below it (clipped), or
    negative (a k1 estimate); n_steps from one sample to a horizon's worth."""
    target = float(rng.choice([0.1, 0.02, 6.0, 1.0]))
    kind = str(rng.choice(["near", "above", "below", "negative"]))
    ratio = {"near": rng.uniform(0.85, 1.15), "above": rng.uniform(1.3, 8.0), "below": rng.uniform(0.0, 0.7),
             "negative": -rng.uniform(0.0, 0.5)}[kind]
    return Case(
        "kl_controller_update",
        {"kl_coef": float(rng.choice([0.001, 0.01, 0.05, 0.2])), "current_kl": float(ratio * target),
         "n_steps": int(rng.choice([1, 64, 256, 1024, 8192]))},
        {"target": target, "horizon": int(rng.choice([10000, 1000, 100]))},
    )


def _entropy_control(rng: np.random.Generator) -> tuple[float, float]:
    """(target, measured entropy): the entropy below, above or exactly at the target."""
    target = float(rng.choice([0.2, 2.0, 5.0]))
    kind = str(rng.choice(["below", "above", "equal"]))
    H = {"below": target * rng.uniform(0.0, 0.95), "above": target * rng.uniform(1.05, 20.0), "equal": target}[kind]
    return target, float(H)


def case_entropy_coef_update(rng: np.random.Generator) -> Case:
    target, H = _entropy_control(rng)
    coef_min, coef_max = [(0.0, 1.0), (0.001, 0.05), (0.0, 0.01)][int(rng.integers(0, 3))]
    # inside the bounds, at a bound, or outside them (the clamp is one-sided)
    coef = float(rng.choice([0.0, coef_min, coef_max, 0.5 * (coef_min + coef_max), coef_max + 0.1, 0.003]))
    return Case(
        "entropy_coef_update",
        {"coef": coef, "current_entropy": H},
        {"target": target, "delta": float(rng.choice([0.005, 0.001, 0.05])), "coef_min": coef_min,
         "coef_max": coef_max},
    )


def case_entropy_coef_applied(rng: np.random.Generator) -> Case:
    target, H = _entropy_control(rng)
    if rng.random() < 0.2:  # the first step: nothing measured yet
        H = float("inf")
    return Case("entropy_coef_applied", {"coef": float(rng.choice([0.0, 0.005, 0.1, 1.0])), "last_entropy": H},
                {"target": target})


# ---------------------------------------------------------------------------------------------
# Spec v1.1: off-policy corrections (api.md "Spec v1.1"). Bounds always contain the on-policy value
# (ratio 1, log-ratio 0), so the on-policy invariant keeps every token with weight 1.
# ---------------------------------------------------------------------------------------------


def _mismatched(rng: np.random.Generator, logp: np.ndarray, scales: tuple[float, ...] = (0.05, 0.3, 1.0)) -> np.ndarray:
    """Another engine's or an older policy's log-probs of the same tokens: a training-inference
    mismatch or staleness large enough that bounds and caps are crossed in most batches."""
    return logp + rng.normal(0.0, float(rng.choice(scales)), size=logp.shape)


def _rollout_args(rng: np.random.Generator) -> dict[str, Any]:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    old_logp = logprobs_like(rng, (B, T))
    return {"old_logp": old_logp, "rollout_logp": _mismatched(rng, old_logp), "mask": mask}


def _ratio_bounds(rng: np.random.Generator) -> tuple[float | None, float | None]:
    return rng.choice([None, 0.5, 0.8]), rng.choice([None, 1.25, 2.0, 3.0, 5.0])


def case_rollout_is_weights(rng: np.random.Generator) -> Case:
    lo, hi = _ratio_bounds(rng)
    return Case(
        "rollout_is_weights",
        _rollout_args(rng),
        {
            "level": str(rng.choice(["token", "sequence"])),
            "seq_stat": str(rng.choice(["product", "geometric"])),
            "mode": str(rng.choice(["truncate", "mask", "none"])),
            "lo": lo,
            "hi": hi,
            "log_ratio_clamp": rng.choice([None, 20.0]),
            "batch_normalize": bool(rng.random() < 0.25),
        },
    )


def case_rollout_rejection_mask(rng: np.random.Generator) -> Case:
    statistic = str(rng.choice(["ratio", "k1", "k2", "k3"]))
    if statistic == "ratio":
        lo, hi = _ratio_bounds(rng)
    elif statistic == "k1":
        lo, hi = rng.choice([None, -0.5, -0.1]), rng.choice([None, 0.1, 0.5])
    else:  # k2, k3 >= 0
        lo, hi = None, rng.choice([None, 0.01, 0.1, 1.0])
    return Case(
        "rollout_rejection_mask",
        _rollout_args(rng),
        {
            "statistic": statistic,
            "level": str(rng.choice(["token", "seq_sum", "seq_mean", "seq_max", "seq_all"])),
            "lo": lo,
            "hi": hi,
            "kl_of": str(rng.choice(["rollout_old", "old_rollout"])),
        },
    )


def case_decoupled_ppo_token_loss(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    prox_logp = nearby(rng, logp)
    eps_low = float(rng.choice([0.2, 0.1]))
    return Case(
        "decoupled_ppo_token_loss",
        {"logp": logp, "prox_logp": prox_logp, "behav_logp": _mismatched(rng, prox_logp, (0.3, 1.0)),
         "advantages": advantages_like(rng, B, T), "mask": mask},
        {
            "eps_low": eps_low,
            "eps_high": float(rng.choice([eps_low, 0.28])),
            "dual_clip": rng.choice([None, 3.0]),
            "behav_cap": rng.choice([None, 2.0, 5.0]),
            "behav_mode": str(rng.choice(["truncate", "mask"])),
        },
        grad_args=("logp",),
    )


def case_proximal_logp_interpolation(rng: np.random.Generator) -> Case:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    version = int(rng.integers(1, 8))
    if rng.random() < 0.5:  # one version per row
        behav_version = rng.integers(0, version + 1, size=B).astype(np.int64)
    else:  # per token (partial rollouts span versions); prompt and padding hold -1, as in AReaL
        behav_version = np.where(mask, rng.integers(0, version + 1, size=(B, T)), -1).astype(np.int64)
    return Case(
        "proximal_logp_interpolation",
        {"logp": logp, "behav_logp": nearby(rng, logp), "behav_version": behav_version, "mask": mask},
        {"version": version, "method": str(rng.choice(["loglinear", "linear"]))},
    )


def case_corrected_policy_loss(rng: np.random.Generator) -> Case:
    """policy_loss's case plus constant rollout weights (some 0, as masked IS gives) and a keep mask
    that rejects some valid tokens (on-policy: the weights stay as drawn, so the on-policy check
    compares the composition, not its identity)."""
    base = case_policy_loss(rng)
    args = dict(base.args)
    mask = args.pop("mask")
    shape = mask.shape
    weights = np.exp(rng.normal(0.0, 0.3, size=shape))
    weights = np.where(rng.random(shape) < 0.15, 0.0, weights)
    keep = mask & (rng.random(shape) < float(rng.choice([1.0, 0.8, 0.5])))
    args.update({"is_weights": weights, "keep_mask": keep, "mask": mask})
    kwargs = {**base.kwargs, "weight_kl": bool(rng.random() < 0.3), "rejected": str(rng.choice(["drop", "zero"]))}
    return Case("corrected_policy_loss", args, kwargs, grad_args=("logp",))


def case_off_policy_sequence_mask(rng: np.random.Generator) -> Case:
    args = _policy_args(rng)
    return Case("off_policy_sequence_mask", args, {"threshold": float(rng.choice([0.0, 0.01, 0.1, 1.0]))})


GENERATORS: dict[str, Callable[[np.random.Generator], Case]] = {
    "token_logprobs": case_token_logprobs,
    "token_entropy": case_token_entropy,
    "token_logprobs_from_hidden": case_token_logprobs_from_hidden,
    "token_entropy_from_hidden": case_token_entropy_from_hidden,
    "reinforce_advantages": case_reinforce_advantages,
    "rloo_advantages": case_rloo_advantages,
    "grpo_advantages": case_grpo_advantages,
    "rlhf_token_rewards": case_rlhf_token_rewards,
    "gae": case_gae,
    "whiten": case_whiten,
    "kl_penalty": case_kl_penalty,
    "pg_token_loss": case_pg_token_loss,
    "ppo_token_loss": case_ppo_token_loss,
    "gspo_token_loss": case_gspo_token_loss,
    "cispo_token_loss": case_cispo_token_loss,
    "value_token_loss": case_value_token_loss,
    "aggregate": case_aggregate,
    "ppo_clipped_mask": case_ppo_clipped_mask,
    "policy_loss": case_policy_loss,
    "rollout_is_weights": case_rollout_is_weights,
    "rollout_rejection_mask": case_rollout_rejection_mask,
    "decoupled_ppo_token_loss": case_decoupled_ppo_token_loss,
    "proximal_logp_interpolation": case_proximal_logp_interpolation,
    "off_policy_sequence_mask": case_off_policy_sequence_mask,
    "corrected_policy_loss": case_corrected_policy_loss,
    "sapo_token_loss": case_sapo_token_loss,
    "gmpo_token_loss": case_gmpo_token_loss,
    "dppo_token_loss": case_dppo_token_loss,
    "dro_token_loss": case_dro_token_loss,
    "vespo_token_loss": case_vespo_token_loss,
    "reinforce_pp_advantages": case_reinforce_pp_advantages,
    "reinforce_pp_baseline_advantages": case_reinforce_pp_baseline_advantages,
    "remax_advantages": case_remax_advantages,
    "opo_advantages": case_opo_advantages,
    "grpo_passk_advantages": case_grpo_passk_advantages,
    "gdpo_advantages": case_gdpo_advantages,
    "maxrl_advantages": case_maxrl_advantages,
    "gpg_advantages": case_gpg_advantages,
    "optimal_token_baseline_advantages": case_optimal_token_baseline_advantages,
    "overlong_penalty": case_overlong_penalty,
    "shaped_rewards": case_shaped_rewards,
    "kl_loss_term": case_kl_loss_term,
    "clip_cov_mask": case_clip_cov_mask,
    "kl_cov_token_loss": case_kl_cov_token_loss,
    "entropy_top_mask": case_entropy_top_mask,
    "entropy_bonus": case_entropy_bonus,
    "kl_controller_update": case_kl_controller_update,
    "entropy_coef_update": case_entropy_coef_update,
    "entropy_coef_applied": case_entropy_coef_applied,
}


def make_case(function: str, seed: int) -> Case:
    """The case of `function` that `seed` names (the reproduction entry point)."""
    rng = np.random.default_rng(seed)
    case = GENERATORS[function](rng)
    case.seed = seed
    case.upstream_seed = int(rng.integers(0, 2**31 - 1))
    return case


SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def strategy(function: str) -> st.SearchStrategy[Case]:
    """Hypothesis strategy of cases of `function` (drawn through the seed)."""
    return SEEDS.map(lambda seed: make_case(function, seed))


# ---------------------------------------------------------------------------------------------
# Metamorphic transformations of a case
# ---------------------------------------------------------------------------------------------

POISON = (np.nan, np.inf, -np.inf, 1e30, -1e30)


def unused_positions(name: str, mask: np.ndarray) -> np.ndarray:
    """[B, T] positions of argument `name` that the spec says never matter.

    Token-aligned arrays are unused where the mask is False; `logits` / `hidden` row t predicts
    token t+1, so it is unused where mask[:, t+1] is False (and at the last position).
    """
    if name in ("logits", "hidden"):
        used = np.zeros_like(mask)
        used[:, :-1] = mask[:, 1:]
        return ~used
    return ~mask


def plant_masked(case: Case, seed: int) -> Case:
    """The same case with NaN, +-inf and +-1e30 written at every position that must not matter."""
    rng = np.random.default_rng(seed)
    mask = case.args.get("mask")
    if mask is None:
        return case
    args = dict(case.args)
    for name, value in case.args.items():
        if not is_float_array(value) or value.shape[:2] != mask.shape:
            continue
        unused = unused_positions(name, mask)
        poisoned = value.copy()
        picks = rng.integers(0, len(POISON), size=poisoned.shape)
        poison = np.asarray(POISON)[picks]
        where = unused.reshape(unused.shape + (1,) * (value.ndim - 2))
        poisoned = np.where(np.broadcast_to(where, value.shape), poison, poisoned)
        args[name] = poisoned
    return Case(case.function, args, dict(case.kwargs), case.grad_args, case.seed, "masked positions poisoned", case.upstream_seed)


def on_policy(case: Case) -> Case:
    """The same case with every other policy's log-probs equal to the current ones: old, reference,
    proximal and behaviour log-probs := logp; without a current policy, the rollout engine's :=
    the trainer's old log-probs (ratio 1: weight 1, nothing rejected)."""
    args = dict(case.args)
    current = "logp" if "logp" in args else "old_logp"
    for name in ("old_logp", "ref_logp", "prox_logp", "behav_logp", "rollout_logp"):
        if name in args and name != current:
            args[name] = args[current].copy()
    return Case(case.function, args, dict(case.kwargs), case.grad_args, case.seed, "on-policy", case.upstream_seed)
