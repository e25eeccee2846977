"""Spec v1.1 advantage estimators (oracle.estimators, rloo_advantages' singleton): values worked out by
hand from the spec sections and the papers, the edge cases the sections state, and the group
permutation invariance the registry declares for them."""

from __future__ import annotations

import numpy as np
import pytest

import oracle

SQRT_HALF = np.sqrt(0.5)


def _close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp
# ----------------------------------------------------------------------------------------------


def test_reinforce_pp_gap_rules_on_the_bug_catalogue_example():
    """Bug-catalogue class 11 (verl#6376): r = [0, 0, 1] on mask [1, 0, 1], gamma 0.5. The fixed verl carries
    the return over the tool token (returns 0.5 and 1 at the valid tokens); the reset gives 0 and 1; a
    positional discount gives 0.25 and 1. A leading prompt position keeps mask[:, 0] False."""
    m = np.array([[False, True, False, True]])
    r = np.array([[5.0, 0.0, 7.0, 1.0]])  # 5 and 7 sit at masked positions: never read
    for gap, first in (("skip", 0.5), ("reset", 0.0), ("discount", 0.25)):
        _, returns = oracle.reinforce_pp_advantages(r, m, gamma=0.5, gap=gap)
        _close(returns, [[0.0, first, 0.0, 1.0]])


def test_reinforce_pp_advantages_are_the_whitened_returns():
    m = np.array([[False, True, True, True]])
    A, R = oracle.reinforce_pp_advantages(np.array([[0.0, 1.0, 2.0, 3.0]]), m, gamma=0.9)
    _close(R, [[0.0, 1 + 0.9 * (2 + 0.9 * 3), 2 + 0.9 * 3, 3.0]])  # 5.23, 4.7, 3
    x = R[0, 1:]
    _close(A[0, 1:], (x - x.mean()) / np.sqrt(x.var(ddof=1) + 1e-8))
    assert A[0, 0] == 0.0


def test_reinforce_pp_gamma_1_outcome_reward_is_the_score_on_every_token():
    m = np.array([[False, True, True, True, False]])
    _, R = oracle.reinforce_pp_advantages(np.array([[0.0, 0.0, 0.0, 2.5, 0.0]]), m)
    _close(R, [[0.0, 2.5, 2.5, 2.5, 0.0]])


def test_reinforce_pp_rows_never_share_a_return():
    """A right-padded row followed by a row with rewards: the first row's return is its own."""
    m = np.array([[False, True, True, False], [False, True, True, True]])
    _, R = oracle.reinforce_pp_advantages(np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0]]), m)
    _close(R, [[0.0, 1.0, 0.0, 0.0], [0.0, 5.0, 5.0, 0.0]])


def test_reinforce_pp_skip_equals_discount_for_gamma_1_and_all_agree_without_gaps():
    rng = np.random.default_rng(3)
    m = np.zeros((3, 7), dtype=bool)
    m[0, 1:4] = m[0, 5] = True  # a gap
    m[1, 2:7] = True
    r = rng.normal(size=(3, 7))
    skip = oracle.reinforce_pp_advantages(r, m, gamma=1.0)[1]
    _close(skip, oracle.reinforce_pp_advantages(r, m, gamma=1.0, gap="discount")[1])
    for gap in ("reset", "discount"):  # row 1 has no gap: every rule agrees there, at any gamma
        _close(oracle.reinforce_pp_advantages(r, m, gamma=0.8, gap=gap)[1][1], oracle.reinforce_pp_advantages(r, m, gamma=0.8)[1][1])


def test_reinforce_pp_single_valid_token_and_empty_batch():
    A, R = oracle.reinforce_pp_advantages(np.array([[0.0, 4.0]]), np.array([[False, True]]))
    _close(R, [[0.0, 4.0]])
    _close(A, [[0.0, 0.0]])  # n - ddof = 0: variance 0, and x - mu = 0
    A, R = oracle.reinforce_pp_advantages(np.ones((2, 3)), np.zeros((2, 3), dtype=bool))
    assert not A.any() and not R.any()


# ----------------------------------------------------------------------------------------------
# adv.reinforce_pp_baseline
# ----------------------------------------------------------------------------------------------

