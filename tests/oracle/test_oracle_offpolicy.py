"""oracle.offpolicy (spec v1.1): rollout IS weights, rejection masks, decoupled PPO, proximal
interpolation, OPSM.

Every expected value is worked out by hand in the comments (ρ, δ, k1/k2/k3, products, geometric
means, α); ``math`` is used only to write those hand formulas as numbers, never the code under test.
Notation: δ = old_logp − rollout_logp = log ρ.
"""

import math

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from tests.preset_tables import PRESETS

L = math.log
GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]


def _mask(*rows):
    """'.' masked, 'x' valid, e.g. _mask('.xxx', '....')."""
    return np.array([[c == "x" for c in r] for r in rows], dtype=bool)


def _rho_row(rhos, base=-1.7):
    """old_logp, rollout_logp (one row, position 0 masked) with old − rollout = log ρ at positions 1.."""
    rollout = np.array([[0.0] + [base] * len(rhos)])
    old = np.array([[0.0] + [base + L(r) for r in rhos]])
    return old, rollout


def _close(actual, expected, rtol=1e-12, atol=1e-15):
    np.testing.assert_allclose(actual, np.asarray(expected, dtype=np.float64), rtol=rtol, atol=atol)


# ρ = [3, 1, 0.5, 1.5] on the valid positions 1..4 of one row
OLD, ROLL = _rho_row([3.0, 1.0, 0.5, 1.5])
M1 = _mask(".xxxx")


# ================================================================================================
# offpolicy.is_weights
# ================================================================================================


def test_token_truncate_default_is_tis_with_hi_2():
    # canonical: level token, mode truncate, lo None, hi 2 → min(ρ, 2) = [2, 1, 0.5, 1.5]
    w = oracle.rollout_is_weights(OLD, ROLL, M1)
    _close(w, [[0.0, 2.0, 1.0, 0.5, 1.5]])
    assert w.dtype == np.float64


def test_token_truncate_with_lo():
    # min(max(ρ, 0.8), 2) = [2, 1, 0.8, 1.5]
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, lo=0.8), [[0.0, 2.0, 1.0, 0.8, 1.5]])


def test_token_mask_without_and_with_lo():
    # ρ·[ρ <= 2] = [0, 1, 0.5, 1.5];  ρ·[0.8 <= ρ <= 2] = [0, 1, 0, 1.5]
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, mode="mask"), [[0.0, 0.0, 1.0, 0.5, 1.5]])
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, mode="mask", lo=0.8), [[0.0, 0.0, 1.0, 0.0, 1.5]])


def test_token_none_is_the_raw_ratio():
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, mode="none"), [[0.0, 3.0, 1.0, 0.5, 1.5]])


def test_mask_bounds_are_inclusive():
    # ρ exactly 0.5 and 2 (powers of two: exp(log 2) = 2 exactly in float64 is not needed, the bound
    # is compared with the computed ρ; use lo = ρ_min and hi = ρ_max read back from mode="none")
    old, roll = _rho_row([0.5, 2.0])
    raw = oracle.rollout_is_weights(old, roll, _mask(".xx"), mode="none")
    lo, hi = raw[0, 1], raw[0, 2]
    w = oracle.rollout_is_weights(old, roll, _mask(".xx"), mode="mask", lo=lo, hi=hi)
    _close(w, [[0.0, lo, hi]])  # both kept: lo <= ρ <= hi inclusive


def test_sequence_product_vs_geometric():
    # product: ρ_b = 3 · 1 · 0.5 · 1.5 = 2.25;  geometric: 2.25^(1/4) = sqrt(1.5) = 1.2247448713915890
    prod = 2.25
    geo = math.sqrt(1.5)
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence", mode="none"), [[0.0] + [prod] * 4])
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence", seq_stat="geometric", mode="none"),
           [[0.0] + [geo] * 4])
    # truncate at hi = 2: the product 2.25 → 2 on every valid token; the geometric mean stays
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence"), [[0.0] + [2.0] * 4])
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence", seq_stat="geometric"), [[0.0] + [geo] * 4])
    # mask at hi = 2 drops the whole row (2.25 > 2); hi = 3 keeps it
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence", mode="mask"), [[0.0] * 5])
    _close(oracle.rollout_is_weights(OLD, ROLL, M1, level="sequence", mode="mask", hi=3.0), [[0.0] + [prod] * 4])


def test_sequence_weight_is_the_same_on_every_valid_token_and_0_elsewhere():
    old, roll = _rho_row([2.0, 0.25, 1.0, 4.0])
    m = _mask(".x.xx")  # position 2 (ρ = 0.25) masked: product of 2 · 1 · 4 = 8
    w = oracle.rollout_is_weights(old, roll, m, level="sequence", mode="none")
    _close(w, [[0.0, 8.0, 0.0, 8.0, 8.0]])


def test_log_ratio_clamp_token_and_sequence():
    # token: δ = 30 clamped to 20 → ρ = e^20 = 485165195.4097903 (mode none); δ = −30 → e^−20
    old = np.array([[0.0, 30.0, -30.0]])
    roll = np.zeros((1, 3))
    _close(oracle.rollout_is_weights(old, roll, _mask(".xx"), mode="none", log_ratio_clamp=20.0),
           [[0.0, 485165195.4097903, 2.061153622438558e-09]])
    # sequence: δ = [15, 10], no token beyond 20 but the sum 25 is: clamped to 20 after the sum → e^20
    # (a per-token clamp would give e^25 = 72004899337.38588)
    old = np.array([[0.0, 15.0, 10.0]])
    _close(oracle.rollout_is_weights(old, roll, _mask(".xx"), level="sequence", mode="none", log_ratio_clamp=20.0),
           [[0.0, 485165195.4097903, 485165195.4097903]])
    _close(oracle.rollout_is_weights(old, roll, _mask(".xx"), level="sequence", mode="none"),
           [[0.0, 72004899337.38588, 72004899337.38588]])
    # δ = [30, −15]: the sum 15 is inside ±20, so no clamp: e^15 = 3269017.3724721107 (clamping the tokens
    # first would give e^(20 − 15) = e^5)
    old = np.array([[0.0, 30.0, -15.0]])
    _close(oracle.rollout_is_weights(old, roll, _mask(".xx"), level="sequence", mode="none", log_ratio_clamp=20.0),
           [[0.0, 3269017.3724721107, 3269017.3724721107]])


