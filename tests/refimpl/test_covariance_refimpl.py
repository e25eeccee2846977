"""The refimpl's covariance-selected tokens (spec v1.1: select.clip_cov, loss.kl_cov): the tie rule in
every dtype, the selection as a constant, the float32 path for ratios beyond e^80, output dtypes and
the errors. Values are worked out by hand (dyadic inputs: exact means and covariances); the registry's
differential tests compare with the oracle on random cases."""

from __future__ import annotations

import math

import pytest
import torch

import refimpl
from tests.refimpl.small_batch import MASK, assert_error_names, tok

DTYPES = (torch.float64, torch.float32, torch.bfloat16)

# one row, mask .xxxxx, A = 2, 2, -2, -2, 0, logp = -1, -3, -1, -3, -2: covariances 2, -2, -2, 2, 0
M = torch.tensor([[False, True, True, True, True, True]])
A = torch.tensor([[0.0, 2.0, 2.0, -2.0, -2.0, 0.0]], dtype=torch.float64)
LP = torch.tensor([[-4.0, -1.0, -3.0, -1.0, -3.0, -2.0]], dtype=torch.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_equal_draws_cut_the_earlier_candidate(dtype):
    draws = torch.tensor([[0.0, 0.5, 0.1, 0.3, 0.5, 0.9]], dtype=dtype)  # candidates t = 1 and 4, equal draws
    keep = refimpl.clip_cov_mask(LP.to(dtype), LP.to(dtype), A.to(dtype), M, draws)
    assert keep.dtype == torch.bool and not keep.requires_grad
    assert keep.tolist() == [[False, False, True, True, True, True]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_equal_covariances_select_in_row_major_order(dtype):
    """One advantage for the batch: every covariance is exactly 0; n = 3 of 4 selects row 0's two
    tokens, then row 1's first."""
    m = torch.tensor([[False, True, True], [False, True, True]])
    lp = torch.tensor([[-4.0, -1.0, -2.0], [-4.0, -3.0, -5.0]], dtype=dtype)
    d = torch.tensor([[0.0, 0.5, -0.5], [0.0, 0.25, -0.25]], dtype=torch.float64)
    L = refimpl.kl_cov_token_loss(lp, (lp.double() - d).to(dtype), torch.ones(2, dtype=dtype), m, fraction=0.75, coef=1.0)
    penalty = L.double() + torch.where(m, torch.exp(lp.double() - (lp.double() - d).to(dtype).double()), 0.0)
    assert (penalty.abs() > 1e-2).tolist() == [[False, True, True], [False, True, False]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_kl_cov_gradient_sign_and_constant_selection(dtype):
    lp = torch.tensor([[-4.0, -1.0, -3.0, -2.0, -4.0, -5.0]], dtype=dtype, requires_grad=True)  # covariances 4, 0, -2, 2, 0
    d = torch.tensor([[0.0, 0.5, -0.25, 0.25, 0.0, 1.0]], dtype=torch.float64)  # d = 0 at the selected t = 4
    old = (lp.detach().double() - d).to(dtype)
    L = refimpl.kl_cov_token_loss(lp, old, A.to(dtype), M, fraction=0.4, coef=1.0)  # selected: t = 1 and t = 4
    assert L.dtype == dtype
    (g,) = torch.autograd.grad(L.sum(), lp)
    dd = lp.detach().double() - old.double()
    expected = torch.where(M, -A * torch.exp(dd) + torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64), 0.0)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 5e-2}[dtype]
    assert torch.allclose(g.double(), expected, rtol=tol, atol=tol), (g, expected)


def test_float32_ratio_beyond_e80_is_computed_in_float64():
    """A = 1e-30 with d = 90: e^90 overflows float32 but -A·e^d = -1.2e9 does not."""
    m = torch.tensor([[False, True, True]])
    lp = torch.tensor([[-4.0, -1.0, -2.0]], dtype=torch.float32, requires_grad=True)
    old = torch.tensor([[-4.0, -91.0, -2.5]], dtype=torch.float32)
    adv = torch.tensor([[0.0, 1e-30, 1.0]], dtype=torch.float32)
    L = refimpl.kl_cov_token_loss(lp, old, adv, m, coef=0.0)
    assert L.dtype == torch.float32 and torch.isfinite(L).all()
    assert math.isclose(L[0, 1].item(), -1e-30 * math.exp(90.0), rel_tol=1e-6)
    (g,) = torch.autograd.grad(L.sum(), lp)
    assert g.dtype == torch.float32 and math.isclose(g[0, 1].item(), -1e-30 * math.exp(90.0), rel_tol=1e-6)


def test_masked_poison_and_empty_batches():
    lp, old, adv, draws = tok(1), tok(2), tok(3, scale=3.0, offset=0.0), tok(4, offset=0.0)
    clean = refimpl.clip_cov_mask(lp, old, adv, MASK, draws, fraction=0.5, cov_low=-1.0)
    poisoned = [torch.where(MASK, x, float("nan")) for x in (lp, old, adv, draws)]
    assert torch.equal(refimpl.clip_cov_mask(*poisoned[:3], MASK, poisoned[3], fraction=0.5, cov_low=-1.0), clean)
    assert not (clean & ~MASK).any()
    none = torch.zeros_like(MASK)
    assert not refimpl.clip_cov_mask(lp, old, adv, none, draws).any()
    assert torch.equal(refimpl.kl_cov_token_loss(lp, old, adv, none), torch.zeros_like(lp))


@pytest.mark.parametrize("function, kwargs, exc, arg", [
    ("clip_cov_mask", {"fraction": 0.0}, ValueError, "fraction"),
    ("clip_cov_mask", {"fraction": 2.0}, ValueError, "fraction"),
    ("clip_cov_mask", {"cov_low": 6.0}, ValueError, "cov_high"),
    ("clip_cov_mask", {"cov_high": float("inf")}, ValueError, "cov_high"),
    ("clip_cov_mask", {"eps_high": "0.2"}, TypeError, "eps_high"),
    ("kl_cov_token_loss", {"coef": -0.5}, ValueError, "coef"),
    ("kl_cov_token_loss", {"fraction": True}, TypeError, "fraction"),
])
def test_errors_name_function_and_argument(function, kwargs, exc, arg):
    args = (tok(1), tok(2), tok(3), MASK) + ((tok(4),) if function == "clip_cov_mask" else ())
    assert_error_names(getattr(refimpl, function), args, kwargs, exc, arg)


def test_draws_nan_at_a_valid_token_is_an_error():
    draws = tok(4)
    draws[0, 2] = float("nan")
    assert_error_names(refimpl.clip_cov_mask, (tok(1), tok(2), tok(3), MASK, draws), {}, ValueError, "draws")