M_RPPB = np.array([[0, 1, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]], dtype=bool)


def test_reinforce_pp_baseline_worked_example_token_level():
    """Spec worked example: a = [0.5, -0.5, 0, 0]; the 4 valid tokens [0.5, 0.5, -0.5, 0] have mean 0.125 and
    unbiased variance (2 x 0.375^2 + 0.625^2 + 0.125^2) / 3 = 0.6875 / 3."""
    A = oracle.reinforce_pp_baseline_advantages(np.array([1.0, 0.0, 0.5, 0.5]), 2, M_RPPB)
    den = np.sqrt(0.6875 / 3 + 1e-8)
    _close(A, [[0, 0.375 / den, 0.375 / den, 0], [0, -0.625 / den, 0, 0], [0, 0, -0.125 / den, 0], [0] * 4])
    assert abs(A[0, 1] - 0.78335) < 5e-6  # the value the spec section quotes (to its printed digits)


def test_reinforce_pp_baseline_sequence_level_is_ms_swift():
    """ms-swift: a / (a.std() + 1e-4) over the 4 sequences, std([0.5, -0.5, 0, 0]) = sqrt(0.5 / 3)."""
    A = oracle.reinforce_pp_baseline_advantages(np.array([1.0, 0.0, 0.5, 0.5]), 2, M_RPPB, level="sequence", eps=1e-4)
    v = 0.5 / (np.sqrt(0.5 / 3) + 1e-4)
    _close(A, [[0, v, v, 0], [0, -v, 0, 0], [0] * 4, [0] * 4])


def test_reinforce_pp_baseline_singletons():
    m = np.array([[0, 1, 1], [0, 1, 0]], dtype=bool)
    assert not oracle.reinforce_pp_baseline_advantages(np.array([1.0, -2.0]), 1, m).any()
    raw = oracle.reinforce_pp_baseline_advantages(np.array([1.0, -2.0]), 1, m, singleton="raw")
    _close(raw, oracle.whiten(np.array([[0.0, 1.0, 1.0], [0.0, -2.0, 0.0]]), m))


# ----------------------------------------------------------------------------------------------
# adv.remax / adv.opo
# ----------------------------------------------------------------------------------------------


def test_remax_uses_each_prompts_own_greedy_reward():
    _close(oracle.remax_advantages(np.array([1.0, 0.0, 0.5, 0.5]), np.array([0.5, 1.0]), 2), [0.5, -0.5, -0.5, -0.5])
    # G = 3, greedy [0, 1]: [1, 1, 1] - 0 and [0, 0, 0] - 1 (a tiled baseline [0, 1, 0, 1, 0, 1] would differ)
    _close(oracle.remax_advantages(np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), np.array([0.0, 1.0]), 3), [1, 1, 1, -1, -1, -1])


def test_remax_greedy_rewards_shape_is_one_per_prompt():
    with pytest.raises(ValueError, match=r"^remax_advantages: greedy_rewards: expected shape \(2,\)"):
        oracle.remax_advantages(np.zeros(4), np.zeros(4), 2)


def test_opo_length_weighted_baseline_worked_example():
    """Lengths [3, 1 | 4, 2], rewards [1, 0 | 0, 1]: baselines 3/4 and 2/6."""
    m = np.zeros((4, 6), dtype=bool)
    m[0, 1:4] = m[1, 1] = True
    m[2, 1:5] = m[3, 1:3] = True
    _close(oracle.opo_advantages(np.array([1.0, 0.0, 0.0, 1.0]), 2, m), [0.25, -0.75, -1 / 3, 2 / 3])


def test_opo_edge_cases():
    m = np.array([[0, 0, 0], [0, 0, 0], [0, 1, 1], [0, 1, 0]], dtype=bool)
    _close(oracle.opo_advantages(np.array([1.0, 0.0, 1.0, 0.0]), 2, m), [0.0, 0.0, 1 / 3, -2 / 3])  # tokenless group: 0
    m1 = np.array([[0, 1, 1], [0, 1, 0]], dtype=bool)
    _close(oracle.opo_advantages(np.array([1.0, -0.5]), 1, m1), [0.0, 0.0])
    _close(oracle.opo_advantages(np.array([1.0, -0.5]), 1, m1, singleton="raw"), [1.0, -0.5])
    equal = oracle.opo_advantages(np.full(3, 0.7), 3, np.array([[0, 1, 1, 1], [0, 1, 0, 0], [0, 1, 1, 0]], dtype=bool))
    assert np.count_nonzero(equal) == 0