def test_overflow_of_exp_is_inf_then_truncated_or_masked():
    # δ = 800: ρ = exp(800) = inf in float64 (> e^709.78)
    old = np.array([[0.0, 800.0, 0.0]])
    roll = np.zeros((1, 3))
    m = _mask(".xx")
    _close(oracle.rollout_is_weights(old, roll, m), [[0.0, 2.0, 1.0]])  # truncate to hi = 2
    _close(oracle.rollout_is_weights(old, roll, m, mode="mask"), [[0.0, 0.0, 1.0]])  # out of [.., 2]
    w = oracle.rollout_is_weights(old, roll, m, mode="none")
    assert w[0, 1] == np.inf and w[0, 2] == 1.0
    w = oracle.rollout_is_weights(old, roll, m, mode="mask", hi=None, lo=0.5)  # no upper bound: kept
    assert w[0, 1] == np.inf
    # sequence product overflows: 400 + 400 = 800
    old = np.array([[0.0, 400.0, 400.0]])
    _close(oracle.rollout_is_weights(old, roll, m, level="sequence"), [[0.0, 2.0, 2.0]])
    # δ = −800: ρ = 0 (underflow), truncated up to lo = 0.1, masked out by lo = 0.1
    old = np.array([[0.0, -800.0, 0.0]])
    _close(oracle.rollout_is_weights(old, roll, m, lo=0.1), [[0.0, 0.1, 1.0]])
    _close(oracle.rollout_is_weights(old, roll, m, mode="mask", lo=0.1), [[0.0, 0.0, 1.0]])


def test_batch_normalize_token_level():
    # rows: ρ = [3, 1] and [0.5]; truncate hi 2 → w = [2, 1], [0.5]; token mean = 3.5 / 3 = 7/6
    # normalised: 2·6/7 = 12/7, 6/7, 0.5·6/7 = 3/7
    old = np.array([[0.0, L(3.0), 0.0], [0.0, L(0.5), 0.0]])
    roll = np.zeros((2, 3))
    m = _mask(".xx", ".x.")
    w = oracle.rollout_is_weights(old, roll, m, batch_normalize=True)
    _close(w, [[0.0, 12 / 7, 6 / 7], [0.0, 3 / 7, 0.0]])


def test_batch_normalize_sequence_level_averages_rows_not_tokens():
    # row 0: ρ = 3 · 1 = 3 → 2 (truncate), 2 tokens; row 1: ρ = 0.5, 1 token; row 2: no valid token.
    # Row mean = (2 + 0.5) / 2 = 1.25 → 1.6 and 0.4. (A token mean, (2 + 2 + 0.5)/3 = 1.5, would give 4/3, 1/3.)
    old = np.array([[0.0, L(3.0), 0.0], [0.0, L(0.5), 0.0], [0.0, 5.0, 5.0]])
    roll = np.zeros((3, 3))
    m = _mask(".xx", ".x.", "...")
    w = oracle.rollout_is_weights(old, roll, m, level="sequence", batch_normalize=True)
    _close(w, [[0.0, 1.6, 1.6], [0.0, 0.4, 0.0], [0.0, 0.0, 0.0]])


def test_batch_normalize_guard_1e_8():
    roll = np.zeros((1, 3))
    m = _mask(".xx")
    # every weight masked out: mean 0 <= 1e-8 → no division, all 0 (never NaN)
    old = np.array([[0.0, 5.0, 6.0]])
    w = oracle.rollout_is_weights(old, roll, m, mode="mask", batch_normalize=True)
    _close(w, [[0.0, 0.0, 0.0]])
    # mean 1e-9 <= 1e-8: left as is
    old = np.array([[0.0, L(1e-9), L(1e-9)]])
    _close(oracle.rollout_is_weights(old, roll, m, mode="none", batch_normalize=True), [[0.0, 1e-9, 1e-9]])
    # mean 2e-8 > 1e-8: normalised to 1
    old = np.array([[0.0, L(2e-8), L(2e-8)]])
    _close(oracle.rollout_is_weights(old, roll, m, mode="none", batch_normalize=True), [[0.0, 1.0, 1.0]])
    # all-masked batch: nothing to average, all 0
    _close(oracle.rollout_is_weights(old, roll, _mask("..."), batch_normalize=True), [[0.0, 0.0, 0.0]])


def test_batch_normalize_with_an_infinite_weight_is_the_exact_ratio():
    # mode none, δ = [800, 800, 0]: w = [inf, inf, 1]; exact w_i / w̄ = 3·e^δ_i / (2·e^800 + 1)
    # → 3/2 for each infinite weight, 1.5·e^−800 = 0 (underflow) for the third; never NaN.
    old = np.array([[0.0, 800.0, 800.0, 0.0]])
    w = oracle.rollout_is_weights(old, np.zeros((1, 4)), _mask(".xxx"), mode="none", batch_normalize=True)
    _close(w, [[0.0, 1.5, 1.5, 0.0]])


def test_is_weights_empty_rows_and_no_rows():
    old, roll = np.ones((2, 3)), np.zeros((2, 3))
    for level in ("token", "sequence"):
        w = oracle.rollout_is_weights(old, roll, _mask("...", ".x."), level=level, mode="none")
        _close(w, [[0.0, 0.0, 0.0], [0.0, math.e, 0.0]])
    assert oracle.rollout_is_weights(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3), bool)).shape == (0, 3)


# ================================================================================================
# offpolicy.rejection
# ================================================================================================

