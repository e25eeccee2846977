"""The oracle's covariance-selected tokens (spec v1.1: select.clip_cov, loss.kl_cov): the rules the spec
sections state, each checked on values worked out by hand (dyadic inputs, so every mean and covariance
is exact) or against a literal re-enactment of the frameworks' random draw."""

from __future__ import annotations

import numpy as np
import pytest

import oracle

# One row, mask .xxxxx: A = 2, 2, -2, -2, 0 and logp = -1, -3, -1, -3, -2 (means 0 and -2), so the
# covariances (A - mean A)(logp - mean logp) are 2, -2, -2, 2, 0.
M = np.array([[False, True, True, True, True, True]])
A = np.array([[0.0, 2.0, 2.0, -2.0, -2.0, 0.0]])
LP = np.array([[-4.0, -1.0, -3.0, -1.0, -3.0, -2.0]])
DRAWS = np.array([[0.0, 0.7, 0.1, 0.3, 0.5, 0.9]])


def _all_candidates(n_valid: int) -> tuple[np.ndarray, ...]:
    """One row of n_valid tokens, A = +-1 alternating, logp = -4 + 2A: every covariance is exactly 2
    (a candidate of the default window (1, 5)); on-policy."""
    m = np.zeros((1, n_valid + 1), dtype=bool)
    m[0, 1:] = True
    a = np.zeros(m.shape)
    a[m] = np.resize([1.0, -1.0], n_valid)
    lp = -4.0 + 2.0 * a
    return lp, lp.copy(), a, m


def test_worked_example_cuts_the_candidate_with_the_smaller_draw():
    keep = oracle.clip_cov_mask(LP, LP, A, M, DRAWS)
    # candidates t = 1 (draw 0.7) and t = 4 (draw 0.5); t = 2 has the smallest draw but cov = -2
    assert keep.dtype == bool and keep.tolist() == [[False, True, True, True, False, True]]


def test_clipped_tokens_are_no_candidates_and_the_clip_is_sign_aware():
    old = LP.copy()
    old[0, 1], old[0, 4] = LP[0, 1] - np.log(1.5), LP[0, 4] - np.log(0.5)  # A > 0, r = 1.5; A < 0, r = 0.5
    assert oracle.clip_cov_mask(LP, old, A, M, DRAWS).tolist() == M.tolist()
    old[0, 1], old[0, 4] = LP[0, 1] - np.log(0.5), LP[0, 4] - np.log(1.5)  # the other sides: not clipped
    assert oracle.clip_cov_mask(LP, old, A, M, DRAWS).tolist() == [[False, True, True, True, False, True]]
    # eps_high 0.6 makes r = 1.5 unclipped for A > 0 again
    old[0, 1], old[0, 4] = LP[0, 1] - np.log(1.5), LP[0, 4] - np.log(0.5)
    assert oracle.clip_cov_mask(LP, old, A, M, DRAWS, eps_high=0.6).tolist() == [[False, False, True, True, True, True]]


def test_window_bounds_are_exclusive():
    # covariances 2, -2, -2, 2, 0: the window [2, 5) would hold two candidates, (2, 5) holds none
    assert oracle.clip_cov_mask(LP, LP, A, M, DRAWS, cov_low=2.0).tolist() == M.tolist()
    assert oracle.clip_cov_mask(LP, LP, A, M, DRAWS, cov_low=1.0, cov_high=2.0).tolist() == M.tolist()
    assert oracle.clip_cov_mask(LP, LP, A, M, DRAWS, cov_low=1.99, cov_high=2.01).sum() == 4


@pytest.mark.parametrize("n_valid, fraction, n_cut", [
    (5, 2e-4, 1), (100, 2e-4, 1), (100, 0.01, 1), (100, 0.29, 28), (100, 0.3, 30), (7, 0.5, 3), (5, 1.0, 5),
])
def test_n_is_max_one_floor_of_the_float64_product(n_valid, fraction, n_cut):
    """n = max(1, floor(fraction * N)), the product one float64 multiplication: 0.29 * 100 =
    28.999999999999996 cuts 28; every token here is a candidate, so exactly n are cut."""
    lp, old, a, m = _all_candidates(n_valid)
    draws = np.random.default_rng(0).random(m.shape)
    keep = oracle.clip_cov_mask(lp, old, a, m, draws, fraction=fraction)
    assert int((m & ~keep).sum()) == n_cut
    # the cut ones are those with the smallest draws
    cut_draws, kept_draws = draws[m & ~keep], draws[m & keep]
    assert kept_draws.size == 0 or cut_draws.max() < kept_draws.min()


