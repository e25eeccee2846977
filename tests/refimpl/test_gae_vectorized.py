"""The loop-free GAE (compaction + blocked Toeplitz / reverse cumsum) against a literal float64 loop.

The reference below is written here, from the spec text (api.md, ``gae``): walk the valid positions
of each row backwards; δ_k = r_{t_k} + γ·V_{t_{k+1}} − V_{t_k} with V after the row's last valid token
equal to 0; A_k = δ_k + γλ·A_{k+1}; masked positions are skipped and are 0 in both outputs;
returns = A + V at valid positions.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from refimpl import gae
from refimpl.gae import discounted_reverse_cumsum

C_VALUES = [(1.0, 1.0), (1.0, 0.99), (1.0, 0.95), (1.0, 0.5), (0.99, 0.95), (0.9, 0.0)]


def gae_loop(rewards: np.ndarray, values: np.ndarray, mask: np.ndarray, gamma: float, lam: float):
    B, T = mask.shape
    A = np.zeros((B, T))
    R = np.zeros((B, T))
    for b in range(B):
        valid = [t for t in range(T) if mask[b, t]]
        next_value, next_adv = 0.0, 0.0
        for t in reversed(valid):
            delta = rewards[b, t] + gamma * next_value - values[b, t]
            A[b, t] = delta + gamma * lam * next_adv
            R[b, t] = A[b, t] + values[b, t]
            next_value, next_adv = values[b, t], A[b, t]
    return A, R


def make_mask(rng: np.random.Generator, B: int, T: int, gaps: bool) -> np.ndarray:
    """Rows with prompt + completion + padding, left or right padded; some empty, some with gaps."""
    mask = np.zeros((B, T), dtype=bool)
    for b in range(B):
        length = int(rng.integers(1, T))
        start = int(rng.integers(1, T - length + 1))
        mask[b, start : start + length] = True
        if gaps and length > 2:
            holes = rng.random(T) < 0.15
            holes[start] = holes[start + length - 1] = False
            mask[b] &= ~holes
    mask[0] = False  # an empty row
    mask[-1, 1:] = True  # a full row (every position but the first)
    if gaps:
        mask[-1, T // 2] = False
    return mask


@pytest.mark.parametrize("gamma,lam", C_VALUES)
@pytest.mark.parametrize("gaps", [False, True], ids=["runs", "gaps"])
@pytest.mark.parametrize("T", [2, 7, 17, 300])
def test_float64_matches_loop(T, gaps, gamma, lam):
    rng = np.random.default_rng(T * 7 + int(gaps))
    B = 6
    mask = make_mask(rng, B, T, gaps)
    r = rng.normal(size=(B, T))
    V = rng.normal(scale=2.0, size=(B, T))
    A_ref, R_ref = gae_loop(r, V, mask, gamma, lam)
    A, R = gae(torch.tensor(r), torch.tensor(V), torch.tensor(mask), gamma=gamma, lam=lam)
    assert A.dtype == R.dtype == torch.float64
    np.testing.assert_allclose(A.numpy(), A_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(R.numpy(), R_ref, rtol=1e-12, atol=1e-12)
    assert (A.numpy()[~mask] == 0).all() and (R.numpy()[~mask] == 0).all()


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (1.0, 0.99), (1.0, 0.95), (1.0, 0.5)])
@pytest.mark.parametrize("gaps", [False, True], ids=["runs", "gaps"])
def test_float32_long_rows(gaps, gamma, lam):
    """T = 4096 in float32: max |error| below 1e-5 of max |A| (float64 loop on the same inputs),
    and, for positive rewards (no cancellation), elementwise relative error below 1e-5."""
    rng = np.random.default_rng(4096 + int(gaps))
    B, T = 3, 4096
    mask = make_mask(rng, B, T, gaps)
    for r, V in [
        (rng.normal(size=(B, T)), rng.normal(scale=2.0, size=(B, T))),
        (rng.random((B, T)), np.zeros((B, T))),
    ]:
        r32, V32 = r.astype(np.float32), V.astype(np.float32)
        A_ref, R_ref = gae_loop(r32.astype(np.float64), V32.astype(np.float64), mask, gamma, lam)
        A, R = gae(torch.tensor(r32), torch.tensor(V32), torch.tensor(mask), gamma=gamma, lam=lam)
        assert A.dtype == torch.float32
        for out, ref in [(A.double().numpy(), A_ref), (R.double().numpy(), R_ref)]:
            assert np.abs(out - ref).max() <= 1e-5 * np.abs(ref).max()
        if (V == 0).all():
            valid = mask & (A_ref > 0)
            rel = np.abs(A.double().numpy() - A_ref)[valid] / A_ref[valid]
            assert rel.max() < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_keep_their_dtype(dtype):
    rng = np.random.default_rng(0)
    mask = make_mask(rng, 4, 50, gaps=True)
    r = torch.tensor(rng.normal(size=(4, 50))).to(dtype)
    V = torch.tensor(rng.normal(size=(4, 50))).to(dtype)
    A, R = gae(r, V, torch.tensor(mask), gamma=0.99, lam=0.95)
    assert A.dtype == R.dtype == dtype
    A_ref, R_ref = gae_loop(r.double().numpy(), V.double().numpy(), mask, 0.99, 0.95)
    np.testing.assert_allclose(A.double().numpy(), A_ref, rtol=2e-2, atol=2e-2 * np.abs(A_ref).max())


@pytest.mark.parametrize("c", [1.0, 0.999, 0.9, 0.3, 0.0])
@pytest.mark.parametrize("T", [1, 16, 17, 255, 257, 1000])
def test_discounted_reverse_cumsum(T, c):
    """The blocked solver alone, including T that are not multiples of the block and several
    levels of carries."""
    x = torch.randn(3, T, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    ref = torch.zeros_like(x)
    acc = torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(T)):
        acc = x[:, t] + c * acc
        ref[:, t] = acc
    torch.testing.assert_close(discounted_reverse_cumsum(x, c), ref, rtol=1e-12, atol=1e-12)


def test_outputs_are_constants():
    """Spec adv.gae: advantages and returns are targets (stop-gradient); no graph to rewards/values."""
    rng = np.random.default_rng(1)
    mask = torch.tensor(make_mask(rng, 4, 40, gaps=True))
    r = torch.randn(4, 40, dtype=torch.float64, requires_grad=True)
    V = torch.randn(4, 40, dtype=torch.float64, requires_grad=True)
    A, R = gae(r, V, mask, gamma=0.99, lam=0.9)
    assert not A.requires_grad and not R.requires_grad


