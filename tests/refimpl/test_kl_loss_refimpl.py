"""refimpl.kl_loss_term (spec v1.1 kl.loss): the properties that need no oracle. Hand values and autograd
gradients of the four forms, values equal across forms where the spec says so with gradients that
differ, constants detached, 0·inf := 0, dtypes, error messages, signature. (The differential tests
against the oracle come from the conformance records.)
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import refimpl
from refimpl import kl_loss_term
from tests.refimpl.small_batch import MASK, B, T, assert_error_names, tok

F64 = torch.float64
GRADIENTS = ("estimator", "straight_through", "unbiased", "bias_corrected")


def value_and_grad(logp, ref, old, mask=MASK, upstream=None, **kw):
    lp = logp.detach().clone().requires_grad_(True)
    out = kl_loss_term(lp, ref, mask, old, **kw)
    u = torch.ones_like(out) if upstream is None else upstream.to(out.dtype)
    (g,) = torch.autograd.grad(out, lp, grad_outputs=u)
    return out, g


def one(d, log_r, dtype=F64, **kw):
    """(L, dL/dlogp) of one valid token with logp − ref = d and logp − old = log r."""
    m = torch.tensor([[False, True]])
    logp = torch.tensor([[0.0, -1.0]], dtype=dtype)
    ref = logp - torch.tensor([[0.0, d]], dtype=dtype)
    old = logp - torch.tensor([[0.0, log_r]], dtype=dtype)
    out, g = value_and_grad(logp, ref, old, m, **kw)
    assert out[0, 0] == 0 and g[0, 0] == 0
    return out[0, 1].item(), g[0, 1].item()


def test_exported_and_signature():
    assert "kl_loss_term" in refimpl.__all__ and refimpl.kl_loss_term is kl_loss_term
    params = inspect.signature(kl_loss_term).parameters
    assert list(params)[:4] == ["logp", "ref_logp", "mask", "old_logp"] and params["old_logp"].default is None
    assert {n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY} == {
        "estimator": "k3", "gradient": "estimator", "log_ratio_clamp": None, "clamp": None, "weight_cap": 10.0}


def test_hand_values_of_the_four_forms():
    # d = −1, r = 2: K = e − 2; ∂K = 1 − e; straight-through d = −1; unbiased 2·(−1); bias-corrected
    # value 2(e − 2), gradient r·d = −2
    e, log2 = math.e, math.log(2.0)
    assert one(-1.0, log2) == pytest.approx((e - 2, 1 - e), rel=1e-14)
    assert one(-1.0, log2, gradient="straight_through") == pytest.approx((e - 2, -1.0), rel=1e-14)
    assert one(-1.0, log2, gradient="unbiased") == pytest.approx((e - 2, -2.0), rel=1e-14)
    assert one(-1.0, log2, gradient="bias_corrected") == pytest.approx((2 * (e - 2), -2.0), rel=1e-14)
    # abs: |−1| = 1, gradient −1; the tie d = 0 has gradient 0
    assert one(-1.0, log2, estimator="abs") == pytest.approx((1.0, -1.0))
    assert one(0.0, log2, estimator="abs") == (0.0, 0.0)
    # r = e^3 > 10: the unbiased weight is capped at 10, unless weight_cap=None
    assert one(-1.0, 3.0, gradient="unbiased")[1] == pytest.approx(-10.0, rel=1e-14)
    assert one(-1.0, 3.0, gradient="unbiased", weight_cap=None)[1] == pytest.approx(-math.exp(3.0), rel=1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_values_agree_gradients_differ(dtype):
    logp = tok(1, dtype)
    ref = (logp.double() + tok(2, F64, scale=1.0, offset=0.0)).to(dtype)
    old = (logp.double() + tok(3, F64, scale=0.7, offset=0.0)).to(dtype)
    for est in ("k1", "k3", "abs"):
        values, grads = {}, {}
        for g in GRADIENTS:
            values[g], grads[g] = value_and_grad(logp, ref, old, estimator=est, gradient=g)
        kl = refimpl.kl_penalty(logp, ref, MASK, estimator=est) if est != "abs" else values["estimator"]
        for g in ("estimator", "straight_through", "unbiased"):
            assert torch.equal(values[g], kl), (est, g)
        assert not torch.allclose(values["bias_corrected"], kl)
        for a in GRADIENTS:
            for b in GRADIENTS:
                if a < b and not (est == "k3" and {a, b} == {"unbiased", "bias_corrected"}):
                    assert not torch.allclose(grads[a], grads[b]), (est, a, b)
    # on-policy to the sampler (old = logp): the bias-corrected value is K, its gradient ∂K + K
    v, g = value_and_grad(logp, ref, logp, estimator="k3", gradient="bias_corrected")
    v0, g0 = value_and_grad(logp, ref, None, estimator="k3")
    torch.testing.assert_close(v, v0)  # (equal up to rounding: the bias-corrected value is formed in float64)
    assert not torch.allclose(g, g0)
    torch.testing.assert_close(g, torch.where(MASK, g0 + v0, 0.0))


def test_straight_through_gradient_is_the_raw_log_ratio_whatever_the_clamps():
    logp = tok(4, F64)
    ref = logp - 3.0 * tok(5, F64, scale=1.0, offset=0.0)
    for gradient in ("straight_through", "unbiased"):
        old = logp if gradient == "unbiased" else None  # r = 1: w·d = d
        out, g = value_and_grad(logp, ref, old, estimator="k3", gradient=gradient, log_ratio_clamp=1.0, clamp=0.5)
        assert torch.equal(g, torch.where(MASK, logp - ref, 0.0))
        assert out.abs().max() <= 0.5


def test_constants_receive_no_gradient():
    logp = tok(6, torch.float32).requires_grad_(True)
    ref = tok(7, torch.float32).requires_grad_(True)
    old = tok(8, torch.float32).requires_grad_(True)
    for g in GRADIENTS:
        out = kl_loss_term(logp, ref, MASK, old, gradient=g)
        grads = torch.autograd.grad(out.sum(), (logp, ref, old), allow_unused=True)
        assert grads[0] is not None and grads[1] is None and grads[2] is None, g


def test_zero_times_inf_is_zero():
    # r = e^800 where d = 0 (float64): K·r = 0 and the gradients 0, never NaN; with the cap, w = 10
    assert one(0.0, 800.0, gradient="bias_corrected") == (0.0, 0.0)
    assert one(0.0, 800.0, gradient="unbiased", weight_cap=None) == (0.0, 0.0)
    assert one(0.5, 800.0, gradient="unbiased") == pytest.approx((math.exp(-0.5) - 0.5, 5.0), rel=1e-14)
    # k3 at d = −800: value inf, the bias-corrected gradient r·d = −800 finite
    assert one(-800.0, 0.0, gradient="bias_corrected") == (math.inf, -800.0)
    # float32: K = e^100 − 101 and r = e^−100 each beyond float32, their product ≈ 1 is not
    v, g = one(-100.0, -100.0, dtype=torch.float32, gradient="bias_corrected")
    assert v == pytest.approx(1.0, rel=1e-6) and g == pytest.approx(-100.0 * math.exp(-100.0), abs=1e-40)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, F64])
def test_output_dtype_is_the_input_dtype(dtype):
    logp, ref, old = tok(9, dtype), tok(10, dtype), tok(11, dtype)
    for g in GRADIENTS:
        out, grad = value_and_grad(logp, ref, old, gradient=g)
        assert out.dtype == dtype and grad.dtype == dtype
        assert torch.isfinite(out).all() and torch.isfinite(grad).all()


def test_errors_name_the_argument():
    logp, ref, old = tok(12), tok(13), tok(14)
    for gradient in ("unbiased", "bias_corrected"):
        assert_error_names(kl_loss_term, (logp, ref, MASK), {"gradient": gradient}, ValueError, "old_logp")
    assert_error_names(kl_loss_term, (logp, ref, MASK, old[:, :-1]), {}, ValueError, "old_logp")
    nan_old = torch.where(MASK, float("nan"), old)
    assert_error_names(kl_loss_term, (logp, ref, MASK, nan_old), {"gradient": "straight_through"}, ValueError, "old_logp")
    assert_error_names(kl_loss_term, (logp, ref, MASK, old), {"estimator": "k4"}, ValueError, "estimator")
    assert_error_names(kl_loss_term, (logp, ref, MASK, old), {"gradient": "detached"}, ValueError, "gradient")
    assert_error_names(kl_loss_term, (logp, ref, MASK, old), {"weight_cap": 0.0}, ValueError, "weight_cap")
    assert_error_names(kl_loss_term, (logp, ref, MASK, old.numpy()), {}, TypeError, "old_logp")


def test_empty_rows_and_batches_are_zero():
    m = torch.zeros(B, T, dtype=torch.bool)
    for g in GRADIENTS:
        out, grad = value_and_grad(tok(15), tok(16), tok(17), m, gradient=g)
        assert torch.equal(out, torch.zeros(B, T)) and torch.equal(grad, torch.zeros(B, T))