# ----------------------------------------------------------------------------------------------
# adv.grpo_passk
# ----------------------------------------------------------------------------------------------


def test_passk_credits_only_the_best_member():
    _close(oracle.grpo_passk_advantages(np.array([1.0, 0.0, 0.0, 0.0]), 4), [1 / (0.5 + 1e-6), 0, 0, 0])
    _close(oracle.grpo_passk_advantages(np.array([0.2, 0.9, 0.5, 0.7]), 4, scale="none"), [0.0, 0.2, 0.0, 0.0])


def test_passk_shared_maximum_gives_zero_whatever_the_tie_rule():
    assert not oracle.grpo_passk_advantages(np.array([1.0, 1.0, 0.0, 0.0, 0.2, 0.9, 0.5, 0.9]), 4).any()


def test_passk_needs_two_members():
    with pytest.raises(ValueError, match=r"^grpo_passk_advantages: group_size: expected an int >= 2"):
        oracle.grpo_passk_advantages(np.array([1.0, 0.0]), 1)


# ----------------------------------------------------------------------------------------------
# adv.gdpo
# ----------------------------------------------------------------------------------------------


def test_gdpo_normalises_each_reward_before_the_sum():
    """Rewards of spreads 100 and 1 in a group of 2: after per-reward z-scores they cancel exactly (each
    is +-1/sqrt(2)); GRPO on the sum would give the first reward's sign to both sequences."""
    r = np.array([[100.0, 0.0], [0.0, 1.0]])
    _close(oracle.gdpo_advantages(r, 2, batch_normalize=False, eps=0.0), [0.0, 0.0])
    _close(oracle.grpo_advantages(r.sum(1), 2, eps=0.0), [SQRT_HALF, -SQRT_HALF])


def test_gdpo_weights_and_batch_normalisation():
    r = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    z = 0.5 / (SQRT_HALF + 1e-6)
    s = np.array([z - 2 * z, -z + 2 * z, 3 * z, -3 * z])
    _close(oracle.gdpo_advantages(r, 2, reward_weights=[1.0, 2.0], batch_normalize=False), s)
    _close(oracle.gdpo_advantages(r, 2, reward_weights=(1.0, 2.0)), (s - s.mean()) / (s.std(ddof=1) + 1e-6))


def test_gdpo_single_reward_is_grpo_renormalised():
    r = np.array([1.0, 0.0, 0.0, 0.0, 0.5, 1.5, 2.5, 3.5])
    g = oracle.grpo_advantages(r, 4)
    _close(oracle.gdpo_advantages(r[:, None], 4), (g - g.mean()) / (g.std(ddof=1) + 1e-6))


def test_gdpo_reward_weights_are_checked():
    with pytest.raises(ValueError, match=r"^gdpo_advantages: reward_weights: expected 2 numbers"):
        oracle.gdpo_advantages(np.zeros((2, 2)), 2, reward_weights=[1.0])
    with pytest.raises(TypeError, match=r"^gdpo_advantages: reward_weights:"):
        oracle.gdpo_advantages(np.zeros((2, 2)), 2, reward_weights=np.ones(2))


# ----------------------------------------------------------------------------------------------
# adv.maxrl / adv.gpg / rloo singleton
# ----------------------------------------------------------------------------------------------


def test_maxrl_weights_hard_prompts_by_the_inverse_pass_rate():
    """MaxRL: (r - p)/p with p the group's pass rate: the solver of a 1-in-4 prompt gets 3, of a 3-in-4 1/3."""
    A = oracle.maxrl_advantages(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]), 4, eps=0.0)
    _close(A, [3.0, -1.0, -1.0, -1.0, 1 / 3, 1 / 3, 1 / 3, -1.0])
    assert not oracle.maxrl_advantages(np.zeros(4), 2, eps=0.0).any()  # all failed: 0/0 is 0
    _close(oracle.maxrl_advantages(np.array([1.0, 0.0]), 1, singleton="raw"), [1.0, 0.0])