# ρ = [3, 1, 0.5, 1.5]:
#   kl_of="rollout_old": d = rollout − old = −δ = [−ln 3, 0, ln 2, −ln 1.5] = [−1.0986, 0, 0.6931, −0.4055]
#   kl_of="old_rollout": d = δ = [1.0986, 0, −0.6931, 0.4055]
#   k2 = d²/2 = [0.60347, 0, 0.24023, 0.08220] (either direction); Σ = 0.92590, mean 0.23147, max 0.60347
#   k3 (rollout_old) = e^−d − 1 + d = ρ − 1 − ln ρ = [0.90139, 0, 0.19315, 0.09453]
#   k3 (old_rollout) = 1/ρ − 1 + ln ρ            = [0.43195, 0, 0.30685, 0.07213]


def _rej(**kw):
    return oracle.rollout_rejection_mask(OLD, ROLL, M1, **kw)


def _rows(*flags):
    return np.array([[False] + list(flags)])


def test_rejection_output_is_bool_and_no_bounds_keeps_every_valid_token():
    keep = _rej()
    assert keep.dtype == np.bool_
    np.testing.assert_array_equal(keep, _rows(True, True, True, True))


def test_rejection_ratio_token():
    np.testing.assert_array_equal(_rej(lo=0.8, hi=2.0), _rows(False, True, False, True))
    np.testing.assert_array_equal(_rej(hi=2.0), _rows(False, True, True, True))
    # "ratio" does not depend on kl_of
    np.testing.assert_array_equal(_rej(lo=0.8, hi=2.0, kl_of="old_rollout"), _rows(False, True, False, True))


def test_rejection_ratio_sequence_levels():
    # seq_sum: Π ρ = 2.25;  seq_mean: 2.25^(1/4) = 1.2247;  seq_max: 3
    np.testing.assert_array_equal(_rej(level="seq_sum", hi=2.0), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(level="seq_sum", hi=2.5), _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(level="seq_mean", lo=0.8, hi=1.3), _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(level="seq_mean", hi=1.2), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(level="seq_max", hi=3.5), _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(level="seq_max", hi=2.5), _rows(*[False] * 4))
    # seq_all: every ρ in [0.4, 3.5] → kept; lo 0.6 makes ρ = 0.5 an outlier that drops the whole row
    np.testing.assert_array_equal(_rej(level="seq_all", lo=0.4, hi=3.5), _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(level="seq_all", lo=0.6, hi=3.5), _rows(*[False] * 4))


def test_rejection_k1_direction_kl_of():
    # rollout_old d = [−1.0986, 0, 0.6931, −0.4055] in [−0.5, 1.5] → [F, T, T, T]
    np.testing.assert_array_equal(_rej(statistic="k1", lo=-0.5, hi=1.5), _rows(False, True, True, True))
    # old_rollout d = [1.0986, 0, −0.6931, 0.4055] in [−0.5, 1.5] → [T, T, F, T]
    np.testing.assert_array_equal(_rej(statistic="k1", lo=-0.5, hi=1.5, kl_of="old_rollout"),
                                  _rows(True, True, False, True))
    # seq_sum of k1 (rollout_old): −1.0986 + 0 + 0.6931 − 0.4055 = −ln 2.25 = −0.8109
    np.testing.assert_array_equal(_rej(statistic="k1", level="seq_sum", lo=-0.85, hi=0.0), _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(statistic="k1", level="seq_sum", lo=-0.8, hi=0.0), _rows(*[False] * 4))
    # seq_mean of k1 (old_rollout): ln 2.25 / 4 = 0.2027
    np.testing.assert_array_equal(_rej(statistic="k1", level="seq_mean", hi=0.21, kl_of="old_rollout"),
                                  _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(statistic="k1", level="seq_mean", hi=0.20, kl_of="old_rollout"),
                                  _rows(*[False] * 4))


def test_rejection_k2_each_level():
    # k2 = [0.60347, 0, 0.24023, 0.08220]
    np.testing.assert_array_equal(_rej(statistic="k2", hi=0.5), _rows(False, True, True, True))
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_sum", hi=1.0), _rows(*[True] * 4))   # 0.9259
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_sum", hi=0.9), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_mean", hi=0.24), _rows(*[True] * 4))  # 0.2315
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_mean", hi=0.23), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_max", hi=0.61), _rows(*[True] * 4))   # 0.6035
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_max", hi=0.60), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k2", level="seq_all", hi=0.5), _rows(*[False] * 4))
    # lo on a k statistic: k2 >= 0.05 drops the exact-0 token only
    np.testing.assert_array_equal(_rej(statistic="k2", lo=0.05), _rows(True, False, True, True))


def test_rejection_k3_direction_and_levels():
    # rollout_old k3 = [0.90139, 0, 0.19315, 0.09453]; old_rollout k3 = [0.43195, 0, 0.30685, 0.07213]
    np.testing.assert_array_equal(_rej(statistic="k3", hi=0.5), _rows(False, True, True, True))
    np.testing.assert_array_equal(_rej(statistic="k3", hi=0.5, kl_of="old_rollout"), _rows(True, True, True, True))
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_max", hi=0.5), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_max", hi=0.5, kl_of="old_rollout"),
                                  _rows(*[True] * 4))
    # seq_sum: 1.18907 (rollout_old) vs 0.81093 (old_rollout); seq_mean: 0.29727 vs 0.20273
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_sum", hi=1.0), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_sum", hi=1.0, kl_of="old_rollout"),
                                  _rows(*[True] * 4))
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_mean", hi=0.25), _rows(*[False] * 4))
    np.testing.assert_array_equal(_rej(statistic="k3", level="seq_mean", hi=0.25, kl_of="old_rollout"),
                                  _rows(*[True] * 4))


def test_rejection_criteria_combine_by_and():
    a = _rej(lo=0.8, hi=2.0)                      # [F, T, F, T]
    b = _rej(statistic="k3", hi=0.1)               # k3 rollout_old <= 0.1: [F, T, F, T]
    c = _rej(statistic="k2", hi=0.05)              # [F, T, F, F]
    np.testing.assert_array_equal(a & b & c, _rows(False, True, False, False))


