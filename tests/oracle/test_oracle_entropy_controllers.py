"""Oracle: the spec v1.1 entropy terms (entropy.top_mask, loss.entropy) and coefficient controllers
(ctrl.kl, ctrl.entropy). Expected values are worked by hand from the spec sections, from the papers'
formulas, or come from an independent implementation (numpy.quantile's linear method)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import oracle
from oracle.entropy_terms import entropy_quantile

# ---------------------------------------------------------------------------------------------
# entropy.top_mask
# ---------------------------------------------------------------------------------------------

E = np.array([[0.0, 1.0, 2.5, 0.5, 2.0, 1.5]])  # valid: 1.0, 2.5, 0.5, 2.0, 1.5 (n = 5)
M = np.array([[False, True, True, True, True, True]])


@pytest.mark.parametrize("rho,kept", [
    (1.0, [1.0, 2.5, 0.5, 2.0, 1.5]),  # tau = min
    (0.5, [2.5, 2.0, 1.5]),  # p = 2: tau = 1.5, the tie kept
    (0.3, [2.5, 2.0]),  # p = 2.8: tau = 1.5 + 0.8 * 0.5 = 1.9
    (0.2, [2.5]),  # p = 3.2: tau = 2.1
    (0.0, [2.5]),  # tau = max
])
def test_worked_table_of_the_spec(rho, kept):
    keep = oracle.entropy_top_mask(E, M, rho=rho)
    assert sorted(E[keep].tolist()) == sorted(kept)


def test_quantile_is_numpy_linear_on_random_pools():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 50):
        x = rng.exponential(1.0, size=n)
        for q in (0.0, 0.05, 0.2, 0.5, 0.8, 1.0, 1 / 3):
            assert entropy_quantile(x.tolist(), q) == pytest.approx(float(np.quantile(x, q, method="linear")), rel=1e-12)
    assert entropy_quantile([], 0.5) is None


def test_kept_count_for_distinct_entropies():
    """With distinct entropies the kept count is n − ⌈p⌉, p = (1 − ρ)(n − 1): a fraction ρ of the
    tokens, up to one."""
    rng = np.random.default_rng(1)
    for n in (5, 10, 37):
        H = np.concatenate([[0.0], rng.permutation(np.arange(1, n + 1) / 8.0)])[None, :]
        m = np.arange(n + 1)[None, :] > 0
        for rho in (0.0, 0.1, 0.2, 0.5, 0.9, 1.0):
            p = (1 - rho) * (n - 1)
            assert oracle.entropy_top_mask(H, m, rho=rho).sum() == n - math.ceil(p - 1e-12)


def test_mask_grows_with_rho():
    rng = np.random.default_rng(2)
    H = np.round(rng.exponential(1.0, size=(4, 9)) * 4) / 4  # ties
    m = rng.random((4, 9)) < 0.7
    m[:, 0] = False
    previous = np.zeros_like(m)
    for rho in np.linspace(0.0, 1.0, 11):
        keep = oracle.entropy_top_mask(H, m, rho=float(rho))
        assert not (previous & ~keep).any() and not (keep & ~m).any()
        previous = keep
    assert np.array_equal(previous, m)


def test_parts_with_the_pool_give_the_whole_batch():
    """A confident rank (rows 2-3) and an uncertain one (rows 0-1): each rank given the batch's pool
    computes the batch's mask; each rank's own quantile does not (rank 2-3 keeps its top half)."""
    H = np.array([[0.0, 2.0, 3.0, 2.5], [0.0, 1.5, 2.25, 3.5], [0.0, 0.25, 0.5, 0.0], [0.0, 0.75, 0.125, 0.375]])
    m = np.array([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 1]], dtype=bool)
    whole = oracle.entropy_top_mask(H, m, rho=0.5)
    pool = H[m]
    joined = np.concatenate([oracle.entropy_top_mask(H[a:b], m[a:b], rho=0.5, pooled_entropy=pool) for a, b in ((0, 2), (2, 4))])
    assert np.array_equal(joined, whole)
    assert not whole[2:].any()  # every token of the confident rank is below the batch's median
    assert oracle.entropy_top_mask(H[2:], m[2:], rho=0.5).any()  # its own median keeps some


def test_masked_positions_are_never_read():
    H = np.array([[np.nan, 1.0, np.inf, 2.0, -np.inf]])
    m = np.array([[False, True, False, True, False]])
    assert oracle.entropy_top_mask(H, m, rho=0.0).tolist() == [[False, False, False, True, False]]


@pytest.mark.parametrize("kwargs,exc,arg", [
    ({"rho": 1.5}, ValueError, "rho"),
    ({"rho": -0.1}, ValueError, "rho"),
    ({"rho": "0.2"}, TypeError, "rho"),
    ({"pooled_entropy": [[1.0]]}, ValueError, "pooled_entropy"),
    ({"pooled_entropy": [1.0, np.nan]}, ValueError, "pooled_entropy"),
    ({"pooled_entropy": 1.0}, TypeError, "pooled_entropy"),
])
def test_top_mask_errors(kwargs, exc, arg):
    with pytest.raises(exc, match=rf"^entropy_top_mask: {arg}:"):
        oracle.entropy_top_mask(E, M, **kwargs)


# ---------------------------------------------------------------------------------------------
# loss.entropy
# ---------------------------------------------------------------------------------------------

H2 = np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 0.0]])
M2 = np.array([[False, True, True], [False, True, False]])


@pytest.mark.parametrize("mode,value", [
    ("token_mean", -0.1 * 6 / 3),
    ("seq_mean_token_mean", -0.1 * (1.5 + 3.0) / 2),
    ("seq_mean_token_sum", -0.1 * 6 / 2),
    ("token_sum", -0.1 * 6),
])
def test_bonus_worked_values(mode, value):
    assert oracle.entropy_bonus(H2, M2, entropy_coef=0.1, mode=mode) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "token_sum"])
def test_bonus_gradient_is_the_finite_difference(mode):
    """The bonus is linear in H: (L(H + e_bt) − L(H)) is exactly the gradient at (b, t)."""
    g = oracle.entropy_bonus_grad(H2, M2, 1.0, entropy_coef=0.1, mode=mode)
    base = oracle.entropy_bonus(H2, M2, entropy_coef=0.1, mode=mode)
    for b, t in zip(*np.nonzero(M2)):
        bumped = H2.copy()
        bumped[b, t] += 1.0
        assert oracle.entropy_bonus(bumped, M2, entropy_coef=0.1, mode=mode) - base == pytest.approx(g[b, t], abs=1e-15)
    assert not g[~M2].any()


def test_bonus_parts_sum_to_the_step_with_global_counts():
    parts = [(H2[:1], M2[:1]), (H2[1:], M2[1:])]
    kw = {"entropy_coef": 0.1, "mode": "token_mean", "num_tokens": 3, "num_seqs": 2}
    total = sum(oracle.entropy_bonus(h, m, **kw) for h, m in parts)
    assert total == pytest.approx(oracle.entropy_bonus(H2, M2, entropy_coef=0.1, mode="token_mean"), rel=1e-15)
    local = sum(oracle.entropy_bonus(h, m, entropy_coef=0.1, mode="token_mean") for h, m in parts)
    assert local != pytest.approx(total)  # per-part means: 1.5 + 3 instead of 6/3


# ---------------------------------------------------------------------------------------------
# ctrl.kl (Ziegler et al. 2019)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kl,expected", [
    (6.0, 0.1),  # at target
    (6.6, 0.1 * (1 + 0.1 * 0.1)),  # e = 0.1
    (5.4, 0.1 * (1 - 0.1 * 0.1)),  # e = -0.1
    (7.2, 0.1 * (1 + 0.2 * 0.1)),  # e = 0.2, the clip's edge
    (100.0, 0.1 * (1 + 0.2 * 0.1)),  # clipped
    (-3.0, 0.1 * (1 - 0.2 * 0.1)),  # clipped (a negative k1 estimate)
])
def test_kl_controller_worked_values(kl, expected):
    got = oracle.kl_controller_update(0.1, kl, 1000, target=6.0, horizon=10000)
    assert got == pytest.approx(expected, rel=1e-14)


def test_kl_controller_is_continuous_and_monotone_in_the_kl():
    kls = np.linspace(-2.0, 20.0, 221)
    betas = [float(oracle.kl_controller_update(0.05, k, 512, target=6.0, horizon=10000)) for k in kls]
    assert all(a <= b for a, b in itertools.pairwise(betas))
    assert max(abs(a - b) for a, b in itertools.pairwise(betas)) < 0.05 * 512 / 10000 * (kls[1] - kls[0]) / 6.0 + 1e-15


def test_kl_controller_trajectory():
    """Three updates with the KL far above target: β grows by the factor 1 + 0.2·n/H each time."""
    beta = 0.2
    for _ in range(3):
        beta = oracle.kl_controller_update(beta, 60.0, 256, target=6.0, horizon=10000)
    assert beta == pytest.approx(0.2 * (1 + 0.2 * 256 / 10000) ** 3, rel=1e-14)


@pytest.mark.parametrize("args,kw,exc,arg", [
    ((-0.1, 1.0, 10), {}, ValueError, "kl_coef"),
    ((0.1, 1.0, 1.5), {}, TypeError, "n_steps"),
    ((0.1, 1.0, -1), {}, ValueError, "n_steps"),
    ((0.1, 1.0, 10), {"target": 0.0}, ValueError, "target"),
    ((0.1, 1.0, 10), {"horizon": -1.0}, ValueError, "horizon"),
    ((0.1, float("nan"), 10), {}, ValueError, "current_kl"),
])
def test_kl_controller_errors(args, kw, exc, arg):
    with pytest.raises(exc, match=rf"^kl_controller_update: {arg}:"):
        oracle.kl_controller_update(*args, **{"target": 6.0, "horizon": 10000, **kw})


# ---------------------------------------------------------------------------------------------
# ctrl.entropy (Skywork-OR1, TRL use_adaptive_entropy)
# ---------------------------------------------------------------------------------------------


def test_entropy_controller_trajectory():
    """TRL's loop: each step applies entropy_coef_applied(c, H_prev), then updates c with its own H.
    Entropies 0.5, 0.15, 0.1, 0.3 against the default target 0.2 from c = 0.01 and H_prev = +inf."""
    c, H_prev, applied = 0.01, math.inf, []
    for H in (0.5, 0.15, 0.1, 0.3):
        applied.append(float(oracle.entropy_coef_applied(c, H_prev)))
        c, H_prev = float(oracle.entropy_coef_update(c, H)), H
    # c: 0.01 -> 0.005 (0.5 > 0.2) -> 0.01 -> 0.015 -> 0.01 (0.3 > 0.2); applied from the previous H
    assert applied == pytest.approx([0.0, 0.0, 0.01, 0.015])
    assert c == pytest.approx(0.01)


def test_entropy_controller_clamps_are_one_sided():
    assert oracle.entropy_coef_update(0.998, 0.1) == 1.0
    assert oracle.entropy_coef_update(0.002, 3.0) == 0.0
    assert oracle.entropy_coef_update(1.5, 3.0, delta=0.25) == 1.25  # above coef_max and falling: one delta
    assert oracle.entropy_coef_update(-1.0, 0.1, delta=0.25) == -0.75  # below coef_min and rising: one delta


@pytest.mark.parametrize("call,arg", [
    (lambda: oracle.entropy_coef_update(0.1, 0.1, delta=-0.01), "delta"),
    (lambda: oracle.entropy_coef_update(0.1, 0.1, coef_min=0.5, coef_max=0.1), "coef_max"),
    (lambda: oracle.entropy_coef_update(0.1, math.inf), "current_entropy"),
    (lambda: oracle.entropy_coef_applied(0.1, math.nan), "last_entropy"),
    (lambda: oracle.entropy_coef_applied(0.1, -math.inf), "last_entropy"),
])
def test_entropy_controller_errors(call, arg):
    with pytest.raises(ValueError, match=rf": {arg}:"):
        call()
