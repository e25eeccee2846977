"""refimpl.offpolicy (spec v1.1, api.md "Spec v1.1: off-policy and asynchronous training"): the
properties that need no oracle. Constants are detached; masked positions never matter; exp overflow
gives inf, then truncation / masking; 0·inf := 0 in the decoupled loss; dtypes; error messages.
(The differential tests against the oracle come from the conformance records.)
"""

from __future__ import annotations

import math

import pytest
import torch

import refimpl
from refimpl import (
    decoupled_ppo_token_loss,
    off_policy_sequence_mask,
    proximal_logp_interpolation,
    rollout_is_weights,
    rollout_rejection_mask,
)

from tests.refimpl.small_batch import MASK, POISON, B, T, assert_error_names, tok  # noqa: E402


def inputs(dtype=torch.float32) -> dict[str, torch.Tensor]:
    logp = tok(1, dtype)
    return {
        "logp": logp,
        "old_logp": tok(2, dtype),
        "rollout_logp": tok(3, dtype),
        "prox_logp": tok(4, dtype),
        "behav_logp": tok(5, dtype),
        "advantages": torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=dtype),
        "adv_tokens": tok(6, dtype, scale=1.0, offset=0.0),
        "behav_version": torch.tensor([[0, 1, 2, 3, 3, 2], [1, 1, 0, 2, 3, 3], [0, 3, -1, 2, 1, 1], [-1] * T]),
    }


# Each call: (function, positional argument names, keywords). Float per-token arguments are planted.
CALLS = [
    (rollout_is_weights, ("old_logp", "rollout_logp"), {}),
    (rollout_is_weights, ("old_logp", "rollout_logp"), {"mode": "mask", "lo": 0.5, "hi": 1.5}),
    (rollout_is_weights, ("old_logp", "rollout_logp"), {"level": "sequence", "mode": "none", "batch_normalize": True}),
    (rollout_is_weights, ("old_logp", "rollout_logp"), {"level": "sequence", "seq_stat": "geometric", "lo": 0.8}),
    (rollout_rejection_mask, ("old_logp", "rollout_logp"), {"lo": 0.7, "hi": 1.4}),
    (rollout_rejection_mask, ("old_logp", "rollout_logp"), {"statistic": "k3", "level": "seq_mean", "hi": 0.1}),
    (rollout_rejection_mask, ("old_logp", "rollout_logp"),
     {"statistic": "k1", "level": "seq_all", "lo": -0.5, "hi": 0.5}),
    (rollout_rejection_mask, ("old_logp", "rollout_logp"), {"statistic": "ratio", "level": "seq_max", "hi": 3.0}),
    (decoupled_ppo_token_loss, ("logp", "prox_logp", "behav_logp", "adv_tokens"), {"dual_clip": 3.0, "behav_cap": 1.5}),
    (decoupled_ppo_token_loss, ("logp", "prox_logp", "behav_logp", "advantages"),
     {"behav_cap": 1.2, "behav_mode": "mask"}),
    (proximal_logp_interpolation, ("logp", "behav_logp", "behav_version"), {"version": 3}),
    (proximal_logp_interpolation, ("logp", "behav_logp", "behav_version"), {"version": 3, "method": "linear"}),
    (off_policy_sequence_mask, ("logp", "old_logp", "adv_tokens"), {"threshold": 0.05}),
]
IDS = [f"{fn.__name__}-{i}" for i, (fn, _, _) in enumerate(CALLS)]


def call(fn, names, kwargs, values):
    return fn(*(values[n] for n in names), MASK, **kwargs)


def test_exported():
    for name in ("rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss",
                 "proximal_logp_interpolation", "off_policy_sequence_mask"):
        assert name in refimpl.__all__ and callable(getattr(refimpl, name))


@pytest.mark.parametrize("fn,names,kwargs", CALLS, ids=IDS)
def test_only_logp_of_the_decoupled_loss_gets_a_gradient(fn, names, kwargs):
    values = inputs(torch.float64)
    grads = {n: values[n].clone().requires_grad_(values[n].is_floating_point()) for n in names}
    out = call(fn, names, kwargs, {**values, **grads})
    floats = [n for n in names if grads[n].requires_grad]
    if fn is not decoupled_ppo_token_loss:
        assert not out.requires_grad and out.grad_fn is None
        return
    got = torch.autograd.grad(out.sum(), [grads[n] for n in floats], allow_unused=True)
    for n, g in zip(floats, got):
        if n == "logp":
            assert g is not None and torch.isfinite(g).all() and (g[~MASK] == 0).all()
        else:
            assert g is None or (g == 0).all(), n


