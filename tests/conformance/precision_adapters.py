"""Adapters written the way a third party writes them, for frameworks rlspec does not ship: low
precision, partial, a preset computed in float32, and a real bug in float32. Loaded by
`module:attribute` path, `tests.conformance.precision_adapters:<factory>`, as a user's would be.

Each one wraps `refimpl` with exactly the numerical or semantic behaviour it stands for, so the
expected verdict is known by construction: the refimpl is conformant, and what is added on top is
what the verdict must name.
"""

from __future__ import annotations

import types

import torch

import refimpl

_DOWN = {torch.float64: torch.float32, torch.float32: torch.float32, torch.bfloat16: torch.bfloat16}


def _base(name: str, **functions: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, version="0.0-test", spec_version="v1", array_api="torch", **functions)


def _in_float32(fn):
    """`fn` computed in float32 whatever the input dtype (float64 inputs are rounded first, as
    torchrl does with gamma and SkyRL with its ratio), returned in the input dtype."""

    def wrapped(*args, **kwargs):
        floats = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
        dtype = floats[0].dtype
        cast = [a.to(_DOWN[a.dtype]) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        out = fn(*cast, **kwargs)
        return tuple(o.to(dtype) for o in out) if isinstance(out, tuple) else out.to(dtype)

    return wrapped


def float32_gae() -> types.SimpleNamespace:
    """GAE computed in float32 (gamma and lambda rounded to float32 too), returned in the input
    dtype: canonical semantics, float32 precision on float64 inputs."""

    def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):
        g, lam32 = float(torch.tensor(gamma, dtype=torch.float32)), float(torch.tensor(lam, dtype=torch.float32))
        return _in_float32(refimpl.gae)(token_rewards, values, mask, gamma=g, lam=lam32)

    return _base("float32_gae", gae=gae)


def float32_clamped_kl() -> types.SimpleNamespace:
    """SkyRL-style KL: k3 with the log-ratio clamped at +-20 and the estimate at +-10 (verl's
    preset), every estimator computed in float32."""

    def kl_penalty(logp, ref_logp, mask, *, estimator="k1"):
        kw = {"log_ratio_clamp": 20.0, "clamp": 10.0} if estimator == "k3" else {}
        return _in_float32(refimpl.kl_penalty)(logp, ref_logp, mask, estimator=estimator, **kw)

    return _base("float32_clamped_kl", kl_penalty=kl_penalty)


def bf16_softmax() -> types.SimpleNamespace:
    """TRL-style: the softmax of bfloat16 logits computed in bfloat16 (log_softmax of the bf16
    tensor, no upcast); float32 and float64 inputs are computed exactly. Declares why in
    `precision_notes`."""

    def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
        if logits.dtype != torch.bfloat16:
            return refimpl.token_logprobs(logits, input_ids, mask, temperature=temperature)
        z = torch.where(mask[:, 1:, None], logits[:, :-1], 0.0) / temperature
        lp = torch.log_softmax(z, dim=-1)  # in bfloat16
        ids = torch.where(mask[:, 1:], input_ids[:, 1:], 0)
        picked = torch.gather(lp, -1, ids.unsqueeze(-1)).squeeze(-1)
        out = torch.zeros(input_ids.shape, dtype=logits.dtype)
        out[:, 1:] = torch.where(mask[:, 1:], picked, torch.zeros((), dtype=logits.dtype))
        return out

    ns = _base("bf16_softmax", token_logprobs=token_logprobs)
    ns.precision_notes = {"token_logprobs": "softmax in bfloat16"}
    return ns


def _grpo_without_batch_scale(rewards, group_size, *, scale="group"):
    if scale == "batch":
        raise NotImplementedError("this framework normalises per group only")
    return refimpl.grpo_advantages(rewards, group_size, scale=scale)


def partial_grpo() -> types.SimpleNamespace:
    """grpo_advantages without scale='batch' (NotImplementedError), and aggregate without the
    seq_mean_token_sum mode declared in `unsupported_kwargs`."""
    ns = _base("partial_grpo", grpo_advantages=_grpo_without_batch_scale, aggregate=refimpl.aggregate)
    ns.unsupported_kwargs = {"aggregate": {"mode": ("seq_mean_token_sum",)}}
    return ns


def float32_no_temperature() -> types.SimpleNamespace:
    """A real bug in a float32 framework: log-probs recomputed without the temperature, in float32
    for every input dtype. The verdict must be a FAIL diagnosed as the known bug, at float32
    precision."""

    def token_logprobs(logits, input_ids, mask, *, temperature=1.0):
        return _in_float32(refimpl.token_logprobs)(logits, input_ids, mask, temperature=1.0)

    return _base("float32_no_temperature", token_logprobs=token_logprobs)


def float32_everything() -> types.SimpleNamespace:
    """Every quantity of the refimpl computed in float32 (a float32 framework handed float64):
    canonical semantics everywhere, float32 precision for float64 inputs, never a FAIL."""
    functions = {
        fn: _in_float32(getattr(refimpl, fn))
        for fn in ("grpo_advantages", "rloo_advantages", "ppo_token_loss", "cispo_token_loss", "whiten", "value_token_loss")
    }
    return _base("float32_everything", **functions)
