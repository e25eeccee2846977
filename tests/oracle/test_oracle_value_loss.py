"""oracle.value_token_loss (+ grad): the ½ factor, the clipped branch, the gradient w.r.t. values."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]


def _one(V, V_old, R):
    return np.array([[0.0, V]]), np.array([[0.0, V_old]]), np.array([[0.0, R]]), np.array([[0, 1]], dtype=bool)


UP = np.array([[0.0, 1.0]])


def test_half_squared_error_without_clip():
    # ½ (V − R)² = ½ · 3² = 4.5; ∂/∂V = V − R = 3
    V, V_old, R, m = _one(4.0, 100.0, 1.0)
    assert oracle.value_token_loss(V, V_old, R, m)[0, 1] == 4.5
    assert oracle.value_token_loss_grad(V, V_old, R, m, UP)[0, 1] == 3.0


def test_clipped_branch_selected_has_zero_gradient():
    # V = 2, V_old = 0, R = 3, ε = 0.5: V_c = 0.5; ½(2 − 3)² = 0.5 < ½(0.5 − 3)² = 3.125 -> clipped,
    # V_c is constant in V outside the clip range -> gradient 0
    V, V_old, R, m = _one(2.0, 0.0, 3.0)
    assert oracle.value_token_loss(V, V_old, R, m, clip=0.5)[0, 1] == pytest.approx(3.125)
    assert oracle.value_token_loss_grad(V, V_old, R, m, UP, clip=0.5)[0, 1] == 0.0


def test_unclipped_branch_when_it_is_larger():
    # V = 2, V_old = 0, R = −1, ε = 0.5: V_c = 0.5; ½·9 = 4.5 > ½·2.25 -> unclipped, gradient 3·u
    V, V_old, R, m = _one(2.0, 0.0, -1.0)
    assert oracle.value_token_loss(V, V_old, R, m, clip=0.5)[0, 1] == 4.5
    assert oracle.value_token_loss_grad(V, V_old, R, m, np.array([[0.0, 2.0]]), clip=0.5)[0, 1] == 6.0


def test_inside_the_clip_range_equals_unclipped():
    # |V − V_old| = 0.1 <= 0.2: V_c = V, both branches tie -> unclipped gradient V − R = −0.9
    V, V_old, R, m = _one(0.1, 0.0, 1.0)
    assert oracle.value_token_loss(V, V_old, R, m, clip=0.2)[0, 1] == pytest.approx(0.405)
    assert oracle.value_token_loss_grad(V, V_old, R, m, UP, clip=0.2)[0, 1] == pytest.approx(-0.9)


@st.composite
def value_cases(draw):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(2, 5))
    el = st.floats(-3, 3, allow_subnormal=False)
    arrs = [draw(hnp.arrays(np.float64, (B, T), elements=el)) for _ in range(4)]
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    clip = draw(st.sampled_from([None, 0.2, 1.0]))
    return (*arrs, mask, clip, draw(st.sampled_from(GARBAGE)))


@settings(deadline=None)
@given(value_cases())
def test_value_masked_positions_never_matter(case):
    V, V_old, R, up, mask, clip, garbage = case
    dirty = [a.copy() for a in (V, V_old, R, up)]
    for a in dirty:
        a[~mask] = garbage
    assert np.array_equal(oracle.value_token_loss(V, V_old, R, mask, clip=clip),
                          oracle.value_token_loss(*dirty[:3], mask, clip=clip))
    g = oracle.value_token_loss_grad(V, V_old, R, mask, up, clip=clip)
    assert np.array_equal(g, oracle.value_token_loss_grad(*dirty[:3], mask, dirty[3], clip=clip))
    assert np.all(g[~mask] == 0.0)


@settings(deadline=None)
@given(value_cases())
def test_value_grad_matches_finite_differences(case):
    V, V_old, R, up, mask, clip, _ = case
    if clip is not None:
        # away from the kinks: the clip edges |V − V_old| = ε and the branch switch
        # |V − R| = |V_c − R|
        dv = np.abs(V - V_old)[mask]
        assume(np.all(np.abs(dv - clip) > 1e-4))
        V_c = V_old + np.clip(V - V_old, -clip, clip)
        gap = np.abs(np.abs(V - R) - np.abs(V_c - R))[mask & (np.abs(V - V_old) > clip)]
        assume(np.all(gap > 1e-4))
    g = oracle.value_token_loss_grad(V, V_old, R, mask, up, clip=clip)
    h = 1e-6
    num = np.zeros_like(V)
    for idx in np.ndindex(V.shape):
        Vp, Vm = V.copy(), V.copy()
        Vp[idx] += h
        Vm[idx] -= h
        num[idx] = np.sum(up * (oracle.value_token_loss(Vp, V_old, R, mask, clip=clip)
                                - oracle.value_token_loss(Vm, V_old, R, mask, clip=clip))) / (2 * h)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)