@pytest.mark.parametrize("poison", POISON)
@pytest.mark.parametrize("fn,names,kwargs", CALLS, ids=IDS)
def test_masked_positions_never_matter(fn, names, kwargs, poison):
    clean = inputs()
    dirty = dict(clean)
    for n in names:
        x = clean[n]
        if x.dim() == 2 and x.is_floating_point():
            dirty[n] = torch.where(MASK, x, poison)
        elif n == "behav_version":
            dirty[n] = torch.where(MASK, x, 10**9)  # above version: never read there
    grads = {}
    for label, values in (("clean", clean), ("dirty", dirty)):
        lp = values["logp"].clone().requires_grad_(True)
        out = call(fn, names, kwargs, {**values, "logp": lp})
        if out.requires_grad:
            (g,) = torch.autograd.grad((out * tok(9)).sum(), lp)
            grads[label] = g
        grads[label + "_out"] = out
    assert torch.equal(grads["clean_out"], grads["dirty_out"])
    if out.is_floating_point():
        assert (grads["dirty_out"][~MASK] == 0).all() and not torch.isnan(grads["dirty_out"]).any()
    else:
        assert out.dtype == torch.bool and not (out & ~MASK).any()
    if "clean" in grads:
        assert torch.equal(grads["clean"], grads["dirty"]) and (grads["dirty"][~MASK] == 0).all()


def overflowing(dtype=torch.float32):
    """old − rollout = 800 at (0, 2) (e^800 overflows every float dtype), 0 elsewhere."""
    old = torch.full((B, T), -1.0, dtype=dtype)
    roll = old.clone()
    old[0, 2] = 799.0
    return old, roll


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_is_weight_overflow_is_inf_then_truncated_or_masked(dtype):
    old, roll = overflowing(dtype)
    inf = rollout_is_weights(old, roll, MASK, mode="none")
    assert inf[0, 2] == math.inf and (inf[MASK].isfinite().sum() == MASK.sum() - 1)
    assert rollout_is_weights(old, roll, MASK)[0, 2] == 2.0  # truncated to hi
    masked_out = rollout_is_weights(old, roll, MASK, mode="mask", lo=0.5, hi=2.0)
    others = MASK.clone()
    others[0, 2] = False
    assert masked_out[0, 2] == 0 and (masked_out[others] == 1).all()
    seq = rollout_is_weights(old, roll, MASK, level="sequence", mode="mask", hi=5.0)
    assert (seq[0] == 0).all() and (seq[1][MASK[1]] == 1).all()
    # batch normalisation of an infinite weight: the exact N·w/Σw, not inf/inf = NaN
    norm = rollout_is_weights(old, roll, MASK, mode="none", batch_normalize=True)
    n = float(MASK.sum())
    assert norm[0, 2].item() == pytest.approx(n, rel=1e-2) and (norm[others] == 0).all()
    # rejection: ρ = inf is above any hi; with k1 of d = −800 (kl_of="rollout_old") below any lo
    assert not rollout_rejection_mask(old, roll, MASK, hi=10.0)[0, 2]
    assert not rollout_rejection_mask(old, roll, MASK, level="seq_all", hi=10.0)[0].any()
    assert not rollout_rejection_mask(old, roll, MASK, statistic="k3", hi=1.0, kl_of="old_rollout")[0, 2]