def test_rejection_overflow_and_empty_rows():
    # δ = 800 → ρ = inf: rejected by a finite hi, kept with no upper bound; k3 (rollout_old) = e^800 − … = inf
    old = np.array([[0.0, 800.0, 0.0], [0.0, 1.0, 1.0]])
    roll = np.zeros((2, 3))
    m = _mask(".xx", "...")
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, hi=2.0),
                                  [[False, False, True], [False, False, False]])
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, lo=0.5),
                                  [[False, True, True], [False, False, False]])
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, statistic="k3", hi=1e300),
                                  [[False, False, True], [False, False, False]])
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, level="seq_sum", hi=1e300),
                                  [[False, False, False], [False, False, False]])


def test_verl_k1_lo_hi_bounds_rollout_over_old_not_icepop_ratio():
    """verl's token_k1 with rollout_rs_threshold 'lo_hi' compares k1 = −log ρ with [log lo, log hi]."""
    # ρ = [3, 0.3, 1], bounds (lo, hi) = (0.5, 5.0)
    old, roll = _rho_row([3.0, 0.3, 1.0])
    m = _mask(".xxx")
    # IcePop / masked IS: ρ in [0.5, 5] → [T, F, T]
    icepop = oracle.rollout_rejection_mask(old, roll, m, lo=0.5, hi=5.0)
    np.testing.assert_array_equal(icepop, [[False, True, False, True]])
    # verl: k1 = rollout − old = −ln ρ = [−1.0986, 1.2040, 0] in [ln 0.5, ln 5] = [−0.6931, 1.6094] → [F, T, T]
    verl = oracle.rollout_rejection_mask(old, roll, m, statistic="k1", lo=L(0.5), hi=L(5.0))
    np.testing.assert_array_equal(verl, [[False, False, True, True]])
    # … which is the ratio test with reciprocal, swapped bounds: ρ in [1/5, 1/0.5] = [0.2, 2]
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, lo=0.2, hi=2.0), verl)
    # symmetric bounds (lo·hi = 1, e.g. verl's single value 2.0 → lo = 1/2): both agree, ρ in [0.5, 2] → [F, F, T]
    np.testing.assert_array_equal(
        oracle.rollout_rejection_mask(old, roll, m, statistic="k1", lo=L(0.5), hi=L(2.0)),
        oracle.rollout_rejection_mask(old, roll, m, lo=0.5, hi=2.0))
    np.testing.assert_array_equal(oracle.rollout_rejection_mask(old, roll, m, lo=0.5, hi=2.0),
                                  [[False, False, False, True]])


# ================================================================================================
# offpolicy.decoupled_ppo
# ================================================================================================

# three valid tokens (positions 1..3), ε = 0.2:
#   a: r = e^(logp − prox) = 1.1, w = e^(prox − behav) = 2,   A = +1: PPO max(−1.1, −1.1) = −1.1 (tie →
#      unclipped), L = 2·(−1.1) = −2.2, dL/dlogp = w·(−A·r) = −2.2
#   b: r = 1.5, w = 0.5, A = +1: PPO max(−1.5, −1.2) = −1.2 (clipped), L = −0.6, gradient 0
#   c: r = 1.5, w = 4,   A = −1: PPO max(1.5, 1.2) = 1.5 (unclipped), L = 6, gradient 4·(1·1.5) = 6
PROX = np.array([[0.0, -1.0, -0.5, -2.0]])
LOGP = PROX + np.array([[0.0, L(1.1), L(1.5), L(1.5)]])
BEHAV = PROX - np.array([[0.0, L(2.0), L(0.5), L(4.0)]])
ADV = np.array([[0.0, 1.0, 1.0, -1.0]])
MD = _mask(".xxx")


def _dec(**kw):
    return oracle.decoupled_ppo_token_loss(LOGP, PROX, BEHAV, ADV, MD, **kw)


def _dec_grad(u, **kw):
    return oracle.decoupled_ppo_token_loss_grad(LOGP, PROX, BEHAV, ADV, MD, u, **kw)


def test_decoupled_value_and_grad_by_hand():
    _close(_dec(), [[0.0, -2.2, -0.6, 6.0]])
    _close(_dec_grad(np.ones((1, 4))), [[0.0, -2.2, 0.0, 6.0]])
    # upstream scales each token: u = [·, 0.5, 3, −2] → [−1.1, 0, −12]
    _close(_dec_grad(np.array([[9.0, 0.5, 3.0, -2.0]])), [[0.0, -1.1, 0.0, -12.0]])


def test_decoupled_is_w_times_ppo_and_w_1_is_ppo():
    ppo = oracle.ppo_token_loss(LOGP, PROX, ADV, MD)
    _close(_dec(), np.array([[0.0, 2.0, 0.5, 4.0]]) * ppo)
    # behav = prox: w = 1, the loss and gradient are PPO's against prox
    u = np.array([[0.0, 0.3, -1.0, 2.0]])
    _close(oracle.decoupled_ppo_token_loss(LOGP, PROX, PROX, ADV, MD), ppo)
    _close(oracle.decoupled_ppo_token_loss_grad(LOGP, PROX, PROX, ADV, MD, u),
           oracle.ppo_token_loss_grad(LOGP, PROX, ADV, MD, u))