def test_gpg_alpha_counts_the_members_of_all_equal_groups_as_the_papers_code_does():
    """AMAP-ML/GPG gpg_trainer.py: 1 / alpha = (#groups - #groups with zero std) / #groups; the issue's vector."""
    r = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    _close(oracle.gpg_advantages(r, 2), [1.5, -1.5, 0, 0, 0, 0])  # alpha = 3
    _close(oracle.gpg_advantages(r, 2, alpha="nonzero_rewards"), [1.0, -1.0, 0, 0, 0, 0])  # verl: alpha = 2
    _close(oracle.gpg_advantages(np.array([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]), 4, alpha="nonzero_rewards"),
           [1.5, -0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -1.5])
    _close(oracle.gpg_advantages(np.array([0.0, 0.0, 0.0, 0.0, 1.0, 0.0]), 2), [0, 0, 0, 0, 1.5, -1.5])
    assert not oracle.gpg_advantages(np.zeros(4), 2).any()
    assert not oracle.gpg_advantages(np.array([0.5, 0.5, 2.0, 2.0]), 2).any()  # no signal: alpha 1, A 0
    _close(oracle.gpg_advantages(np.array([1.0, 0.0, -2.0]), 1, singleton="raw", alpha="nonzero_rewards"),
           [1.5, 0.0, -3.0])
    _close(oracle.gpg_advantages(np.array([1.0, 0.0, -2.0]), 1, singleton="raw"), [1.0, 0.0, -2.0])


def test_rloo_singleton_raw_is_verls_loop_form():
    _close(oracle.rloo_advantages(np.array([2.0, -1.0]), 1, singleton="raw"), [2.0, -1.0])
    assert not oracle.rloo_advantages(np.array([2.0, -1.0]), 1).any()
    _close(oracle.rloo_advantages(np.array([1.0, 0.0]), 2, singleton="raw"), [1.0, -1.0])


# ----------------------------------------------------------------------------------------------
# adv.optimal_token_baseline
# ----------------------------------------------------------------------------------------------


def _otb(r, m, G, pi, S, rho=None, **kw):
    return oracle.optimal_token_baseline_advantages(np.array(r, dtype=np.float64), np.array(m, dtype=bool), G,
                                                    np.log(np.array(pi, dtype=np.float64)), np.array(S, dtype=np.float64),
                                                    None if rho is None else np.array(rho, dtype=np.float64), **kw)


def test_otb_worked_example_of_the_spec():
    """Row 0: w = 1 - 2·0.5 + S = 0.5, 0.25, 0.25 (W = 0.5, 0.75, 1), return 1; row 1: w = 1 - 0.5 + 0.25 = 0.75
    (W = 0.75, 1.5), return 0. B_1 = 0.5/1.25, B_2 = 0.75/2.25; row 0 alone at position 3: zero tail."""
    m = [[0, 1, 1, 1], [0, 1, 1, 0]]
    args = ([[0, 0, 0, 1], [0, 0, 0, 0]], m, 2, [[0.5] * 4, [0.25] * 4], [[0.5, 0.5, 0.25, 0.25], [0.25] * 4])
    A, R = _otb(*args)
    _close(R, [[0, 1, 1, 1], [0, 0, 0, 0]])
    _close(A, [[0, 0.6, 2 / 3, 1], [0, -0.4, -1 / 3, 0]])
    _close(_otb(*args, zero_tail=False)[0], [[0, 0.6, 2 / 3, 0], [0, -0.4, -1 / 3, 0]])