def test_decoupled_zero_factor_times_overflow_is_zero():
    """w = 0 or A = 0 with an overflowing PPO ratio or behaviour weight: loss 0, gradient 0, no NaN."""
    logp = torch.full((B, T), -1.0)
    logp[0, 2] = 799.0  # r = e^800 = inf
    prox = torch.full((B, T), -1.0)
    A_neg = torch.full((B,), -1.0)  # A < 0: PPO's unclipped branch −A·r = +inf is selected
    cases = [
        # w = e^800 = inf > cap → masked to 0
        (prox, torch.full((B, T), -801.0), A_neg, {"behav_cap": 2.0, "behav_mode": "mask"}),
        # w = e^−800 underflows to an exact 0
        (prox, torch.full((B, T), 799.0), A_neg, {}),
        # A = 0 with r = inf and w = inf (no cap)
        (prox, torch.full((B, T), -801.0), torch.zeros(B), {}),
    ]
    for prox_logp, behav_logp, A, kwargs in cases:
        lp = logp.clone().requires_grad_(True)
        L = decoupled_ppo_token_loss(lp, prox_logp, behav_logp, A, MASK, **kwargs)
        (g,) = torch.autograd.grad(L.sum(), lp)
        assert L[0, 2] == 0 and g[0, 2] == 0, kwargs
        assert not torch.isnan(L).any() and not torch.isnan(g).any()
    # w = inf times a clipped branch (zero PPO derivative): value −inf, gradient 0 (not inf·0 = NaN)
    lp = torch.full((B, T), -1.0 + math.log(1.5), requires_grad=True)  # r = 1.5 > 1 + eps_high
    L = decoupled_ppo_token_loss(lp, prox, torch.full((B, T), -801.0), torch.ones(B), MASK)
    (g,) = torch.autograd.grad(L.sum(), lp)
    assert (L[MASK] == -math.inf).all() and (g == 0).all()
    # and with r inside the clip range the gradient is w·(−A·r) = −inf
    lp = torch.full((B, T), -1.0, requires_grad=True)
    L = decoupled_ppo_token_loss(lp, prox, torch.full((B, T), -801.0), torch.ones(B), MASK)
    (g,) = torch.autograd.grad(L.sum(), lp)
    assert (g[MASK] == -math.inf).all() and (g[~MASK] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decoupled_underflowing_weight_times_overflowing_ratio_is_exact(dtype):
    """w = e^−100 (0 or subnormal in float32) times r = e^100 (inf) with A = −1: the exact w·(−A·r) = 1,
    gradient 1, not 0·inf or subnormal·inf."""
    lp = torch.full((B, T), 99.0, dtype=dtype, requires_grad=True)
    prox = torch.full((B, T), -1.0, dtype=dtype)
    behav = torch.full((B, T), 99.0, dtype=dtype)
    L = decoupled_ppo_token_loss(lp, prox, behav, torch.full((B,), -1.0, dtype=dtype), MASK)
    (g,) = torch.autograd.grad(L.sum(), lp)
    assert L.dtype == dtype and g.dtype == dtype
    torch.testing.assert_close(L, MASK.to(dtype))
    torch.testing.assert_close(g, MASK.to(dtype))


def test_decoupled_with_unit_weight_is_ppo():
    v = inputs(torch.float64)
    lp1 = v["logp"].clone().requires_grad_(True)
    lp2 = v["logp"].clone().requires_grad_(True)
    kw = {"eps_low": 0.1, "eps_high": 0.28, "dual_clip": 3.0}
    L1 = decoupled_ppo_token_loss(lp1, v["prox_logp"], v["prox_logp"], v["adv_tokens"], MASK, **kw)
    L2 = refimpl.ppo_token_loss(lp2, v["prox_logp"], v["adv_tokens"], MASK, **kw)
    assert torch.equal(L1, L2)
    g2 = torch.autograd.grad(L2.sum(), lp2)[0]
    assert torch.equal(torch.autograd.grad(L1.sum(), lp1)[0], g2)
    # a truncated behaviour weight scales value and gradient
    w = torch.exp(v["prox_logp"] - v["behav_logp"]).clamp(max=1.5)
    lp3 = v["logp"].clone().requires_grad_(True)
    L3 = decoupled_ppo_token_loss(lp3, v["prox_logp"], v["behav_logp"], v["adv_tokens"], MASK, behav_cap=1.5, **kw)
    torch.testing.assert_close(L3, torch.where(MASK, w * L2, 0.0))
    torch.testing.assert_close(torch.autograd.grad(L3.sum(), lp3)[0], torch.where(MASK, w * g2, 0.0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn,names,kwargs", CALLS, ids=IDS)
def test_output_dtype(fn, names, kwargs, dtype):
    out = call(fn, names, kwargs, inputs(dtype))
    if fn in (rollout_rejection_mask, off_policy_sequence_mask):
        assert out.dtype == torch.bool
    else:
        assert out.dtype == dtype
    assert out.shape == (B, T)


V = inputs()
_R = (V["old_logp"], V["rollout_logp"], MASK)
_D = (V["logp"], V["prox_logp"], V["behav_logp"], V["advantages"], MASK)
_P = (V["logp"], V["behav_logp"], V["behav_version"], MASK)
BAD = [
    (rollout_is_weights, (V["old_logp"].long(), V["rollout_logp"], MASK), {}, TypeError, "old_logp"),
    (rollout_is_weights, _R, {"level": "row"}, ValueError, "level"),
    (rollout_is_weights, _R, {"seq_stat": "mean"}, ValueError, "seq_stat"),
    (rollout_is_weights, _R, {"mode": "clip"}, ValueError, "mode"),
    (rollout_is_weights, _R, {"hi": 0.0}, ValueError, "hi"),
    (rollout_is_weights, _R, {"lo": -1.0}, ValueError, "lo"),
    (rollout_is_weights, _R, {"lo": 3.0, "hi": 2.0}, ValueError, "lo"),
    (rollout_is_weights, _R, {"log_ratio_clamp": 0.0}, ValueError, "log_ratio_clamp"),
    (rollout_is_weights, _R, {"batch_normalize": 1}, TypeError, "batch_normalize"),
    (rollout_is_weights, (V["old_logp"], torch.where(MASK, math.nan, V["rollout_logp"]), MASK), {},
     ValueError, "rollout_logp"),
    (rollout_is_weights, (V["old_logp"], V["rollout_logp"][:, :3], MASK), {}, ValueError, "rollout_logp"),
    (rollout_rejection_mask, _R, {"statistic": "k4"}, ValueError, "statistic"),
    (rollout_rejection_mask, _R, {"level": "seq_min"}, ValueError, "level"),
    (rollout_rejection_mask, _R, {"kl_of": "old_old"}, ValueError, "kl_of"),
    (rollout_rejection_mask, _R, {"lo": 0.0}, ValueError, "lo"),
    (rollout_rejection_mask, _R, {"statistic": "k1", "lo": 0.5, "hi": -0.5}, ValueError, "lo"),
    (decoupled_ppo_token_loss, _D, {"behav_cap": 0.0}, ValueError, "behav_cap"),
    (decoupled_ppo_token_loss, _D, {"behav_mode": "clip"}, ValueError, "behav_mode"),
    (decoupled_ppo_token_loss, _D, {"dual_clip": 1.0}, ValueError, "dual_clip"),
    (decoupled_ppo_token_loss, _D, {"eps_low": -0.1}, ValueError, "eps_low"),
    (decoupled_ppo_token_loss, (V["logp"], V["prox_logp"].int(), V["behav_logp"], V["advantages"], MASK), {},
     TypeError, "prox_logp"),
    (decoupled_ppo_token_loss, (V["logp"], V["prox_logp"], torch.where(MASK, math.inf, V["behav_logp"]),
                                V["advantages"], MASK), {}, ValueError, "behav_logp"),
    (proximal_logp_interpolation, _P, {"version": 3.0}, TypeError, "version"),
    (proximal_logp_interpolation, _P, {"version": 2}, ValueError, "behav_version"),  # 3 > version at a valid token
    (proximal_logp_interpolation, _P, {"version": 3, "method": "cubic"}, ValueError, "method"),
    (proximal_logp_interpolation, (V["logp"], V["behav_logp"], torch.where(MASK, -1, V["behav_version"]), MASK),
     {"version": 3}, ValueError, "behav_version"),
    (proximal_logp_interpolation, (V["logp"], V["behav_logp"], V["behav_version"].double(), MASK), {"version": 9},
     TypeError, "behav_version"),
    (proximal_logp_interpolation, (V["logp"], V["behav_logp"], V["behav_version"] > 0, MASK), {"version": 3},
     TypeError, "behav_version"),
    (off_policy_sequence_mask, (V["logp"], V["old_logp"], V["advantages"], MASK), {"threshold": "0.1"},
     TypeError, "threshold"),
    (off_policy_sequence_mask, (V["logp"], V["old_logp"], V["advantages"][:2], MASK), {"threshold": 0.1},
     ValueError, "advantages"),
]


@pytest.mark.parametrize("fn,args,kwargs,exc,arg", BAD, ids=[f"{b[0].__name__}-{b[4]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_names_function_and_argument(fn, args, kwargs, exc, arg):
    assert_error_names(fn, args, kwargs, exc, arg)


def test_degenerate_batches():
    for b, t in ((0, 4), (3, 1), (2, 0)):
        m = torch.zeros(b, t, dtype=torch.bool)
        x = torch.zeros(b, t)
        for kwargs in ({}, {"level": "sequence", "batch_normalize": True}):
            assert torch.equal(rollout_is_weights(x, x, m, **kwargs), x)
        for level in ("token", "seq_sum", "seq_max", "seq_all"):
            assert not rollout_rejection_mask(x, x, m, level=level, hi=2.0).any()
        lp = x.clone().requires_grad_(True)
        L = decoupled_ppo_token_loss(lp, x, x, torch.zeros(b), m)
        assert torch.equal(L, x) and torch.equal(torch.autograd.grad(L.sum(), lp, allow_unused=True)[0], x)
        assert torch.equal(proximal_logp_interpolation(x, x, torch.zeros(b, dtype=torch.long), m, version=0), x)
        assert not off_policy_sequence_mask(x, x, torch.zeros(b), m, threshold=0.0).any()