def test_only_the_order_of_the_draws_matters_and_ties_go_row_major():
    lp, old, a, m = _all_candidates(8)
    draws = np.random.default_rng(1).random(m.shape)
    base = oracle.clip_cov_mask(lp, old, a, m, draws, fraction=0.5)
    for transformed in (3.0 * draws - 7.0, np.exp(draws), np.argsort(np.argsort(draws)).astype(float)):
        assert np.array_equal(oracle.clip_cov_mask(lp, old, a, m, transformed, fraction=0.5), base)
    # all draws equal: the first n valid tokens in row-major order are cut
    keep = oracle.clip_cov_mask(lp, old, a, m, np.zeros(m.shape), fraction=0.5)
    assert keep[0].tolist() == [False] * 5 + [True] * 4


def test_draws_reproduce_the_frameworks_randperm():
    """verl and SkyRL cut C[perm[:n]], C the candidates in row-major order (torch.nonzero) and perm a
    uniform permutation (torch.randperm(|C|), core_algos.py:1820-1824): draws[C[perm[i]]] = i reproduce
    any such permutation."""
    lp, old, a, m = _all_candidates(12)
    C = np.argwhere(m)  # row-major, as torch.nonzero
    for seed in range(5):
        perm = np.random.default_rng(seed).permutation(len(C))
        n = 4
        framework_cut = np.zeros(m.shape, dtype=bool)
        framework_cut[tuple(C[perm[:n]].T)] = True
        draws = np.zeros(m.shape)
        draws[tuple(C[perm].T)] = np.arange(len(C))
        keep = oracle.clip_cov_mask(lp, old, a, m, draws, fraction=n / 12)
        assert np.array_equal(m & ~keep, framework_cut)


def test_means_are_over_the_valid_tokens_of_the_whole_batch():
    """[B] advantages 1 and -3 on rows of 3 and 1 valid tokens: mean A = (3 - 3)/4 = 0 (token weighted,
    not the mean of rows -1); mean logp = -4; covariances 3, 1, -1 and 9: only row 0's first token lies
    in (1, 5). Padding (whatever it holds) and an empty row do not count."""
    m = np.array([[False, True, True, True], [False, True, False, False], [False] * 4])
    lp = np.array([[-50.0, -1.0, -3.0, -5.0], [9.0, -7.0, 9.0, 9.0], [9.0] * 4])
    keep = oracle.clip_cov_mask(lp, lp, np.array([1.0, -3.0, 100.0]), m, np.zeros(m.shape))
    assert (m & ~keep).tolist() == [[False, True, False, False], [False] * 4, [False] * 4]


def test_not_partition_invariant():
    """The spec's quantity is of the batch passed in: with verl's fraction 2e-4, two micro-batches cut
    one token each where the whole batch cuts one."""
    lp, old, a, m = _all_candidates(6)
    two = lambda x: np.vstack([x, x])
    draws = np.random.default_rng(2).random((2, m.shape[1]))
    whole = oracle.clip_cov_mask(two(lp), two(old), two(a), two(m), draws)
    halves = np.vstack([oracle.clip_cov_mask(lp, old, a, m, draws[i:i + 1]) for i in range(2)])
    assert int((two(m) & ~whole).sum()) == 1 and int((two(m) & ~halves).sum()) == 2


def test_on_policy_clip_cov_still_cuts_and_empty_batches_keep_nothing():
    assert (M & ~oracle.clip_cov_mask(LP, LP, A, M, DRAWS)).sum() == 1
    none = np.zeros_like(M)
    assert not oracle.clip_cov_mask(LP, LP, A, none, DRAWS).any()
    assert oracle.clip_cov_mask(LP[:0], LP[:0], A[:0], none[:0], DRAWS[:0]).shape == (0, 6)


# ---------------------------------------------------------------------------------------------
# KL-Cov: A = 2, 2, -2, -2, 0 and logp = -1, -3, -2, -4, -5 (means 0 and -3): covariances 4, 0, -2, 2, 0
# ---------------------------------------------------------------------------------------------

KLP = np.array([[-4.0, -1.0, -3.0, -2.0, -4.0, -5.0]])
D = np.array([[0.0, 0.5, -0.25, 0.25, -0.5, 1.0]])
OLD = KLP - D


def test_kl_cov_worked_values():
    pg = np.where(M, -A * np.exp(D), 0.0)
    L = oracle.kl_cov_token_loss(KLP, OLD, A, M)  # n = 1: the covariance 4 at t = 1, coef 0.1
    assert np.allclose(L, pg + np.array([[0.0, 0.05, 0.0, 0.0, 0.0, 0.0]]), rtol=1e-15, atol=0)
    L = oracle.kl_cov_token_loss(KLP, OLD, A, M, fraction=0.4, coef=1.0)  # n = 2: t = 1 and t = 4
    assert np.allclose(L, pg + np.array([[0.0, 0.5, 0.0, 0.0, 0.5, 0.0]]), rtol=1e-15, atol=0)
    # n = 3: then covariance 0 at t = 2 and t = 5, a tie: the earlier, t = 2
    L = oracle.kl_cov_token_loss(KLP, OLD, A, M, fraction=0.6, coef=1.0)
    assert np.allclose(L, pg + np.array([[0.0, 0.5, 0.25, 0.0, 0.5, 0.0]]), rtol=1e-15, atol=0)