def test_decoupled_grad_matches_central_finite_difference():
    # Σ u·L(logp) is smooth at these tokens (r = 1.1 inside the clip range, 1.5 far outside); w and the
    # clip branch are constants in logp, so a finite difference sees exactly w times PPO's slope.
    u = np.array([[0.0, 0.7, -1.3, 0.4]])
    for kw in ({}, {"behav_cap": 3.0}, {"behav_cap": 3.0, "behav_mode": "mask"}, {"dual_clip": 3.0}):
        g = _dec_grad(u, **kw)
        h = 1e-6
        fd = np.zeros_like(LOGP)
        for t in (1, 2, 3):
            plus, minus = LOGP.copy(), LOGP.copy()
            plus[0, t] += h
            minus[0, t] -= h
            Lp = oracle.decoupled_ppo_token_loss(plus, PROX, BEHAV, ADV, MD, **kw)
            Lm = oracle.decoupled_ppo_token_loss(minus, PROX, BEHAV, ADV, MD, **kw)
            fd[0, t] = (np.sum(u * Lp) - np.sum(u * Lm)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_decoupled_behav_cap_truncate_vs_mask():
    # cap 3: a (w = 2) unchanged; c (w = 4): truncate → 3: L = 4.5, gradient 4.5; mask → 0: L = 0, gradient 0
    _close(_dec(behav_cap=3.0), [[0.0, -2.2, -0.6, 4.5]])
    _close(_dec_grad(np.ones((1, 4)), behav_cap=3.0), [[0.0, -2.2, 0.0, 4.5]])
    _close(_dec(behav_cap=3.0, behav_mode="mask"), [[0.0, -2.2, -0.6, 0.0]])
    _close(_dec_grad(np.ones((1, 4)), behav_cap=3.0, behav_mode="mask"), [[0.0, -2.2, 0.0, 0.0]])
    # cap 0.4 truncates every w to 0.4: a −1.1·0.4 = −0.44, b −1.2·0.4 = −0.48, c 1.5·0.4 = 0.6; and masks all
    _close(_dec(behav_cap=0.4), [[0.0, -0.44, -0.48, 0.6]])
    _close(_dec(behav_cap=0.4, behav_mode="mask"), [[0.0, 0.0, 0.0, 0.0]])


def test_decoupled_dual_clip_and_eps():
    # dual clip 1.4 on c (A < 0): min(1.5, 1.4) = 1.4 → L = 4·1.4 = 5.6, gradient 0
    _close(_dec(dual_clip=1.4), [[0.0, -2.2, -0.6, 5.6]])
    _close(_dec_grad(np.ones((1, 4)), dual_clip=1.4), [[0.0, -2.2, 0.0, 0.0]])
    # eps_high = 0.05: a is clipped at 1.05 → PPO −1.05, L = −2.1, gradient 0
    _close(_dec(eps_high=0.05), [[0.0, -2.1, -0.525, 6.0]])
    _close(_dec_grad(np.ones((1, 4)), eps_high=0.05), [[0.0, 0.0, 0.0, 6.0]])


def test_decoupled_zero_times_inf_is_zero():
    # token 1: w = e^800 = inf, A = 0 → PPO 0 → L = 0, gradient 0
    # token 2: r = e^800 = inf, A = −1 → PPO inf, but w = 10 is masked by cap 5 → L = 0·inf := 0, gradient 0
    logp = np.array([[0.0, -1.0, 799.0]])
    prox = np.array([[0.0, -1.0, -1.0]])
    behav = np.array([[0.0, -801.0, -1.0 - L(10.0)]])
    A = np.array([[0.0, 0.0, -1.0]])
    m = _mask(".xx")
    loss = oracle.decoupled_ppo_token_loss(logp, prox, behav, A, m, behav_cap=5.0, behav_mode="mask")
    grad = oracle.decoupled_ppo_token_loss_grad(logp, prox, behav, A, m, np.ones((1, 3)), behav_cap=5.0,
                                                behav_mode="mask")
    _close(loss, [[0.0, 0.0, 0.0]])
    _close(grad, [[0.0, 0.0, 0.0]])
    # a zero upstream with an overflowed r and w = 1: gradient 0, not NaN
    grad = oracle.decoupled_ppo_token_loss_grad(logp, prox, prox, A, m, np.zeros((1, 3)))
    _close(grad, [[0.0, 0.0, 0.0]])


def test_decoupled_advantages_per_row_and_empty_rows():
    # A [B] = [1, 5]: row 0 = token a only (r 1.1, w 2) → −2.2; row 1 has no valid token → 0
    logp = np.vstack([LOGP, LOGP])
    prox, behav = np.vstack([PROX, PROX]), np.vstack([BEHAV, BEHAV])
    m = _mask(".x..", "....")
    _close(oracle.decoupled_ppo_token_loss(logp, prox, behav, np.array([1.0, 5.0]), m),
           [[0.0, -2.2, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    _close(oracle.decoupled_ppo_token_loss_grad(logp, prox, behav, np.array([1.0, 5.0]), m, np.ones((2, 4))),
           [[0.0, -2.2, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


# ================================================================================================
# offpolicy.proximal
# ================================================================================================

LP = np.array([[0.0, -1.0, -1.0, -1.0, -1.0]])
BLP = np.array([[0.0, -2.5, -2.5, -2.5, -2.5]])
M5 = _mask(".xxxx")


def _prox(vb, version=10, method="loglinear", mask=M5, logp=LP, behav=BLP):
    return oracle.proximal_logp_interpolation(logp, behav, vb, mask, version=version, method=method)


def test_proximal_alpha_cases_loglinear():
    # version 10; per-token v_b = [9, 7, 10, 0]:
    #   9 = v − 1:  α = (10 − 1 − 9)/(10 − 9) = 0        → behav = −2.5
    #   7 = v − 3:  α = (10 − 1 − 7)/(10 − 7) = 2/3      → −2.5 + (2/3)(1.5) = −1.5
    #   10 = v:     v − v_b = 0 → α = 0                   → −2.5
    #   0:          α = 9/10                              → −2.5 + 0.9·1.5 = −1.15
    vb = np.array([[-1, 9, 7, 10, 0]])  # position 0 masked: −1 (AReaL's prompt version) is never read
    _close(_prox(vb), [[0.0, -2.5, -1.5, -2.5, -1.15]])


def test_proximal_row_versions():
    # [B] form: row 0 v_b = 7 (α = 2/3 on every valid token), row 1 v_b = 9 (α = 0)
    logp = np.vstack([LP, LP])
    behav = np.vstack([BLP, BLP])
    m = _mask(".xxxx", ".xx..")
    out = oracle.proximal_logp_interpolation(logp, behav, np.array([7, 9]), m, version=10)
    _close(out, [[0.0, -1.5, -1.5, -1.5, -1.5], [0.0, -2.5, -2.5, 0.0, 0.0]])


def test_proximal_linear_method():
    # α = 2/3: log(⅓·e^−2.5 + ⅔·e^−1) = log(0.027361666 + 0.245252961) = log(0.272614627) = −1.29970
    expected = math.log(math.exp(-2.5) / 3 + 2 * math.exp(-1.0) / 3)
    vb = np.array([[0, 9, 7, 10, 0]])
    out = _prox(vb, method="linear")
    # α = 0 → exactly behav; α = 0.9: log(0.1·e^−2.5 + 0.9·e^−1)
    _close(out, [[0.0, -2.5, expected, -2.5, math.log(0.1 * math.exp(-2.5) + 0.9 * math.exp(-1.0))]])
    assert out[0, 1] == -2.5 and out[0, 3] == -2.5


def test_proximal_linear_without_underflow():
    # behav = −800, logp = −801, α = 2/3: log(⅓·e^−800 + ⅔·e^−801) = −800 + log(⅓ + ⅔·e^−1) (e^−800 underflows)
    logp = np.array([[0.0, -801.0]])
    behav = np.array([[0.0, -800.0]])
    out = oracle.proximal_logp_interpolation(logp, behav, np.array([7]), _mask(".x"), version=10, method="linear")
    _close(out, [[0.0, -800.0 + math.log(1 / 3 + 2 * math.exp(-1.0) / 3)]])


def test_proximal_version_zero_and_empty_rows():
    # version 0 and v_b = 0: α = 0 → behav; a row without valid tokens is 0
    m = _mask(".x...", ".....")
    out = oracle.proximal_logp_interpolation(np.vstack([LP, LP]), np.vstack([BLP, BLP]), np.array([0, 5]), m,
                                             version=0)
    _close(out, [[0.0, -2.5, 0.0, 0.0, 0.0], [0.0] * 5])


# ================================================================================================
# offpolicy.opsm
# ================================================================================================


def test_opsm_keep_and_drop():
    # row 0: old − logp = [0.25, 0.75] → D = 0.5; A = −1: kept iff D <= threshold (inclusive)
    # row 1: same drift, A = +1: always kept;  row 2: A = 0: kept;  row 3: no valid token → False
    logp = np.array([[0.0, -0.25, -0.75]] * 4)
    old = np.zeros((4, 3))
    A = np.array([-1.0, 1.0, 0.0, -1.0])
    m = _mask(".xx", ".xx", ".xx", "...")
    keep = oracle.off_policy_sequence_mask(logp, old, A, m, threshold=0.4)
    assert keep.dtype == np.bool_
    np.testing.assert_array_equal(keep, [[False, False, False], [False, True, True], [False, True, True],
                                         [False, False, False]])
    keep = oracle.off_policy_sequence_mask(logp, old, A, m, threshold=0.5)  # D = 0.5 <= 0.5
    np.testing.assert_array_equal(keep, [[False, True, True], [False, True, True], [False, True, True],
                                         [False, False, False]])


def test_opsm_per_token_advantages_and_negative_drift():
    # D = mean(old − logp) = mean(−0.5, −0.5) = −0.5 (the policy gained probability): kept under threshold 0
    logp = np.array([[0.0, -0.5, -0.5]])
    old = np.array([[0.0, -1.0, -1.0]])
    m = _mask(".xx")
    np.testing.assert_array_equal(oracle.off_policy_sequence_mask(logp, old, np.array([-1.0]), m, threshold=0.0),
                                  [[False, True, True]])
    # D = 0.5 > 0.1 with A = [−1, 2] per token: only the negative-advantage token is dropped
    np.testing.assert_array_equal(
        oracle.off_policy_sequence_mask(old, logp, np.array([[9.0, -1.0, 2.0]]), m, threshold=0.1),
        [[False, False, True]])


# ================================================================================================
# masked positions are never read
# ================================================================================================


def _plant(x, mask, value):
    y = np.array(x, dtype=np.float64, copy=True)
    y[~mask] = value
    return y


@pytest.mark.parametrize("g", GARBAGE)
def test_masked_positions_never_change_valid_outputs(g):
    old = np.array([[0.0, L(3.0), 0.0, L(0.5), 0.3], [0.0, 0.2, -0.1, 0.0, 0.0]])
    roll = np.array([[0.0, 0.0, 0.0, 0.0, 0.0], [0.0, -0.3, 0.4, 0.0, 0.0]])
    m = _mask(".xx.x", ".xx..")
    old_g, roll_g = _plant(old, m, g), _plant(roll, m, g)
    for kw in ({}, {"level": "sequence"}, {"level": "sequence", "seq_stat": "geometric", "mode": "mask"},
               {"mode": "none", "batch_normalize": True}, {"level": "sequence", "batch_normalize": True}):
        np.testing.assert_array_equal(oracle.rollout_is_weights(old_g, roll_g, m, **kw),
                                      oracle.rollout_is_weights(old, roll, m, **kw))
    for kw in ({"hi": 2.0}, {"level": "seq_sum", "hi": 2.0}, {"statistic": "k3", "level": "seq_max", "hi": 0.5},
               {"statistic": "k1", "level": "seq_mean", "lo": -0.1, "hi": 0.1}, {"level": "seq_all", "lo": 0.6}):
        np.testing.assert_array_equal(oracle.rollout_rejection_mask(old_g, roll_g, m, **kw),
                                      oracle.rollout_rejection_mask(old, roll, m, **kw))
    # decoupled loss and gradient (logp, prox, behav, A [B, T] and upstream all poisoned where masked)
    logp = old + 0.05
    A = np.array([[0.0, 1.0, -1.0, 0.0, 0.5], [0.0, -0.5, 2.0, 0.0, 0.0]])
    u = np.array([[0.0, 1.0, 0.5, 0.0, -1.0], [0.0, 2.0, 1.0, 0.0, 0.0]])
    args = (logp, old, roll, A, m)
    args_g = tuple(_plant(a, m, g) for a in (logp, old, roll, A)) + (m,)
    for kw in ({}, {"behav_cap": 1.5, "behav_mode": "mask"}, {"dual_clip": 2.0}):
        np.testing.assert_array_equal(oracle.decoupled_ppo_token_loss(*args_g, **kw),
                                      oracle.decoupled_ppo_token_loss(*args, **kw))
        np.testing.assert_array_equal(oracle.decoupled_ppo_token_loss_grad(*args_g, _plant(u, m, g), **kw),
                                      oracle.decoupled_ppo_token_loss_grad(*args, u, **kw))
    # proximal interpolation: masked behav_version holds −1 and 10**6 (out of range, never read)
    vb = np.array([[-1, 3, 4, 10**6, 5], [-1, 2, 5, -7, 10**6]])
    for method in ("loglinear", "linear"):
        np.testing.assert_array_equal(
            oracle.proximal_logp_interpolation(_plant(logp, m, g), _plant(roll, m, g), vb, m, version=5,
                                               method=method),
            oracle.proximal_logp_interpolation(logp, roll, np.where(m, vb, 0), m, version=5, method=method))
    np.testing.assert_array_equal(oracle.off_policy_sequence_mask(_plant(logp, m, g), old_g, _plant(A, m, g), m,
                                                                  threshold=0.01),
                                  oracle.off_policy_sequence_mask(logp, old, A, m, threshold=0.01))


def test_outputs_are_zero_or_false_at_masked_positions():
    old, roll = np.full((2, 4), 0.7), np.zeros((2, 4))
    m = _mask(".x.x", "....")
    assert not oracle.rollout_is_weights(old, roll, m, mode="none")[~m].any()
    assert not oracle.rollout_rejection_mask(old, roll, m)[~m].any()
    assert not oracle.decoupled_ppo_token_loss(old, roll, roll, np.ones(2), m)[~m].any()
    assert not oracle.decoupled_ppo_token_loss_grad(old, roll, roll, np.ones(2), m, np.ones((2, 4)))[~m].any()
    assert not oracle.proximal_logp_interpolation(old, roll - 1, np.array([1, 1]), m, version=3)[~m].any()
    assert not oracle.off_policy_sequence_mask(old, roll, np.ones(2), m, threshold=0.0)[~m].any()


# ================================================================================================
# presets use only the api.md keywords and run
# ================================================================================================

V11 = ("rollout_is_weights", "rollout_rejection_mask", "decoupled_ppo_token_loss", "proximal_logp_interpolation",
       "off_policy_sequence_mask")


def _v11_call(function, kw):
    old, roll = np.array([[0.0, 0.3, -0.2]]), np.zeros((1, 3))
    m = _mask(".xx")
    if function == "rollout_is_weights":
        return oracle.rollout_is_weights(old, roll, m, **kw)
    if function == "rollout_rejection_mask":
        return oracle.rollout_rejection_mask(old, roll, m, **kw)
    if function == "decoupled_ppo_token_loss":
        return oracle.decoupled_ppo_token_loss(old + 0.1, old, roll, np.array([1.0]), m, **kw)
    if function == "proximal_logp_interpolation":
        return oracle.proximal_logp_interpolation(old, roll, np.array([1]), m, version=3, **kw)
    return oracle.off_policy_sequence_mask(old, roll, np.array([-1.0]), m, threshold=0.1, **kw)


def test_presets_of_v11_functions_are_accepted_by_the_oracle():
    seen = 0
    for name, table in PRESETS.items():
        for function in V11:
            if function in table:
                seen += 1
                _v11_call(function, dict(table[function]))
                assert preset_kwargs(name, function) == table[function]
    assert seen >= 7
    assert preset_kwargs("trl", "rollout_is_weights") == {"level": "sequence", "mode": "mask", "hi": 3.0}
    assert preset_kwargs("verl", "rollout_is_weights") == {"log_ratio_clamp": 20.0}
    assert preset_kwargs("verl", "decoupled_ppo_token_loss") == {"dual_clip": 3.0, "behav_cap": 2.0}
    assert preset_kwargs("areal", "rollout_rejection_mask") == {"kl_of": "old_rollout", "hi": 5.0}


# ================================================================================================
# errors: `<function>: <argument>:`, TypeError for a dtype / Python type, ValueError otherwise
# ================================================================================================

_O, _R, _M = np.array([[0.0, 0.1, 0.2]]), np.zeros((1, 3)), _mask(".xx")
_A = np.array([1.0])
_VB = np.array([1])


def _isw(**kw):
    return lambda: oracle.rollout_is_weights(kw.pop("old", _O), kw.pop("roll", _R), kw.pop("mask", _M), **kw)


def _rjm(**kw):
    return lambda: oracle.rollout_rejection_mask(kw.pop("old", _O), kw.pop("roll", _R), _M, **kw)


def _dpl(**kw):
    return lambda: oracle.decoupled_ppo_token_loss(kw.pop("logp", _O), _O, kw.pop("behav", _R), _A, _M, **kw)


def _dpg(**kw):
    return lambda: oracle.decoupled_ppo_token_loss_grad(_O, _O, _R, _A, _M, kw.pop("upstream", np.ones((1, 3))),
                                                        **kw)


def _pli(vb=_VB, **kw):
    kw.setdefault("version", 3)
    return lambda: oracle.proximal_logp_interpolation(kw.pop("logp", _O), _R, vb, _M, **kw)


def _opsm(**kw):
    return lambda: oracle.off_policy_sequence_mask(_O, _R, kw.pop("adv", _A), _M, **kw)


ERRORS = [
    # rollout_is_weights
    (_isw(level="seq"), ValueError, "rollout_is_weights: level:"),
    (_isw(seq_stat="arithmetic"), ValueError, "rollout_is_weights: seq_stat:"),
    (_isw(mode="clip"), ValueError, "rollout_is_weights: mode:"),
    (_isw(mode=1), TypeError, "rollout_is_weights: mode:"),
    (_isw(lo=0.0), ValueError, "rollout_is_weights: lo:"),
    (_isw(hi=-1.0), ValueError, "rollout_is_weights: hi:"),
    (_isw(lo=3.0, hi=2.0), ValueError, "rollout_is_weights: lo:"),
    (_isw(lo=3.0), ValueError, "rollout_is_weights: lo:"),  # hi defaults to 2
    (_isw(hi=float("inf")), ValueError, "rollout_is_weights: hi:"),
    (_isw(hi="2"), TypeError, "rollout_is_weights: hi:"),
    (_isw(log_ratio_clamp=0.0), ValueError, "rollout_is_weights: log_ratio_clamp:"),
    (_isw(batch_normalize=1), TypeError, "rollout_is_weights: batch_normalize:"),
    (_isw(old=np.array([[0.0, np.nan, 0.0]])), ValueError, "rollout_is_weights: old_logp:"),
    (_isw(roll=np.array([[0.0, 0.0, np.inf]])), ValueError, "rollout_is_weights: rollout_logp:"),
    (_isw(old=np.array([[0, 1, 2]])), TypeError, "rollout_is_weights: old_logp:"),
    (_isw(roll=np.zeros((1, 4))), ValueError, "rollout_is_weights: rollout_logp:"),
    (_isw(mask=np.array([[1, 1, 1]])), ValueError, "rollout_is_weights: mask:"),
    (_isw(mask=np.array([[0, 2, 1]])), ValueError, "rollout_is_weights: mask:"),
    # rollout_rejection_mask
    (_rjm(statistic="k4"), ValueError, "rollout_rejection_mask: statistic:"),
    (_rjm(level="sequence"), ValueError, "rollout_rejection_mask: level:"),
    (_rjm(kl_of="old_old"), ValueError, "rollout_rejection_mask: kl_of:"),
    (_rjm(lo=0.0), ValueError, "rollout_rejection_mask: lo:"),  # a ratio bound must be > 0
    (_rjm(lo=2.0, hi=1.0), ValueError, "rollout_rejection_mask: lo:"),
    (_rjm(statistic="k1", lo=1.0, hi=-1.0), ValueError, "rollout_rejection_mask: lo:"),
    (_rjm(statistic="k2", hi=float("nan")), ValueError, "rollout_rejection_mask: hi:"),
    (_rjm(statistic="k3", hi=True), TypeError, "rollout_rejection_mask: hi:"),
    (_rjm(old=np.array([[0.0, 0.0, -np.inf]])), ValueError, "rollout_rejection_mask: old_logp:"),
    # decoupled_ppo_token_loss (+ _grad)
    (_dpl(eps_low=-0.1), ValueError, "decoupled_ppo_token_loss: eps_low:"),
    (_dpl(eps_high=-0.1), ValueError, "decoupled_ppo_token_loss: eps_high:"),
    (_dpl(dual_clip=1.0), ValueError, "decoupled_ppo_token_loss: dual_clip:"),
    (_dpl(behav_cap=0.0), ValueError, "decoupled_ppo_token_loss: behav_cap:"),
    (_dpl(behav_cap=-2.0), ValueError, "decoupled_ppo_token_loss: behav_cap:"),
    (_dpl(behav_mode="clip"), ValueError, "decoupled_ppo_token_loss: behav_mode:"),
    (_dpl(behav=np.array([[0.0, np.nan, 0.0]])), ValueError, "decoupled_ppo_token_loss: behav_logp:"),
    (_dpl(logp=np.array([[0, 0, 0]])), TypeError, "decoupled_ppo_token_loss: logp:"),
    (_dpg(upstream=np.array([[0.0, np.nan, 1.0]])), ValueError, "decoupled_ppo_token_loss_grad: upstream:"),
    (_dpg(behav_cap=0.0), ValueError, "decoupled_ppo_token_loss_grad: behav_cap:"),
    # proximal_logp_interpolation
    (_pli(np.array([1.0])), TypeError, "proximal_logp_interpolation: behav_version:"),
    (_pli(np.array([True])), TypeError, "proximal_logp_interpolation: behav_version:"),
    (_pli(np.array([-1])), ValueError, "proximal_logp_interpolation: behav_version:"),
    (_pli(np.array([4])), ValueError, "proximal_logp_interpolation: behav_version:"),
    (_pli(np.array([[0, 4, 1]])), ValueError, "proximal_logp_interpolation: behav_version:"),
    (_pli(np.array([1, 1])), ValueError, "proximal_logp_interpolation: behav_version:"),
    (_pli(version=3.0), TypeError, "proximal_logp_interpolation: version:"),
    (_pli(version=True), TypeError, "proximal_logp_interpolation: version:"),
    (_pli(version=-1), ValueError, "proximal_logp_interpolation: version:"),
    (_pli(method="geometric"), ValueError, "proximal_logp_interpolation: method:"),
    (_pli(logp=np.array([[0.0, 0.0, np.nan]])), ValueError, "proximal_logp_interpolation: logp:"),
    # off_policy_sequence_mask
    (_opsm(threshold=float("nan")), ValueError, "off_policy_sequence_mask: threshold:"),
    (_opsm(threshold=float("inf")), ValueError, "off_policy_sequence_mask: threshold:"),
    (_opsm(threshold="0.5"), TypeError, "off_policy_sequence_mask: threshold:"),
    (_opsm(threshold=None), TypeError, "off_policy_sequence_mask: threshold:"),
    (_opsm(adv=np.array([np.nan]), threshold=0.1), ValueError, "off_policy_sequence_mask: advantages:"),
    (_opsm(adv=np.array([1.0, 2.0]), threshold=0.1), ValueError, "off_policy_sequence_mask: advantages:"),
]


@pytest.mark.parametrize("call, exc, prefix", ERRORS, ids=[e[2] + str(i) for i, e in enumerate(ERRORS)])
def test_bad_inputs_raise_with_function_and_argument(call, exc, prefix):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(prefix), str(info.value)


def test_threshold_is_required():
    with pytest.raises(TypeError):
        oracle.off_policy_sequence_mask(_O, _R, _A, _M)  # no default: keyword-only and required


def test_masked_behav_version_out_of_range_is_accepted():
    out = oracle.proximal_logp_interpolation(_O, _R, np.array([[-1, 2, 3]]), _M, version=3)
    # α = (3 − 1 − 2)/(3 − 2) = 0 → 0.0 (behav); α(v_b = 3) = 0 → 0.0
    _close(out, [[0.0, 0.0, 0.0]])
