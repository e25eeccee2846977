"""oracle.aggregate (+ grad): per-token weights of every mode, empty rows, global counts."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle

MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum"]


def _two_rows():
    """Two sequences with 2 and 6 valid tokens (bug-catalogue classes 1 and 2)."""
    mask = np.zeros((2, 8), dtype=bool)
    mask[0, 1:3] = True
    mask[1, 1:7] = True
    loss = np.where(mask, 1.0, np.nan)  # masked entries are NaN on purpose
    return loss, mask


@pytest.mark.parametrize(
    "mode,short,long",
    [
        ("token_mean", 1 / 8, 1 / 8),  # 1/N, N = 8
        ("seq_mean_token_mean", 1 / 4, 1 / 12),  # 1/(S·n_b), S = 2
        ("seq_mean_token_sum", 1 / 2, 1 / 2),  # 1/S
        ("seq_mean_token_sum_norm", 1 / 12, 1 / 12),  # 1/(S·norm_length), norm_length = 6
        ("token_sum", 1.0, 1.0),
    ],
)
def test_per_token_gradient_weights(mode, short, long):
    loss, mask = _two_rows()
    g = oracle.aggregate_grad(loss, mask, 1.0, mode=mode, norm_length=6)
    assert g[0, 1:3] == pytest.approx([short] * 2, rel=1e-15)
    assert g[1, 1:7] == pytest.approx([long] * 6, rel=1e-15)
    assert np.all(g[~mask] == 0.0)
    # upstream scales linearly
    assert oracle.aggregate_grad(loss, mask, -2.5, mode=mode, norm_length=6)[1, 1] == pytest.approx(-2.5 * long)


def test_values_by_hand():
    # row 0: l = [1, 3] (sum 4, mean 2); row 1: l = [2]·6 (sum 12, mean 2); N = 8, S = 2
    loss, mask = _two_rows()
    loss[0, 1:3] = [1.0, 3.0]
    loss[1, 1:7] = 2.0
    assert oracle.aggregate(loss, mask, mode="token_mean") == pytest.approx(16 / 8)
    assert oracle.aggregate(loss, mask, mode="seq_mean_token_mean") == pytest.approx((2 + 2) / 2)
    assert oracle.aggregate(loss, mask, mode="seq_mean_token_sum") == pytest.approx((4 + 12) / 2)
    assert oracle.aggregate(loss, mask, mode="seq_mean_token_sum_norm", norm_length=8) == pytest.approx(16 / 2 / 8)
    assert oracle.aggregate(loss, mask, mode="token_sum") == pytest.approx(16.0)
    assert isinstance(oracle.aggregate(loss, mask, mode="token_sum"), np.float64)


def test_fully_masked_row_counts_in_S_but_adds_nothing():
    loss, mask = _two_rows()
    loss3 = np.vstack([loss, np.full((1, 8), np.inf)])
    mask3 = np.vstack([mask, np.zeros((1, 8), dtype=bool)])
    # seq_mean_token_mean: (1 + 1)/3 with l = 1 everywhere valid; token_mean unchanged: 8/8
    assert oracle.aggregate(loss3, mask3, mode="seq_mean_token_mean") == pytest.approx(2 / 3)
    assert oracle.aggregate(loss3, mask3, mode="token_mean") == pytest.approx(1.0)
    g = oracle.aggregate_grad(loss3, mask3, 1.0, mode="seq_mean_token_mean")
    assert g[0, 1] == pytest.approx(1 / 6) and g[1, 1] == pytest.approx(1 / 18) and np.all(g[2] == 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_all_masked_batch_gives_zero_not_nan(mode):
    loss = np.full((2, 3), np.nan)
    mask = np.zeros((2, 3), dtype=bool)
    assert oracle.aggregate(loss, mask, mode=mode, norm_length=4) == 0.0
    assert np.all(oracle.aggregate_grad(loss, mask, 1.0, mode=mode, norm_length=4) == 0.0)
    # an empty micro-batch with global counts contributes exactly 0
    assert oracle.aggregate(loss, mask, mode=mode, norm_length=4, num_tokens=10, num_seqs=4) == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_two_halves_with_global_counts_sum_to_the_whole(mode):
    # class 1 / 12: split the batch into the short row and the long row (micro-batches or ranks)
    rng = np.random.default_rng(0)
    loss, mask = _two_rows()
    loss = np.where(mask, rng.normal(size=mask.shape), np.nan)
    kw = dict(mode=mode, norm_length=6)
    whole = oracle.aggregate(loss, mask, **kw)
    counts = dict(num_tokens=int(mask.sum()), num_seqs=2)
    parts = [oracle.aggregate(loss[i:i + 1], mask[i:i + 1], **kw, **counts) for i in range(2)]
    assert sum(parts) == pytest.approx(whole, rel=1e-13)
    g_whole = oracle.aggregate_grad(loss, mask, 1.0, **kw)
    g_parts = np.vstack([oracle.aggregate_grad(loss[i:i + 1], mask[i:i + 1], 1.0, **kw, **counts) for i in range(2)])
    assert np.array_equal(g_whole, g_parts)


def test_local_counts_would_differ():
    # the bug the global counts prevent: per-micro-batch token means averaged over 2 steps give
    # weights 1/4 and 1/12 instead of 1/8
    loss, mask = _two_rows()
    g = [oracle.aggregate_grad(loss[i:i + 1], mask[i:i + 1], 0.5, mode="token_mean") for i in range(2)]
    assert g[0][0, 1] == pytest.approx(1 / 4) and g[1][0, 1] == pytest.approx(1 / 12)


@st.composite
def agg_cases(draw):
    B = draw(st.integers(1, 4))
    T = draw(st.integers(2, 5))
    loss = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-5, 5, allow_subnormal=False)))
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    split = draw(st.integers(0, B))
    garbage = draw(st.sampled_from([np.nan, np.inf, -np.inf, 1e30]))
    return loss, mask, split, garbage


@settings(deadline=None)
@given(agg_cases(), st.sampled_from(MODES))
def test_partition_invariance_and_masked_garbage(case, mode):
    loss, mask, split, garbage = case
    kw = dict(mode=mode, norm_length=3.0)
    whole = oracle.aggregate(loss, mask, **kw)
    dirty = loss.copy()
    dirty[~mask] = garbage
    assert oracle.aggregate(dirty, mask, **kw) == whole
    counts = dict(num_tokens=int(mask.sum()), num_seqs=mask.shape[0])
    parts = oracle.aggregate(loss[:split], mask[:split], **kw, **counts) + \
        oracle.aggregate(loss[split:], mask[split:], **kw, **counts)
    assert parts == pytest.approx(whole, rel=1e-12, abs=1e-12)


@settings(deadline=None)
@given(agg_cases(), st.sampled_from(MODES), st.floats(-3, 3))
def test_aggregate_grad_matches_finite_differences(case, mode, upstream):
    loss, mask, _, _ = case
    kw = dict(mode=mode, norm_length=3.0)
    g = oracle.aggregate_grad(loss, mask, upstream, **kw)
    h = 1e-6
    num = np.zeros_like(loss)
    for idx in np.ndindex(loss.shape):
        lp, lm = loss.copy(), loss.copy()
        lp[idx] += h
        lm[idx] -= h
        num[idx] = upstream * (oracle.aggregate(lp, mask, **kw) - oracle.aggregate(lm, mask, **kw)) / (2 * h)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)