def test_kl_cov_gradient_is_ratio_term_plus_coef_sign_on_selected():
    u = np.array([[9.0, 1.0, -2.0, 0.5, 3.0, 1.5]])
    g = oracle.kl_cov_token_loss_grad(KLP, OLD, A, M, u, fraction=0.4, coef=1.0)
    expected = np.where(M, u * (-A * np.exp(D) + np.array([[0.0, 1.0, 0.0, 0.0, -1.0, 0.0]])), 0.0)
    assert np.allclose(g, expected, rtol=1e-15, atol=0)


def test_kl_cov_gradient_matches_finite_differences():
    """The selection is a constant: away from ties a small step in logp keeps it, so central differences
    of the value reproduce the gradient (the penalty's kink |d| at 0 avoided: every d != 0)."""
    rng = np.random.default_rng(3)
    m = rng.random((3, 7)) < 0.8
    m[:, 0] = False
    lp = -np.abs(rng.normal(0, 1.5, m.shape))
    old = lp - rng.normal(0, 0.5, m.shape)
    a = rng.normal(0, 2, m.shape)
    kw = {"fraction": 0.3, "coef": 0.7}
    g = oracle.kl_cov_token_loss_grad(lp, old, a, m, np.ones(m.shape), **kw)
    h = 1e-6
    for b, t in np.argwhere(m):
        up, down = lp.copy(), lp.copy()
        up[b, t] += h
        down[b, t] -= h
        fd = (oracle.kl_cov_token_loss(up, old, a, m, **kw).sum() - oracle.kl_cov_token_loss(down, old, a, m, **kw).sum()) / (2 * h)
        assert abs(fd - g[b, t]) < 1e-6 * max(1.0, abs(g[b, t])), (b, t, fd, g[b, t])


def test_kl_cov_on_policy_is_minus_a_whatever_the_selection():
    for fraction in (2e-4, 0.5, 1.0):
        assert np.array_equal(oracle.kl_cov_token_loss(KLP, KLP, A, M, fraction=fraction, coef=3.0), np.where(M, -A, 0.0))
        g = oracle.kl_cov_token_loss_grad(KLP, KLP, A, M, np.ones(M.shape), fraction=fraction, coef=3.0)
        assert np.array_equal(g, np.where(M, -A, 0.0))  # sign(0) = 0 at the selected tokens


def test_kl_cov_zero_advantage_with_an_overflowing_ratio():
    a = np.array([[0.0, 1.0, 0.0, -1.0]])
    m = np.array([[False, True, True, True]])
    lp = np.array([[-4.0, -1.0, -2.0, -6.0]])  # covariances 2, 0, 3: t = 3 selected (n = 1)
    d = np.array([[0.0, 0.1, 800.0, -0.2]])
    L = oracle.kl_cov_token_loss(lp, lp - d, a, m)
    assert L[0, 2] == 0.0 and np.isfinite(L).all()
    assert np.isclose(L[0, 3], np.exp(-0.2) + 0.1 * 0.2, rtol=1e-15)


@pytest.mark.parametrize("function, kwargs, arg", [
    ("clip_cov_mask", {"fraction": 0.0}, "fraction"),
    ("clip_cov_mask", {"fraction": 1.5}, "fraction"),
    ("clip_cov_mask", {"cov_low": 5.0, "cov_high": 5.0}, "cov_high"),
    ("clip_cov_mask", {"eps_low": -0.1}, "eps_low"),
    ("kl_cov_token_loss", {"coef": -1.0}, "coef"),
    ("kl_cov_token_loss", {"fraction": float("nan")}, "fraction"),
])
def test_bad_keywords_raise_naming_the_argument(function, kwargs, arg):
    args = (LP, LP, A, M, DRAWS) if function == "clip_cov_mask" else (LP, LP, A, M)
    with pytest.raises(ValueError, match=f"^{function}: {arg}:"):
        getattr(oracle, function)(*args, **kwargs)


def test_draws_must_be_finite_where_read_only():
    draws = DRAWS.copy()
    draws[0, 0] = np.nan  # masked: never read
    oracle.clip_cov_mask(LP, LP, A, M, draws)
    draws[0, 3] = np.inf
    with pytest.raises(ValueError, match="^clip_cov_mask: draws:"):
        oracle.clip_cov_mask(LP, LP, A, M, draws)
