"""oracle.kl_penalty (+ grad) and oracle.rlhf_token_rewards: Schulman's estimators by hand, clamps, placement."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]
LOG2 = math.log(2.0)


def _one_token(d, ref=-1.0):
    """logp, ref_logp, mask with one valid token at position 1 where logp − ref_logp = d."""
    logp = np.array([[0.0, ref + d]])
    ref_logp = np.array([[0.0, ref]])
    return logp, ref_logp, np.array([[0, 1]], dtype=bool)


# --------------------------------------------------------------------------------------------
# kl_penalty, hand values
# --------------------------------------------------------------------------------------------


def test_estimators_at_log_two():
    logp, ref, mask = _one_token(LOG2)
    # k1 = d = log 2
    assert oracle.kl_penalty(logp, ref, mask, estimator="k1")[0, 1] == pytest.approx(LOG2, abs=1e-15)
    # k2 = d²/2 = (log 2)²/2
    assert oracle.kl_penalty(logp, ref, mask, estimator="k2")[0, 1] == pytest.approx(LOG2**2 / 2, abs=1e-15)
    # k3 = e^(−d) − 1 + d = 1/2 − 1 + log 2 = 0.19315
    k3 = oracle.kl_penalty(logp, ref, mask, estimator="k3")[0, 1]
    assert k3 == pytest.approx(0.5 - 1 + LOG2, abs=1e-15)
    assert k3 == pytest.approx(0.193147, abs=1e-6)


def test_estimators_differ_and_default_is_k1():
    logp, ref, mask = _one_token(0.4)
    values = {e: oracle.kl_penalty(logp, ref, mask, estimator=e)[0, 1] for e in ("k1", "k2", "k3")}
    assert len(set(values.values())) == 3  # catches an if/if fall-through
    assert oracle.kl_penalty(logp, ref, mask)[0, 1] == values["k1"]


def test_kl_grads_by_hand():
    # ∂k1/∂logp = 1, ∂k2/∂logp = d, ∂k3/∂logp = 1 − e^(−d) = 1/2 at d = log 2; upstream 2
    logp, ref, mask = _one_token(LOG2)
    up = np.array([[np.nan, 2.0]])  # upstream at masked positions is ignored
    assert oracle.kl_penalty_grad(logp, ref, mask, up, estimator="k1")[0] == pytest.approx([0, 2.0])
    assert oracle.kl_penalty_grad(logp, ref, mask, up, estimator="k2")[0] == pytest.approx([0, 2 * LOG2])
    assert oracle.kl_penalty_grad(logp, ref, mask, up, estimator="k3")[0] == pytest.approx([0, 1.0])


def test_log_ratio_clamp():
    # d = 30 clipped to 20: k1 = 20 and no gradient outside the clamp
    logp, ref, mask = _one_token(30.0)
    assert oracle.kl_penalty(logp, ref, mask, log_ratio_clamp=20.0)[0, 1] == 20.0
    assert oracle.kl_penalty_grad(logp, ref, mask, np.ones((1, 2)), log_ratio_clamp=20.0)[0, 1] == 0.0
    # d = −30, k3 with the input clamp: e^20 − 1 − 20
    logp, ref, mask = _one_token(-30.0)
    k3 = oracle.kl_penalty(logp, ref, mask, estimator="k3", log_ratio_clamp=20.0)[0, 1]
    assert k3 == pytest.approx(math.exp(20) - 21, rel=1e-14)
    # inside the clamp the gradient passes: ∂k2/∂logp = d = 5
    logp, ref, mask = _one_token(5.0)
    assert oracle.kl_penalty_grad(logp, ref, mask, np.ones((1, 2)), estimator="k2", log_ratio_clamp=20.0)[0, 1] == 5.0


def test_output_clamp():
    # k3 at d = −30 is e^30 − 31, clamped to 10, gradient 0; k1 = −30 clamped to −10
    logp, ref, mask = _one_token(-30.0)
    assert oracle.kl_penalty(logp, ref, mask, estimator="k3", clamp=10.0)[0, 1] == 10.0
    assert oracle.kl_penalty_grad(logp, ref, mask, np.ones((1, 2)), estimator="k3", clamp=10.0)[0, 1] == 0.0
    assert oracle.kl_penalty(logp, ref, mask, estimator="k1", clamp=10.0)[0, 1] == -10.0
    # small value: clamp inactive, gradient 1 − e^(−d)
    logp, ref, mask = _one_token(0.1)
    g = oracle.kl_penalty_grad(logp, ref, mask, np.ones((1, 2)), estimator="k3", clamp=10.0)[0, 1]
    assert g == pytest.approx(1 - math.exp(-0.1), abs=1e-15)


def test_k3_stays_finite_and_nonnegative_on_extreme_valid_ratios():
    # bug-catalogue class 16: valid log-ratios [−30, 0, 30], pads of 1e4
    logp = np.array([[0.0, -30.0, 0.0, 30.0, 1e4]])
    ref = np.zeros((1, 5))
    mask = np.array([[0, 1, 1, 1, 0]], dtype=bool)
    k3 = oracle.kl_penalty(logp, ref, mask, estimator="k3")
    assert np.all(np.isfinite(k3)) and np.all(k3 >= 0)
    assert k3[0, 1] == pytest.approx(math.exp(30) - 31, rel=1e-14)
    assert k3[0, 2] == 0.0 and k3[0, 4] == 0.0
    assert k3[0, 3] == pytest.approx(math.exp(-30) - 1 + 30, rel=1e-14)


# --------------------------------------------------------------------------------------------
# kl_penalty, properties
# --------------------------------------------------------------------------------------------


@st.composite
def kl_cases(draw):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(2, 5))
    logp = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-6, 0, allow_subnormal=False)))
    ref = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-6, 0, allow_subnormal=False)))
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    up = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-2, 2, allow_subnormal=False)))
    return logp, ref, mask, up


@settings(deadline=None)
@given(kl_cases(), st.sampled_from(["k1", "k2", "k3"]), st.sampled_from(GARBAGE))
def test_kl_masked_positions_never_matter(case, estimator, garbage):
    logp, ref, mask, up = case
    dirty = [a.copy() for a in (logp, ref, up)]
    for a in dirty:
        a[~mask] = garbage
    kw = dict(estimator=estimator, log_ratio_clamp=3.0, clamp=2.0)
    assert np.array_equal(oracle.kl_penalty(logp, ref, mask, **kw), oracle.kl_penalty(dirty[0], dirty[1], mask, **kw))
    assert np.array_equal(oracle.kl_penalty_grad(logp, ref, mask, up, **kw),
                          oracle.kl_penalty_grad(dirty[0], dirty[1], mask, dirty[2], **kw))


@settings(deadline=None)
@given(kl_cases())
def test_k2_k3_nonnegative(case):
    logp, ref, mask, _ = case
    assert np.all(oracle.kl_penalty(logp, ref, mask, estimator="k2") >= 0)
    assert np.all(oracle.kl_penalty(logp, ref, mask, estimator="k3") >= 0)


def _numeric_vjp(f, x, upstream, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = np.sum(upstream * (f(xp) - f(xm))) / (2 * h)
    return g


@settings(deadline=None)
@given(kl_cases(), st.sampled_from(["k1", "k2", "k3"]),
       st.sampled_from([(None, None), (1.5, None), (None, 0.5), (2.0, 1.0)]))
def test_kl_grad_matches_finite_differences(case, estimator, clamps):
    logp, ref, mask, up = case
    lrc, clamp = clamps
    d = (logp - ref)[mask]
    kw = dict(estimator=estimator, log_ratio_clamp=lrc, clamp=clamp)
    # keep away from the clamp kinks (the derivative jumps there)
    if lrc is not None:
        assume(np.all(np.abs(np.abs(d) - lrc) > 1e-4))
    if clamp is not None:
        k = oracle.kl_penalty(logp, ref, mask, **kw)[mask]
        assume(np.all(np.abs(np.abs(k) - clamp) > 1e-4))
    g = oracle.kl_penalty_grad(logp, ref, mask, up, **kw)
    num = _numeric_vjp(lambda x: oracle.kl_penalty(x, ref, mask, **kw), logp, up)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------
# rlhf_token_rewards
# --------------------------------------------------------------------------------------------


def test_score_lands_on_last_valid_token_left_and_right_padded():
    scores = np.array([2.0, -1.0])
    zeros = np.zeros((2, 6))
    right = np.array([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 0, 0]], dtype=bool)
    left = np.array([[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1]], dtype=bool)
    R = oracle.rlhf_token_rewards(scores, zeros, zeros, right, kl_coef=0.1)
    expected = np.zeros((2, 6))
    expected[0, 3], expected[1, 3] = 2.0, -1.0
    assert np.array_equal(R, expected)
    R = oracle.rlhf_token_rewards(scores, zeros, zeros, left, kl_coef=0.1)
    expected = np.zeros((2, 6))
    expected[0, 5], expected[1, 5] = 2.0, -1.0
    assert np.array_equal(R, expected)


def test_kl_part_is_minus_beta_k():
    # one row, valid t = 1, 2, 3; d = [log 2, −0.5, 0.2]; β = 0.05; score 1 on t = 3
    d = np.array([LOG2, -0.5, 0.2])
    ref = np.array([[0.0, -1.0, -2.0, -3.0, 0.0]])
    logp = ref.copy()
    logp[0, 1:4] += d
    mask = np.array([[0, 1, 1, 1, 0]], dtype=bool)
    beta = 0.05
    R = oracle.rlhf_token_rewards(np.array([1.0]), logp, ref, mask, kl_coef=beta)
    assert R[0] == pytest.approx([0.0, -beta * LOG2, beta * 0.5, -beta * 0.2 + 1.0, 0.0], abs=1e-15)
    # k3 at d = log 2 is 1/2 − 1 + log 2
    R = oracle.rlhf_token_rewards(np.array([0.0]), logp, ref, mask, kl_coef=beta, estimator="k3")
    assert R[0, 1] == pytest.approx(-beta * (0.5 - 1 + LOG2), abs=1e-15)


def test_rlhf_rewards_empty_row_and_masked_garbage():
    logp = np.array([[np.nan, np.inf, 0.0], [0.0, -0.3, -1e30]])
    ref = np.array([[1e30, np.nan, 0.0], [0.0, -0.1, np.nan]])
    mask = np.array([[0, 0, 0], [0, 1, 0]], dtype=bool)
    R = oracle.rlhf_token_rewards(np.array([5.0, 3.0]), logp, ref, mask, kl_coef=1.0)
    # row 0 has no valid token: all 0 (the score is dropped); row 1: −(−0.3 + 0.1) + 3 at t = 1
    assert R == pytest.approx(np.array([[0.0, 0.0, 0.0], [0.0, 0.2 + 3.0, 0.0]]), abs=1e-15)


@pytest.mark.parametrize("d", [-5.5e-163, 1e-300, -1e-9, 1e-9, 1e-6])
def test_k3_near_zero_is_nonnegative_and_close_to_half_d_squared(d):
    # k3 = e^(−d) − 1 + d = d²/2 − d³/6 + … ; a literal exp(−d) − 1 + d cancels to ±ulp-sized
    # garbage (e.g. −5.5e-163 at d = −5.5e-163); expm1 keeps k3 >= 0 and ≈ d²/2
    logp, ref, mask = _one_token(d, ref=0.0)
    d_eff = logp[0, 1] - ref[0, 1]
    k3 = oracle.kl_penalty(logp, ref, mask, estimator="k3")[0, 1]
    assert k3 >= 0.0
    assert k3 == pytest.approx(d_eff**2 / 2 - d_eff**3 / 6, rel=1e-6, abs=1e-300)
