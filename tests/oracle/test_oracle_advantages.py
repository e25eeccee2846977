"""oracle.reinforce_advantages / rloo_advantages / grpo_advantages: hand values and invariants."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle

# --------------------------------------------------------------------------------------------
# GRPO, hand values
# --------------------------------------------------------------------------------------------


def test_grpo_unbiased_std_no_eps():
    # [1, 0, 0, 0]: μ = 1/4; Σ(r − μ)² = 9/16 + 3/16 = 3/4; unbiased σ = sqrt((3/4)/3) = 1/2
    # A_1 = (3/4)/(1/2) = 1.5, A_others = (−1/4)/(1/2) = −0.5
    A = oracle.grpo_advantages(np.array([1.0, 0.0, 0.0, 0.0]), 4, std_ddof=1, eps=0.0)
    assert A.dtype == np.float64
    assert A == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-15)


def test_grpo_biased_std_no_eps():
    # biased σ = sqrt((3/4)/4) = sqrt(3)/4; A_1 = (3/4)/(sqrt(3)/4) = sqrt(3)
    A = oracle.grpo_advantages(np.array([1.0, 0.0, 0.0, 0.0]), 4, std_ddof=0, eps=0.0)
    assert A[0] == pytest.approx(math.sqrt(3), abs=1e-14)
    assert A[0] == pytest.approx(1.7320508, abs=1e-7)
    assert A[1] == pytest.approx(-1 / math.sqrt(3), abs=1e-14)


def test_grpo_canonical_eps_on_the_std():
    # eps is added to σ, not to the variance: 0.75 / (0.5 + 1e-6)
    A = oracle.grpo_advantages(np.array([1.0, 0.0, 0.0, 0.0]), 4)
    assert A[0] == pytest.approx(0.75 / 0.500001, rel=1e-14)


@pytest.mark.parametrize("eps", [0.0, 1e-6])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("value", [1.0, 0.1, -3.7, 1e-7])
def test_grpo_all_equal_group_is_exactly_zero(eps, scale, value):
    A = oracle.grpo_advantages(np.full(6, value), 3, scale=scale, eps=eps)
    assert np.all(A == 0.0)
    assert not np.any(np.isnan(A))


def test_grpo_scales_on_two_groups():
    r = np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    # none: r − μ_g with μ = 1/4 and 3/4
    none = np.array([0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75])
    assert oracle.grpo_advantages(r, 4, scale="none") == pytest.approx(none, abs=1e-15)
    # group: both groups have unbiased σ_g = 1/2 (Σ(r − μ)² = 3/4 in each, /3 = 1/4) -> × 2
    assert oracle.grpo_advantages(r, 4, scale="group", eps=0.0) == pytest.approx(2 * none, abs=1e-15)
    # batch: 4 ones, 4 zeros, mean 1/2, Σ(r − 1/2)² = 8/4 = 2, unbiased var = 2/7,
    # σ_batch = sqrt(2/7) = 0.534522...
    sigma_batch = math.sqrt(2 / 7)
    assert sigma_batch == pytest.approx(0.5345, abs=1e-4)
    assert oracle.grpo_advantages(r, 4, scale="batch", eps=0.0) == pytest.approx(none / sigma_batch, abs=1e-14)


def test_grpo_singleton_rule():
    r = np.array([0.3, -2.0, 5.0])
    assert np.all(oracle.grpo_advantages(r, 1) == 0.0)
    for scale in ("group", "batch", "none"):
        assert np.all(oracle.grpo_advantages(r, 1, scale=scale, eps=0.0) == 0.0)
    # "raw" (verl core_algos.py:315-317): a singleton's mean is 0 and its std 1
    assert np.array_equal(oracle.grpo_advantages(r, 1, scale="none", singleton="raw"), r)
    assert np.allclose(oracle.grpo_advantages(r, 1, singleton="raw", eps=1e-6), r / (1 + 1e-6), rtol=1e-15)
    assert np.array_equal(oracle.grpo_advantages(r, 1, singleton="raw", eps=0.0), r)
    # batch std of [0.3, -2, 5] (ddof 1): mean 1.1, squares .64 + 9.61 + 15.21 = 25.46, /2 -> sqrt(12.73)
    sigma_batch = np.sqrt(12.73)
    assert np.allclose(oracle.grpo_advantages(r, 1, scale="batch", singleton="raw", eps=0.0), r / sigma_batch, rtol=1e-12)


def test_grpo_ddof_beyond_group_size_gives_zero_std():
    # n − ddof <= 0 -> σ = 0; with eps = 0 the zero denominator gives 0, never inf/NaN
    A = oracle.grpo_advantages(np.array([1.0, 0.0]), 2, std_ddof=2, eps=0.0)
    assert np.all(A == 0.0)
    # with eps the numerator survives: (1/2)/eps
    A = oracle.grpo_advantages(np.array([1.0, 0.0]), 2, std_ddof=2, eps=0.5)
    assert A == pytest.approx([1.0, -1.0])


# --------------------------------------------------------------------------------------------
# RLOO and REINFORCE, hand values
# --------------------------------------------------------------------------------------------


def test_rloo_one_hot_group():
    # A_1 = 1 − 0 = 1; A_j = 0 − (1 + 0 + 0)/3 = −1/3
    A = oracle.rloo_advantages(np.array([1.0, 0.0, 0.0, 0.0]), 4)
    assert A == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3], abs=1e-15)


def test_rloo_two_groups_and_singletons():
    A = oracle.rloo_advantages(np.array([2.0, 4.0, 0.0, 3.0]), 2)
    # group 1: 2 − 4 = −2, 4 − 2 = 2; group 2: −3, 3
    assert A == pytest.approx([-2.0, 2.0, -3.0, 3.0])
    assert np.all(oracle.rloo_advantages(np.array([2.0, 4.0]), 1) == 0.0)


def test_reinforce_baselines():
    r = np.array([1.0, 2.0, 6.0])
    assert np.array_equal(oracle.reinforce_advantages(r), r)
    assert oracle.reinforce_advantages(r, baseline="batch_mean") == pytest.approx([-2.0, -1.0, 3.0])
    assert oracle.reinforce_advantages(np.array([4.5]), baseline="batch_mean")[0] == 0.0
    assert oracle.reinforce_advantages(np.zeros(0), baseline="batch_mean").shape == (0,)


def test_float32_and_list_inputs_are_computed_in_float64():
    r32 = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    A = oracle.rloo_advantages(r32, 4)
    assert A.dtype == np.float64
    r = r32.astype(np.float64)  # the oracle computes on the rounded float32 values
    assert A[0] == r[0] - (r[1] + r[2] + r[3]) / 3
    # nested list: [1, 0], μ = 1/2, unbiased σ = sqrt((1/4 + 1/4)/1) = sqrt(1/2); A = ±(1/2)/sqrt(1/2) = ±sqrt(1/2)
    assert oracle.grpo_advantages([1.0, 0.0], 2, eps=0.0) == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], abs=1e-15)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@st.composite
def grouped_rewards(draw):
    G = draw(st.integers(1, 4))
    n_groups = draw(st.integers(1, 3))
    # a small alphabet makes ties and all-equal groups frequent
    values = st.one_of(st.sampled_from([0.0, 1.0, 0.5, -1.0]), st.floats(-10, 10, allow_subnormal=False))
    r = np.array(draw(st.lists(values, min_size=G * n_groups, max_size=G * n_groups)), dtype=np.float64)
    perms = [draw(st.permutations(range(G))) for _ in range(n_groups)]
    order = np.array([g * G + p for g, perm in enumerate(perms) for p in perm], dtype=np.int64)
    return r, G, order


@settings(deadline=None)
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]), st.sampled_from([0, 1]),
       st.sampled_from([0.0, 1e-6]))
def test_grpo_is_permutation_equivariant_within_groups(case, scale, ddof, eps):
    r, G, order = case
    A = oracle.grpo_advantages(r, G, scale=scale, std_ddof=ddof, eps=eps)
    A_perm = oracle.grpo_advantages(r[order], G, scale=scale, std_ddof=ddof, eps=eps)
    np.testing.assert_allclose(A_perm, A[order], rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(A))


@settings(deadline=None)
@given(grouped_rewards())
def test_rloo_is_permutation_equivariant_and_centred(case):
    r, G, order = case
    A = oracle.rloo_advantages(r, G)
    np.testing.assert_allclose(oracle.rloo_advantages(r[order], G), A[order], rtol=1e-12, atol=1e-12)
    # Σ_{i∈g} A_i = 0, and A_i = G/(G−1)·(r_i − μ_g) for G >= 2
    for g in range(len(r) // G):
        block = slice(g * G, (g + 1) * G)
        assert abs(A[block].sum()) <= 1e-9
        if G >= 2:
            mu = r[block].mean()
            np.testing.assert_allclose(A[block], G / (G - 1) * (r[block] - mu), rtol=1e-9, atol=1e-9)


@settings(deadline=None)
@given(grouped_rewards(), st.floats(-5, 5))
def test_grpo_none_is_translation_invariant(case, shift):
    r, G, _ = case
    np.testing.assert_allclose(oracle.grpo_advantages(r + shift, G, scale="none"),
                               oracle.grpo_advantages(r, G, scale="none"), atol=1e-9)
