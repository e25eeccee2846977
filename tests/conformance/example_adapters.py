"""Adapters used by the conformance tests: a broken one, a partial one, misbehaving ones.

Loaded by `module:attribute` path (tests/ is on sys.path under pytest's rootdir conftest), like a
third-party adapter would be.
"""

from __future__ import annotations

import time
import types

import numpy as np
import torch

import oracle
import refimpl


def _base(name: str, **functions: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, version="0.0-test", spec_version="v1", array_api="torch", **functions)


def _logprobs_without_temperature(logits, input_ids, mask, *, temperature=1.0):
    """The classic bug: the sampler used softmax(z/T), the trainer scores softmax(z)."""
    return refimpl.token_logprobs(logits, input_ids, mask, temperature=1.0)


def broken() -> types.SimpleNamespace:
    """token_logprobs ignores the temperature; everything else is the refimpl."""
    functions = {fn: getattr(refimpl, fn) for fn in ("grpo_advantages", "rloo_advantages", "pg_token_loss")}
    return _base("broken", token_logprobs=_logprobs_without_temperature, **functions)


def partial() -> types.SimpleNamespace:
    """Only GRPO advantages."""
    return _base("partial", grpo_advantages=refimpl.grpo_advantages)


def _raises(*args, **kwargs):
    raise RuntimeError("adapter exploded")


def _hangs(*args, **kwargs):
    time.sleep(3600)


def _wrong_shape(rewards, group_size, **kwargs):
    return torch.zeros(rewards.shape[0] + 1, dtype=rewards.dtype)


def misbehaving() -> types.SimpleNamespace:
    """One function raises, one hangs, one returns the wrong shape."""
    return _base("misbehaving", rloo_advantages=_raises, reinforce_advantages=_hangs, grpo_advantages=_wrong_shape)


# ---------------------------------------------------------------------------------------------
# Contract breakers (tests/robustness/test_adapter_isolation.py): each gets a `fail` row that says why
# ---------------------------------------------------------------------------------------------


def _mutates_mask(logp, advantages, mask):
    """Clears the mask in place (a trainer that reuses its buffers), then computes correctly."""
    out = refimpl.pg_token_loss(logp, advantages, mask.clone())
    mask.zero_()
    return out


def _mutates_logp(logp, old_logp, advantages, mask, **kwargs):
    """Scales logp in place behind autograd's back (``.data``)."""
    out = refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)
    logp.data.mul_(2.0)
    return out


def _float64_output(rewards, group_size, **kwargs):
    """Upcasts: float64 advantages for float32 (and bfloat16) rewards."""
    return refimpl.grpo_advantages(rewards.double(), group_size, **kwargs)


def _int_output(rewards, group_size):
    """Returns an integer tensor."""
    return refimpl.rloo_advantages(rewards, group_size).round().long()


def _nan_output(rewards, *, baseline="none"):
    """NaN at a valid position (a 0/0 somewhere)."""
    out = refimpl.reinforce_advantages(rewards, baseline=baseline).clone()
    out[0] = float("nan")
    return out


def _returns_none(x, mask, **kwargs):
    return None


def contract_breakers() -> types.SimpleNamespace:
    """Mutates its inputs in place (mask, logp), upcasts, returns ints, NaN or None; entropy is fine."""
    return _base(
        "contract_breakers",
        pg_token_loss=_mutates_mask,
        ppo_token_loss=_mutates_logp,
        grpo_advantages=_float64_output,
        rloo_advantages=_int_output,
        reinforce_advantages=_nan_output,
        whiten=_returns_none,
        token_entropy=refimpl.token_entropy,
    )


def _numpy_mutates_mask(logp, advantages, mask):
    out = oracle.pg_token_loss(logp, advantages, np.array(mask, copy=True))
    mask[...] = False
    return out


def _numpy_kl_grad_zeroes_upstream(logp, ref_logp, mask, upstream, **kwargs):
    out = oracle.kl_penalty_grad(logp, ref_logp, mask, upstream, **kwargs)
    upstream *= 0.0
    return out


def numpy_contract_breakers() -> types.SimpleNamespace:
    """A NumPy adapter: pg_token_loss clears the mask in place; kl_penalty is the oracle's, but its
    gradient zeroes ``upstream`` in place."""
    ns = _base(
        "numpy_contract_breakers",
        pg_token_loss=_numpy_mutates_mask,
        kl_penalty=oracle.kl_penalty,
        kl_penalty_grad=_numpy_kl_grad_zeroes_upstream,
    )
    ns.array_api = "numpy"
    return ns


def _not_implemented(*args, **kwargs):
    raise NotImplementedError


def all_not_implemented() -> types.SimpleNamespace:
    """A fresh `rlspec new-adapter` skeleton: functions present, every one raising NotImplementedError."""
    return _base("all_not_implemented", grpo_advantages=_not_implemented, ppo_token_loss=_not_implemented)


def _pg_nonzero_at_masked(logp, advantages, mask):
    """The loss right at valid tokens, 1e-3 instead of 0 at masked ones (the spec's value there is 0)."""
    out = refimpl.pg_token_loss(logp, advantages, mask)
    return torch.where(mask, out, torch.full_like(out, 1e-3))


def nonzero_at_masked() -> types.SimpleNamespace:
    """pg_token_loss leaves 1e-3 at masked positions: every wrong element expects exactly 0."""
    return _base("nonzero_at_masked", pg_token_loss=_pg_nonzero_at_masked)


def with_framework_row() -> types.SimpleNamespace:
    """GRPO advantages (correct) and one framework-specific row (``extra_rows``) whose loss is the sum
    where the canonical composition is the token mean: a FAIL that only ``rlspec repro --row`` re-runs."""
    from conformance.runner.composite import Candidate, composition_row, loss_tolerances

    def extra_rows(seed: int) -> list:
        rng = np.random.default_rng(seed)
        ell = rng.normal(size=(2, 4))
        mask = np.array([[False, True, True, False], [False, True, True, True]])

        def got() -> dict:
            return {"value": float(ell[mask].sum())}

        canonical = Candidate("canonical", "aggregate(ell, mask, mode='token_mean')",
                              lambda: {"value": oracle.aggregate(ell, mask, mode="token_mean")})
        return [composition_row("with_framework_row.loss[sum]", "agg", "aggregate", adapter, got, [canonical],
                                loss_tolerances("float64"), seed=seed)]

    adapter = _base("with_framework_row", grpo_advantages=refimpl.grpo_advantages, extra_rows=extra_rows)
    return adapter