def test_otb_baseline_is_the_path_weighted_mean_of_the_present_returns():
    """B_t = Σ G W / Σ W (arXiv:2602.07078, the optimal baseline per step): with the zero tail off and every
    row present at every step it is the weighted mean, between the smallest and the largest return."""
    rng = np.random.default_rng(3)
    B, T = 4, 6
    m = np.ones((B, T), dtype=bool)
    m[:, 0] = False
    r = rng.normal(size=(B, T))
    pi = rng.uniform(0.05, 0.95, size=(B, T))
    S = pi**2 + rng.uniform(0, 1, size=(B, T)) * (1 - pi) ** 2
    A, R = _otb(r, m, B, pi, S, zero_tail=False)
    W = np.cumsum(np.where(m, 1 - 2 * pi + S, 0.0), axis=1)
    G_t = np.cumsum(np.where(m, r, 0.0)[:, ::-1], axis=1)[:, ::-1]
    baseline = np.zeros(T)
    baseline[1:] = (G_t * W)[:, 1:].sum(axis=0) / W[:, 1:].sum(axis=0)  # column 0 is masked in every row
    _close(R, np.where(m, G_t, 0.0))
    _close(A, np.where(m, G_t - baseline, 0.0))
    assert np.all((R - A)[:, 1:] >= G_t[:, 1:].min(axis=0) - 1e-12) and np.all((R - A)[:, 1:] <= G_t[:, 1:].max(axis=0) + 1e-12)


def test_otb_is_weights_enter_squared():
    """W is built from w·ρ²: weights 2 (row 0) and 1, 0 (row 1) give W = 2, 4 and 0.5, 0.5."""
    A, _ = _otb([[0, 0, 1], [0, 0, 0]], [[0, 1, 1], [0, 1, 1]], 2, [[0.5] * 3] * 2, [[0.5] * 3] * 2,
                [[1, 2, 2], [1, 1, 0]])
    _close(A, [[0, 1 - 2 / 2.5, 1 - 4 / 4.5], [0, -2 / 2.5, -4 / 4.5]])
    A1, _ = _otb([[0, 0, 1], [0, 0, 0]], [[0, 1, 1], [0, 1, 1]], 2, [[0.5] * 3] * 2, [[0.5] * 3] * 2, np.ones((2, 3)))
    _close(A1, _otb([[0, 0, 1], [0, 0, 0]], [[0, 1, 1], [0, 1, 1]], 2, [[0.5] * 3] * 2, [[0.5] * 3] * 2)[0])


def test_otb_valid_token_alignment_skips_tool_tokens():
    """A masked tool token inserted inside a row shifts its later tokens by one column: the valid-token
    alignment is unchanged, the position alignment pairs them with other steps."""
    r = np.array([[0, 0, 0, 2.0, 0], [0, 0, 1.0, 0, 0]])
    pi, S = np.full((2, 5), 0.5), np.full((2, 5), 0.4)
    base = np.array([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0]], dtype=bool)
    gapped = np.array([[0, 1, 0, 1, 1], [0, 1, 1, 0, 0]], dtype=bool)
    r_gapped = np.array([[0, 0, 0, 0, 2.0], [0, 0, 1.0, 0, 0]])
    A, _ = _otb(r, base, 2, pi, S, align="valid_token")
    Ag, _ = _otb(r_gapped, gapped, 2, pi, S, align="valid_token")
    _close(Ag[gapped], A[base])
    Ap, _ = _otb(r_gapped, gapped, 2, pi, S)
    assert not np.allclose(Ap[gapped], A[base])


def test_otb_tail_lengths():
    """Row 1 has a tool gap (2 tokens, extent 4); row 0 has 4 tokens (extent 5): 'extent' zeroes row 0's
    baseline past position 4, 'count' (verl) from the column 1 + 2 = 3 where row 1 is still present."""
    m = [[0, 1, 1, 1, 1], [0, 1, 0, 1, 0]]
    r = [[0, 0, 0, 0, 1.0], [0, 0, 0, 1.0, 0]]
    pi, S = [[0.5] * 5] * 2, [[0.5] * 5] * 2
    _close(_otb(r, m, 2, pi, S)[0], [[0, 0, 0, 0, 1], [0] * 5])
    _close(_otb(r, m, 2, pi, S, tail_length="count")[0], [[0, 0, 0, 1, 1], [0] * 5])
    _close(_otb(r, m, 2, pi, S, tail_length="count", align="valid_token")[0], _otb(r, m, 2, pi, S, align="valid_token")[0])


