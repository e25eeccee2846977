"""oracle.gae and oracle.whiten: hand values, internal gaps, masked invariance, λ = 0 / λ = 1 identities."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30, 100.0]


# --------------------------------------------------------------------------------------------
# GAE, hand values
# --------------------------------------------------------------------------------------------


def test_gae_value_past_eos_is_not_bootstrapped():
    # valid t = 1, 2 (bug-catalogue class 11, ROLL#447). Backwards:
    #   t=2: δ = r_2 + γ·0 − V_2 = 1 + 0 − 0 = 1;  A = 1
    #   t=1: δ = 0 + 1·V_2 − V_1 = 0;             A = 0 + γλ·1 = 0.95
    # V = 100 at the masked position 3 must not be read.
    r = np.array([[0.0, 0.0, 1.0, 0.0]])
    V = np.array([[0.0, 0.0, 0.0, 100.0]])
    mask = np.array([[0, 1, 1, 0]], dtype=bool)
    A, R = oracle.gae(r, V, mask, gamma=1.0, lam=0.95)
    assert A.dtype == np.float64 and R.dtype == np.float64
    assert A[0] == pytest.approx([0.0, 0.95, 1.0, 0.0], abs=1e-15)
    assert R[0] == pytest.approx([0.0, 0.95, 1.0, 0.0], abs=1e-15)


def test_gae_bootstraps_across_an_internal_gap():
    # mask [0, 1, 0, 1] (a tool token at 2): valid t = 1, 3; γ = 0.5, λ = 0.8
    #   t=3: δ = r_3 − V_3 = 1 − 0.25 = 0.75;                 A_3 = 0.75
    #   t=1: δ = r_1 + γ·V_3 − V_1 = 0.5 + 0.125 − 0.5 = 0.125; A_1 = 0.125 + 0.4·0.75 = 0.425
    r = np.array([[9.0, 0.5, 7.0, 1.0]])
    V = np.array([[9.0, 0.5, 7.0, 0.25]])
    mask = np.array([[0, 1, 0, 1]], dtype=bool)
    A, R = oracle.gae(r, V, mask, gamma=0.5, lam=0.8)
    assert A[0] == pytest.approx([0.0, 0.425, 0.0, 0.75], abs=1e-15)
    assert R[0] == pytest.approx([0.0, 0.925, 0.0, 1.0], abs=1e-15)


def test_gae_reward_to_go_skips_tool_token():
    # verl#6376: r = [0, 0, 1] on mask [1, 0, 1] (shifted right by one for mask[:,0] = False),
    # γ = 0.5, λ = 1, V = 0: returns [0.5, –, 1] (the tool token does not reset the recursion)
    r = np.array([[0.0, 0.0, 0.0, 1.0]])
    mask = np.array([[0, 1, 0, 1]], dtype=bool)
    _, R = oracle.gae(r, np.zeros((1, 4)), mask, gamma=0.5, lam=1.0)
    assert R[0] == pytest.approx([0.0, 0.5, 0.0, 1.0])


@pytest.mark.parametrize("garbage", [100.0, np.nan, np.inf, -1e30])
def test_gae_masked_reward_and_value_change_nothing(garbage):
    r = np.array([[0.0, 0.3, 0.0, 1.0, 0.0], [0.0, 0.0, 2.0, 0.0, 0.0]])
    V = np.array([[0.0, 0.1, 0.0, 0.4, 0.0], [0.0, 0.5, 0.2, 0.0, 0.0]])
    mask = np.array([[0, 1, 0, 1, 0], [0, 1, 1, 0, 0]], dtype=bool)
    A, R = oracle.gae(r, V, mask, gamma=0.9, lam=0.95)
    r2, V2 = r.copy(), V.copy()
    r2[~mask] = garbage
    V2[~mask] = garbage
    A2, R2 = oracle.gae(r2, V2, mask, gamma=0.9, lam=0.95)
    assert np.array_equal(A, A2) and np.array_equal(R, R2)


def test_gae_score_on_last_token_gives_advantage_one_everywhere():
    # bug-catalogue class 8: response [t0, t1, EOS, PAD, PAD], score 1, V = 0, γ = λ = 1
    r = np.array([[0.0, 0.0, 0.0, 1.0, 0.0, 0.0]])
    mask = np.array([[0, 1, 1, 1, 0, 0]], dtype=bool)
    A, _ = oracle.gae(r, np.zeros((1, 6)), mask)
    assert A[0] == pytest.approx([0, 1, 1, 1, 0, 0])


# --------------------------------------------------------------------------------------------
# GAE, properties
# --------------------------------------------------------------------------------------------


@st.composite
def gae_cases(draw):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(2, 6))
    elems = st.floats(-3, 3, allow_subnormal=False)
    r = draw(hnp.arrays(np.float64, (B, T), elements=elems))
    V = draw(hnp.arrays(np.float64, (B, T), elements=elems))
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    gamma = draw(st.sampled_from([1.0, 0.99, 0.5, 0.0]))
    garbage = draw(st.sampled_from(GARBAGE))
    return r, V, mask, gamma, garbage


@settings(deadline=None)
@given(gae_cases(), st.sampled_from([0.0, 0.5, 0.95, 1.0]))
def test_gae_masked_positions_never_matter(case, lam):
    r, V, mask, gamma, garbage = case
    A, R = oracle.gae(r, V, mask, gamma=gamma, lam=lam)
    r2, V2 = r.copy(), V.copy()
    r2[~mask] = garbage
    V2[~mask] = garbage
    A2, R2 = oracle.gae(r2, V2, mask, gamma=gamma, lam=lam)
    assert np.array_equal(A, A2) and np.array_equal(R, R2)
    assert np.all(A[~mask] == 0.0) and np.all(R[~mask] == 0.0)


@settings(deadline=None)
@given(gae_cases())
def test_gae_lambda_one_is_discounted_reward_to_go_minus_value(case):
    r, V, mask, gamma, _ = case
    A, R = oracle.gae(r, V, mask, gamma=gamma, lam=1.0)
    for b in range(mask.shape[0]):
        valid = [t for t in range(mask.shape[1]) if mask[b, t]]
        for k, t in enumerate(valid):
            G_t = sum(gamma ** j * r[b, u] for j, u in enumerate(valid[k:]))
            assert R[b, t] == pytest.approx(G_t, abs=1e-9)
            assert A[b, t] == pytest.approx(G_t - V[b, t], abs=1e-9)


@settings(deadline=None)
@given(gae_cases())
def test_gae_lambda_zero_is_td_error(case):
    r, V, mask, gamma, _ = case
    A, _ = oracle.gae(r, V, mask, gamma=gamma, lam=0.0)
    for b in range(mask.shape[0]):
        valid = [t for t in range(mask.shape[1]) if mask[b, t]]
        for k, t in enumerate(valid):
            V_next = V[b, valid[k + 1]] if k + 1 < len(valid) else 0.0
            assert A[b, t] == pytest.approx(r[b, t] + gamma * V_next - V[b, t], abs=1e-12)


# --------------------------------------------------------------------------------------------
# whiten
# --------------------------------------------------------------------------------------------


def test_whiten_ignores_the_pad():
    # x = [1, 2, 3] valid, pad 100: μ = 2, unbiased var = (1 + 0 + 1)/2 = 1 -> [−1, 0, 1]
    x = np.array([[0.0, 1.0, 2.0, 3.0, 100.0]])
    mask = np.array([[0, 1, 1, 1, 0]], dtype=bool)
    out = oracle.whiten(x, mask, eps=0.0)
    assert out[0] == pytest.approx([0.0, -1.0, 0.0, 1.0, 0.0], abs=1e-15)
    assert out[0, 4] == 0.0
    # canonical eps = 1e-8 inside the sqrt
    out = oracle.whiten(x, mask)
    assert out[0, 1:4] == pytest.approx(np.array([-1.0, 0.0, 1.0]) / math.sqrt(1 + 1e-8), abs=1e-15)


def test_whiten_without_mean_shift_keeps_the_mean():
    # shift_mean=False: (x − μ)/σ + μ = [1, 2, 3] with σ = 1 (the reward-whitening convention)
    x = np.array([[0.0, 1.0, 2.0, 3.0, 100.0]])
    mask = np.array([[0, 1, 1, 1, 0]], dtype=bool)
    out = oracle.whiten(x, mask, shift_mean=False, eps=0.0)
    assert out[0] == pytest.approx([0.0, 1.0, 2.0, 3.0, 0.0], abs=1e-15)
    assert out[0, 1:4].mean() == pytest.approx(2.0)


def test_whiten_biased_variance_and_batch_scope():
    # values spread over two rows: [1, 3] and [5]; μ = 3, Σ(x − μ)² = 8, biased var = 8/3
    x = np.array([[0.0, 1.0, 3.0], [0.0, 5.0, -7.0]])
    mask = np.array([[0, 1, 1], [0, 1, 0]], dtype=bool)
    out = oracle.whiten(x, mask, std_ddof=0, eps=0.0)
    s = math.sqrt(8 / 3)
    assert out == pytest.approx(np.array([[0.0, -2 / s, 0.0], [0.0, 2 / s, 0.0]]), abs=1e-15)


def test_whiten_degenerate_counts_are_finite():
    mask = np.array([[0, 1, 0]], dtype=bool)
    x = np.array([[np.nan, 4.0, np.inf]])
    # one valid value, ddof 1: var := 0, x − μ = 0 -> 0 (even with eps = 0)
    assert np.array_equal(oracle.whiten(x, mask, eps=0.0), np.zeros((1, 3)))
    assert np.array_equal(oracle.whiten(x, mask, shift_mean=False, eps=0.0), np.array([[0.0, 4.0, 0.0]]))
    # no valid value at all
    assert np.array_equal(oracle.whiten(x, np.zeros((1, 3), dtype=bool)), np.zeros((1, 3)))


@settings(deadline=None)
@given(gae_cases())
def test_whiten_moments_and_masked_invariance(case):
    x, _, mask, _, garbage = case
    out = oracle.whiten(x, mask, eps=0.0)
    dirty = x.copy()
    dirty[~mask] = garbage
    assert np.array_equal(out, oracle.whiten(dirty, mask, eps=0.0))
    vals = out[mask]
    spread = x[mask].max() - x[mask].min() if vals.size else 0.0
    if vals.size >= 2 and spread > 1e-6:
        assert vals.mean() == pytest.approx(0.0, abs=1e-9)
        assert vals.var(ddof=1) == pytest.approx(1.0, abs=1e-9)