def test_otb_group_of_one_and_zero_denominator():
    m = [[0, 1, 1], [0, 1, 0]]
    A, R = _otb([[0, 0.5, 1], [0, 2, 0]], m, 1, [[0.5] * 3] * 2, [[0.5] * 3] * 2)
    _close(A, R)
    _close(R, [[0, 1.5, 1], [0, 2, 0]])
    A, R = _otb([[0, 0, 1], [0, 0, 0]], [[0, 1, 1], [0, 1, 1]], 2, np.ones((2, 3)), np.ones((2, 3)))  # w = 0
    _close(A, R)
    A, _ = _otb([[0, 0, 1], [0, 0, 0]], [[0, 1, 1], [0, 1, 1]], 2, np.ones((2, 3)), np.ones((2, 3)), eps=1e-8)
    _close(A, R)


def test_otb_errors_name_the_argument():
    m = np.array([[0, 1, 1]], dtype=bool)
    z = np.zeros((1, 3))
    with pytest.raises(ValueError, match=r"^optimal_token_baseline_advantages: old_logp: expected log-probabilities <= 0"):
        oracle.optimal_token_baseline_advantages(z, m, 1, np.array([[0.0, 0.1, -1.0]]), z)
    with pytest.raises(ValueError, match=r"^optimal_token_baseline_advantages: is_weights: expected weights >= 0"):
        oracle.optimal_token_baseline_advantages(z, m, 1, -np.ones((1, 3)), z, np.array([[1.0, -0.5, 1.0]]))
    with pytest.raises(ValueError, match=r"^optimal_token_baseline_advantages: align:"):
        oracle.optimal_token_baseline_advantages(z, m, 1, -np.ones((1, 3)), z, align="column")
    # masked positions are never read: a positive log-prob or a negative weight there is accepted
    oracle.optimal_token_baseline_advantages(z, m, 1, np.array([[5.0, -1.0, -1.0]]), z, np.array([[-3.0, 1.0, 1.0]]))


# ----------------------------------------------------------------------------------------------
# invariance: permuting a group's members permutes the advantages
# ----------------------------------------------------------------------------------------------

GROUP_FUNCTIONS = {
    "reinforce_pp_baseline_advantages": lambda r, G, m: oracle.reinforce_pp_baseline_advantages(r, G, m),
    "opo_advantages": lambda r, G, m: oracle.opo_advantages(r, G, m),
    "remax_advantages": lambda r, G, m: oracle.remax_advantages(r, np.arange(r.size // G, dtype=np.float64), G),
    "grpo_passk_advantages": lambda r, G, m: oracle.grpo_passk_advantages(r, G),
    "gdpo_advantages": lambda r, G, m: oracle.gdpo_advantages(np.stack([r, r ** 2], 1), G, reward_weights=[1.0, 0.5]),
    "maxrl_advantages": lambda r, G, m: oracle.maxrl_advantages(r, G),
    "gpg_advantages": lambda r, G, m: oracle.gpg_advantages(r, G),
    # per-token inputs that are functions of each row's reward, so that they move with the row
    "optimal_token_baseline_advantages": lambda r, G, m: oracle.optimal_token_baseline_advantages(
        np.where(m, r[:, None] * np.arange(m.shape[1]), 0.0), m, G, -0.1 - 0.3 * np.abs(r[:, None]) * np.ones(m.shape),
        np.full(m.shape, 0.6))[0],
}


@pytest.mark.parametrize("name", sorted(GROUP_FUNCTIONS))
def test_group_permutation(name):
    rng = np.random.default_rng(7)
    G, B = 4, 12
    r = rng.integers(0, 3, size=B).astype(np.float64)  # ties on purpose
    m = np.zeros((B, 5), dtype=bool)
    for b in range(B):
        m[b, 1:1 + int(rng.integers(0, 5))] = True
    perm = np.concatenate([g * G + rng.permutation(G) for g in range(B // G)])
    out = GROUP_FUNCTIONS[name](r, G, m)
    _close(GROUP_FUNCTIONS[name](r[perm], G, m[perm]), out[perm])
