"""oracle.sapo/gmpo/dppo/dro token losses (spec v1.1, "policy losses of 2025-26") and their gradients.

Every expected number is derived by hand in the comments (σ, e^x and log evaluated with ``math``, never
with the code under test). Gradients are also checked against central finite differences: directly for
SAPO, GMPO and DRO (no stop-gradient), and for DPPO along the direction that moves ``logp`` and
``old_logp`` together, which holds the log-ratio (so the stop-gradient weight) and, away from the
boundaries, the keep decision fixed.
"""

import math

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from tests.preset_tables import NOT_EXPRESSIBLE, PRESETS

pytestmark = pytest.mark.filterwarnings("error")  # no overflow / invalid-value warning anywhere

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]
MASK1 = np.array([[0, 1]], dtype=bool)
UP1 = np.array([[0.0, 1.0]])


def sigma(x):
    """The logistic function, for the hand values."""
    return 1.0 / (1.0 + math.exp(-x))


def tok(logp, old, A):
    """One valid token (position 1) with the given log-probs; advantage in [B] form."""
    return np.array([[0.0, float(logp)]]), np.array([[0.0, float(old)]]), np.array([float(A)]), MASK1


def one(fn, logp, old, A, **kw):
    """``(L, dL/dlogp)`` of the single valid token, upstream 1."""
    args = tok(logp, old, A)
    L = getattr(oracle, fn)(*args, **kw)
    g = getattr(oracle, fn + "_grad")(*args, UP1, **kw)
    assert L[0, 0] == 0.0 and g[0, 0] == 0.0  # the masked first position
    return float(L[0, 1]), float(g[0, 1])


def row(d, A, **kw):
    """GMPO on one row of len(d) valid tokens (position 0 masked), log-ratios d; upstream 1."""
    n = len(d)
    old = np.full((1, n + 1), -1.0)
    logp = old.copy()
    logp[0, 1:] += np.asarray(d, dtype=float)
    mask = np.ones((1, n + 1), dtype=bool)
    mask[0, 0] = False
    adv = np.array([float(A)]) if np.ndim(A) == 0 else np.concatenate([[0.0], np.asarray(A, float)])[None, :]
    L = oracle.gmpo_token_loss(logp, old, adv, mask, **kw)
    g = oracle.gmpo_token_loss_grad(logp, old, adv, mask, np.ones((1, n + 1)), **kw)
    assert L[0, 0] == 0.0 and g[0, 0] == 0.0
    return L[0, 1:], g[0, 1:]


# --------------------------------------------------------------------------------------------
# SAPO
# --------------------------------------------------------------------------------------------


def test_sapo_on_policy_both_signs():
    # r = 1: σ(τ·0) = 1/2.  A = +1, τ = τ_pos = 1: L = −1·(4/1)·½ = −2; ∂L/∂logp = −A·4·σ(1−σ)·r = −4·¼ = −1
    assert one("sapo_token_loss", -0.7, -0.7, 1.0) == pytest.approx((-2.0, -1.0), abs=1e-15)
    # A = −1, τ = τ_neg = 1.05: L = +(4/1.05)·½ = 1.904761904761905; gradient +4·¼·1 = +1 (τ cancels)
    assert one("sapo_token_loss", -0.7, -0.7, -1.0) == pytest.approx((2.0 / 1.05, 1.0), abs=1e-15)
    # A = 0 takes τ_neg but contributes nothing
    assert one("sapo_token_loss", -0.7, -0.3, 0.0) == (0.0, 0.0)


def test_sapo_off_policy_values_both_signs():
    r = 2.0
    lp, old = math.log(r) - 1.0, -1.0  # d = log 2
    # A = +1, τ = 1: x = 1·(2 − 1) = 1; L = −4·σ(1); gradient −4·σ(1)(1 − σ(1))·2
    s1 = sigma(1.0)  # 0.7310585786300049
    L, g = one("sapo_token_loss", lp, old, 1.0)
    assert L == pytest.approx(-4.0 * s1, rel=1e-13)  # −2.9242343145200196
    assert g == pytest.approx(-8.0 * s1 * (1.0 - s1), rel=1e-12)  # −1.5728954659318548
    # A = −1, τ = 1.05: x = 1.05; L = +(4/1.05)·σ(1.05); gradient +4·σ(1.05)(1 − σ(1.05))·2
    s = sigma(1.05)  # 0.7407748...
    L, g = one("sapo_token_loss", lp, old, -1.0)
    assert L == pytest.approx(4.0 / 1.05 * s, rel=1e-13)  # 2.821999615932015
    assert g == pytest.approx(8.0 * s * (1.0 - s), rel=1e-12)  # 1.5362195833905885
    # r = ½, A = +2, τ = 1: x = −½; L = −2·4·σ(−½) = −3.0203; gradient −2·4·σ(−½)(1 − σ(−½))·½
    sh = sigma(-0.5)
    L, g = one("sapo_token_loss", math.log(0.5) - 1.0, -1.0, 2.0)
    assert L == pytest.approx(-8.0 * sh, rel=1e-13)
    assert g == pytest.approx(-4.0 * sh * (1.0 - sh), rel=1e-12)


def test_sapo_temperatures_are_keywords():
    # τ_pos = 2, r = 1.5, A = +1: x = 2·0.5 = 1; L = −(4/2)·σ(1) = −2σ(1); gradient −4·σ(1)(1 − σ(1))·1.5
    s1 = sigma(1.0)
    L, g = one("sapo_token_loss", math.log(1.5) - 1.0, -1.0, 1.0, tau_pos=2.0)
    assert L == pytest.approx(-2.0 * s1, rel=1e-13)
    assert g == pytest.approx(-6.0 * s1 * (1.0 - s1), rel=1e-12)
    # τ_neg = 3, r = 1.5, A = −0.5: x = 1.5; L = 0.5·(4/3)·σ(1.5); gradient 0.5·4·σ(1.5)(1 − σ(1.5))·1.5
    s = sigma(1.5)
    L, g = one("sapo_token_loss", math.log(1.5) - 1.0, -1.0, -0.5, tau_neg=3.0)
    assert L == pytest.approx(0.5 * 4.0 / 3.0 * s, rel=1e-13)
    assert g == pytest.approx(3.0 * s * (1.0 - s), rel=1e-12)


def test_sapo_overflow_saturates_without_nan():
    # d = 800: r = e^800 = inf (float64 max ≈ e^709.78); σ(τ(r − 1)) = σ(inf) = 1
    # A = +1: L = −4/τ_pos = −4, gradient 4·σ(1 − σ)·r = 4·1·0·inf := 0
    assert one("sapo_token_loss", -0.5, -800.5, 1.0) == (-4.0, 0.0)
    # A = −3: L = +3·4/1.05, gradient 0
    L, g = one("sapo_token_loss", -0.5, -800.5, -3.0)
    assert L == pytest.approx(12.0 / 1.05, rel=1e-15) and g == 0.0
    # A = 0: 0 · (4/τ) = 0
    assert one("sapo_token_loss", -0.5, -800.5, 0.0) == (0.0, 0.0)
    # large finite r (d = 700, r ≈ 1e304): σ(1 − σ) underflows, gradient exactly 0, value −4
    assert one("sapo_token_loss", -0.5, -700.5, 1.0) == (-4.0, 0.0)
    # d = −800: r = 0, x = −τ; A = +1: L = −4·σ(−1); gradient −4·σ(1 − σ)·0 = 0
    L, g = one("sapo_token_loss", -800.5, -0.5, 1.0)
    assert L == pytest.approx(-4.0 * sigma(-1.0), rel=1e-13) and g == 0.0


def test_sapo_log_ratio_clamp():
    # clamp c = 0.5. d = 0.5 exactly (−0.5 − (−1.0)): on the boundary, the gradient passes
    # r = e^0.5, A = +1, τ = 1: L = −4σ(e^0.5 − 1); gradient −4σ(1 − σ)·e^0.5
    r = math.exp(0.5)
    s = sigma(r - 1.0)
    L, g = one("sapo_token_loss", -0.5, -1.0, 1.0, log_ratio_clamp=0.5)
    assert L == pytest.approx(-4.0 * s, rel=1e-13)
    assert g == pytest.approx(-4.0 * s * (1.0 - s) * r, rel=1e-12)
    # d = 0.75 > c: the value is that of d = 0.5 and the gradient is 0 (the clamp binds)
    L2, g2 = one("sapo_token_loss", -0.25, -1.0, 1.0, log_ratio_clamp=0.5)
    assert L2 == pytest.approx(-4.0 * s, rel=1e-13) and g2 == 0.0
    # d = −0.75 < −c: r = e^−0.5, A = −1, τ = 1.05: L = (4/1.05)·σ(1.05·(e^−0.5 − 1)), gradient 0
    L3, g3 = one("sapo_token_loss", -1.75, -1.0, -1.0, log_ratio_clamp=0.5)
    assert L3 == pytest.approx(4.0 / 1.05 * sigma(1.05 * (math.exp(-0.5) - 1.0)), rel=1e-13) and g3 == 0.0
    # verl's ±20: d = 25 gives the saturated value −4 and gradient 0; d = 800 is clamped to r = e^20
    assert one("sapo_token_loss", -0.5, -25.5, 1.0, log_ratio_clamp=20.0) == (-4.0, 0.0)
    assert one("sapo_token_loss", -0.5, -800.5, 1.0, log_ratio_clamp=20.0) == (-4.0, 0.0)


# --------------------------------------------------------------------------------------------
# GMPO
# --------------------------------------------------------------------------------------------


def test_gmpo_unclipped_row():
    # d = [0.1, 0.3], A = +1, ε = 0.4: s = d (inside), ρ = exp((0.1 + 0.3)/2) = e^0.2, L = −e^0.2 on both tokens
    # gradient at each token: (Σ u = 2)·(−Ā = −1)·ρ/(n = 2) = −e^0.2
    L, g = row([0.1, 0.3], 1.0)
    e = math.exp(0.2)  # 1.2214027581601699
    assert L == pytest.approx([-e, -e], rel=1e-14)
    assert g == pytest.approx([-e, -e], rel=1e-14)


def test_gmpo_sign_aware_clip_both_signs():
    # d = [0.1, 0.6], A = +1: s = [0.1, min(0.6, 0.4) = 0.4 (clipped)]; ρ = e^0.25; L = −e^0.25
    # gradient: token 1 2·(−1)·e^0.25/2 = −e^0.25; token 2 clipped: 0
    L, g = row([0.1, 0.6], 1.0)
    assert L == pytest.approx([-math.exp(0.25)] * 2, rel=1e-14)
    assert g == pytest.approx([-math.exp(0.25), 0.0], rel=1e-14, abs=0.0)
    assert g[1] == 0.0
    # same row, A = −1: s = max(d, clip(d)) = [0.1, 0.6] (A < 0 is clipped only below −ε_low)
    # ρ = e^0.35, L = +e^0.35, gradient 2·(+1)·e^0.35/2 = e^0.35 at both tokens
    L, g = row([0.1, 0.6], -1.0)
    assert L == pytest.approx([math.exp(0.35)] * 2, rel=1e-14)
    assert g == pytest.approx([math.exp(0.35)] * 2, rel=1e-14)
    # d = [−0.6, 0.2], A = −1: s = [max(−0.6, −0.4) = −0.4 (clipped), 0.2]; ρ = e^−0.1; L = e^−0.1
    L, g = row([-0.6, 0.2], -1.0)
    assert L == pytest.approx([math.exp(-0.1)] * 2, rel=1e-14)
    assert g[0] == 0.0 and g[1] == pytest.approx(math.exp(-0.1), rel=1e-14)
    # same row, A = +1: s = [min(−0.6, −0.4) = −0.6, 0.2] (A > 0 is clipped only above ε_high); ρ = e^−0.2
    L, g = row([-0.6, 0.2], 1.0)
    assert L == pytest.approx([-math.exp(-0.2)] * 2, rel=1e-14)
    assert g == pytest.approx([-math.exp(-0.2)] * 2, rel=1e-14)


def test_gmpo_clip_boundary_is_a_tie_that_passes_the_gradient():
    # ε = 0.5; d = 0.5 exactly (−0.5 − (−1.0)) with A = +1: clip(d) = d, a tie -> unclipped, gradient passes
    # single token: ρ = e^0.5, L = −e^0.5, gradient 1·(−1)·e^0.5/1
    L, g = row([0.5], 1.0, eps_low=0.5, eps_high=0.5)
    assert L[0] == pytest.approx(-math.exp(0.5), rel=1e-15) and g[0] == pytest.approx(-math.exp(0.5), rel=1e-15)
    # d = −0.5 with A = −1: on the lower bound, passes: ρ = e^−0.5, L = +e^−0.5, gradient +e^−0.5
    L, g = row([-0.5], -1.0, eps_low=0.5, eps_high=0.5)
    assert L[0] == pytest.approx(math.exp(-0.5), rel=1e-15) and g[0] == pytest.approx(math.exp(-0.5), rel=1e-15)
    # d = 0.75 with A = +1: beyond the bound, s = 0.5 constant: same value, gradient 0
    L, g = row([0.75], 1.0, eps_low=0.5, eps_high=0.5)
    assert L[0] == pytest.approx(-math.exp(0.5), rel=1e-15) and g[0] == 0.0


def test_gmpo_per_token_advantages():
    # A = [2, −1], d = [0.2, 0.3], ε = 0.4: s = [min(0.2, 0.2) = 0.2, max(0.3, 0.3) = 0.3] (both inside)
    # ρ = e^0.25, Ā = (2 − 1)/2 = 0.5, L = −0.5·e^0.25; gradient 2·(−0.5)·e^0.25/2 = −0.5·e^0.25 on both
    L, g = row([0.2, 0.3], [2.0, -1.0])
    assert L == pytest.approx([-0.5 * math.exp(0.25)] * 2, rel=1e-14)
    assert g == pytest.approx([-0.5 * math.exp(0.25)] * 2, rel=1e-14)
    # A = [1, 0], d = [0.2, 0.4]: s = [0.2, 0 (sgn 0)]; ρ = e^0.1, Ā = 0.5, L = −0.5·e^0.1
    # gradient: token 1 2·(−0.5)·e^0.1/2 = −0.5·e^0.1; token 2 (A = 0: s ≡ 0) 0
    L, g = row([0.2, 0.4], [1.0, 0.0])
    assert L == pytest.approx([-0.5 * math.exp(0.1)] * 2, rel=1e-14)
    assert g[0] == pytest.approx(-0.5 * math.exp(0.1), rel=1e-14) and g[1] == 0.0


def test_gmpo_sequence_and_token_advantage_forms_agree():
    rng = np.random.default_rng(3)
    mask = np.array([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0]], dtype=bool)
    logp = -np.abs(rng.normal(size=(2, 5))) - 0.1
    old = logp + rng.normal(0.0, 0.5, size=(2, 5))
    A_seq = np.array([0.1, -0.7])
    A_tok = np.repeat(A_seq[:, None], 5, axis=1)
    u = rng.normal(size=(2, 5))
    # Ā_b of the [B, T] form is the mean of n_b equal values: equal to A_b up to rounding
    np.testing.assert_allclose(oracle.gmpo_token_loss(logp, old, A_tok, mask),
                               oracle.gmpo_token_loss(logp, old, A_seq, mask), rtol=1e-15, atol=0)
    np.testing.assert_allclose(oracle.gmpo_token_loss_grad(logp, old, A_tok, mask, u),
                               oracle.gmpo_token_loss_grad(logp, old, A_seq, mask, u), rtol=1e-15, atol=0)


def test_gmpo_overflow():
    # A = −1, d = 800: not clipped (A < 0 is clipped below −ε only); ρ = e^800 = inf; L = −(−1)·inf = +inf
    # gradient (Σu = 1)·(+1)·inf/1 = +inf; never NaN
    L, g = row([800.0], -1.0)
    assert L[0] == math.inf and g[0] == math.inf
    # the same row with upstream 0: 0 · inf := 0
    logp = np.array([[0.0, -0.5]])
    old = np.array([[0.0, -800.5]])
    assert oracle.gmpo_token_loss_grad(logp, old, np.array([-1.0]), MASK1, np.zeros((1, 2)))[0, 1] == 0.0
    # A = 0: Ā = 0, L = 0·inf := 0, gradient 0
    L, g = row([800.0], 0.0)
    assert L[0] == 0.0 and g[0] == 0.0
    # A = +1, d = 800: clipped to ε_high = 0.4: L = −e^0.4, gradient 0 (finite)
    L, g = row([800.0], 1.0)
    assert L[0] == pytest.approx(-math.exp(0.4), rel=1e-15) and g[0] == 0.0
    # A = +1, d = −800: not clipped, ρ = e^−800 = 0: L = −0, gradient −1·0 = 0
    L, g = row([-800.0], 1.0)
    assert L[0] == 0.0 and g[0] == 0.0


# --------------------------------------------------------------------------------------------
# DPPO
# --------------------------------------------------------------------------------------------

LOG = math.log


@pytest.mark.parametrize(
    "p_old, p, A, kw, keep",
    [
        # TV, δ = 0.2: p − p_old = 0.1 ≤ 0.2 (A > 0): kept
        (0.5, 0.6, 1.0, {}, True),
        # 0.3 > 0.2 (A > 0): dropped
        (0.5, 0.8, 1.0, {}, False),
        # A < 0: 0.3 ≥ −0.2: kept (moving up against a negative advantage's push is allowed)
        (0.5, 0.8, -1.0, {}, True),
        # A < 0: −0.3 < −0.2: dropped
        (0.5, 0.2, -1.0, {}, False),
        # A > 0: −0.3 ≤ 0.2: kept
        (0.5, 0.2, 1.0, {}, True),
        # KL: D(0.5 ‖ 0.8) = ½·log(0.5/0.8) + ½·log(0.5/0.2) = ½·log(1.5625) = log 1.25 = 0.2231 > 0.2,
        # and p > p_old: dropped for A > 0
        (0.5, 0.8, 1.0, {"divergence": "kl"}, False),
        # δ_high = 0.25 ≥ 0.2231: kept
        (0.5, 0.8, 1.0, {"divergence": "kl", "delta_high": 0.25}, True),
        # A < 0 and p ≥ p_old: kept whatever D
        (0.5, 0.8, -1.0, {"divergence": "kl"}, True),
        # D(0.5 ‖ 0.6) = ½·log(0.5/0.6) + ½·log(0.5/0.4) = 0.020411 ≤ 0.2: kept
        (0.5, 0.6, 1.0, {"divergence": "kl"}, True),
        # D(0.5 ‖ 0.2) = ½·log(2.5) + ½·log(0.625) = log 1.25 > 0.2; A > 0 and p ≤ p_old: kept
        (0.5, 0.2, 1.0, {"divergence": "kl"}, True),
        # ... and A < 0 with p < p_old: dropped
        (0.5, 0.2, -1.0, {"divergence": "kl"}, False),
        # δ_low = 0.25 ≥ 0.2231: kept
        (0.5, 0.2, -1.0, {"divergence": "kl", "delta_low": 0.25}, True),
    ],
)
def test_dppo_keep_value_and_gradient(p_old, p, A, kw, keep):
    # kept: L = −A·w·logp with w = r = p/p_old (no cap); gradient −A·w. Dropped: 0 and 0.
    L, g = one("dppo_token_loss", LOG(p), LOG(p_old), A, **kw)
    if keep:
        r = p / p_old
        assert L == pytest.approx(-A * r * LOG(p), rel=1e-13)
        assert g == pytest.approx(-A * r, rel=1e-13)
    else:
        assert (L, g) == (0.0, 0.0)


def test_dppo_table_values():
    # p_old = 0.5, p = 0.6, A = +1: r = 1.2, L = −1.2·log 0.6 = 0.6129907485191889, gradient −1.2
    L, g = one("dppo_token_loss", LOG(0.6), LOG(0.5), 1.0)
    assert L == pytest.approx(0.6129907485191889, rel=1e-13) and g == pytest.approx(-1.2, rel=1e-13)
    # p_old = 0.5, p = 0.8, A = −1: r = 1.6, L = 1.6·log 0.8 = −0.35702968210273556, gradient +1.6
    L, g = one("dppo_token_loss", LOG(0.8), LOG(0.5), -1.0)
    assert L == pytest.approx(-0.35702968210273556, rel=1e-13) and g == pytest.approx(1.6, rel=1e-13)
    # with ratio_cap = 1.5: w = 1.5, L = 1.5·log 0.8 = −0.33471532697131456, gradient +1.5
    L, g = one("dppo_token_loss", LOG(0.8), LOG(0.5), -1.0, ratio_cap=1.5)
    assert L == pytest.approx(-0.33471532697131456, rel=1e-13) and g == pytest.approx(1.5, rel=1e-13)
    # a cap above r changes nothing: w = r = 1.6
    assert one("dppo_token_loss", LOG(0.8), LOG(0.5), -1.0, ratio_cap=3.0)[1] == pytest.approx(1.6, rel=1e-13)
    # p_old = 0.5, p = 0.2, A = +1: r = 0.4, L = −0.4·log 0.2 = 0.6437751649736402, gradient −0.4
    L, g = one("dppo_token_loss", LOG(0.2), LOG(0.5), 1.0)
    assert L == pytest.approx(0.6437751649736402, rel=1e-13) and g == pytest.approx(-0.4, rel=1e-13)


def test_dppo_boundaries_are_inclusive():
    # δ = 0 and p = p_old: p − p_old = 0 ≤ 0 (A > 0) and 0 ≥ −0 (A ≤ 0): kept, w = 1, L = −A·logp
    for A in (1.0, -1.0):
        for div in ("tv", "kl"):
            L, g = one("dppo_token_loss", -0.7, -0.7, A, divergence=div, delta_low=0.0, delta_high=0.0)
            assert L == pytest.approx(0.7 * A, rel=1e-15) and g == -A
    # δ_high = 0 and p a hair above p_old (d = 1e-12), A > 0: dropped (TV, and KL: D > 0 and p > p_old)
    for div in ("tv", "kl"):
        assert one("dppo_token_loss", -0.7 + 1e-12, -0.7, 1.0, divergence=div, delta_high=0.0) == (0.0, 0.0)
    # ... and A < 0 keeps it (moving with the push of nothing: p ≥ p_old)
    for div in ("tv", "kl"):
        assert one("dppo_token_loss", -0.7 + 1e-12, -0.7, -1.0, divergence=div, delta_low=0.0)[1] != 0.0
    # TV with exact binary fractions: p_old = 0.25, p = 0.75 (logs of exact values), δ_high = 0.5:
    # p − p_old = 0.5 ≤ 0.5, kept; δ_high = 0.49: dropped
    L, g = one("dppo_token_loss", LOG(0.75), LOG(0.25), 1.0, delta_high=0.5)
    assert g == pytest.approx(-3.0, rel=1e-13)
    assert one("dppo_token_loss", LOG(0.75), LOG(0.25), 1.0, delta_high=0.49) == (0.0, 0.0)


def test_dppo_binary_kl_edges():
    # p_old = 1 (old_logp = 0): D = 1·log(1/p) + 0 = −logp
    # logp = −0.1: D = 0.1 ≤ 0.2, kept for A = −1; w = e^−0.1; L = −(−1)·e^−0.1·(−0.1) = −0.1·e^−0.1
    L, g = one("dppo_token_loss", -0.1, 0.0, -1.0, divergence="kl")
    assert L == pytest.approx(-0.1 * math.exp(-0.1), rel=1e-13) and g == pytest.approx(math.exp(-0.1), rel=1e-13)
    # logp = −0.5: D = 0.5 > 0.2 and p < p_old: dropped for A = −1
    assert one("dppo_token_loss", -0.5, 0.0, -1.0, divergence="kl") == (0.0, 0.0)
    # p = 1 (logp = 0), p_old = 0.5: D = ½·log ½ + ½·log(½/0) = +inf; A > 0 (p > p_old): dropped
    assert one("dppo_token_loss", 0.0, LOG(0.5), 1.0, divergence="kl") == (0.0, 0.0)
    # A < 0 (p ≥ p_old): kept; L = −(−1)·2·0 = 0, gradient +2
    assert one("dppo_token_loss", 0.0, LOG(0.5), -1.0, divergence="kl") == (0.0, 2.0)
    # p = p_old = 1: D = 0 (0·log 0 := 0): kept for both signs; L = 0 (logp = 0), gradient −A
    assert one("dppo_token_loss", 0.0, 0.0, 1.0, divergence="kl", delta_high=0.0) == (0.0, -1.0)
    # a positive log-prob (p = e^0.5 > 1) has no binary KL: D := +inf. A > 0 with p > p_old: dropped;
    # A < 0 with p ≥ p_old: kept (w = e^1, L = −(−1)·e·0.5, gradient e)
    assert one("dppo_token_loss", 0.5, -0.5, 1.0, divergence="kl") == (0.0, 0.0)
    L, g = one("dppo_token_loss", 0.5, -0.5, -1.0, divergence="kl")
    assert L == pytest.approx(0.5 * math.e, rel=1e-14) and g == pytest.approx(math.e, rel=1e-14)


def test_dppo_log_ratio_clamp_changes_only_the_weight():
    # p_old = e^−4, p = e^−1: d = 3; p − p_old = e^−1 − e^−4 = 0.3496 > 0.2: A > 0 dropped, A < 0 kept
    assert one("dppo_token_loss", -1.0, -4.0, 1.0, log_ratio_clamp=1.0) == (0.0, 0.0)
    # A = −1, clamp 1: w = e^1 (not e^3); L = −(−1)·e·(−1) = −e; gradient +e
    L, g = one("dppo_token_loss", -1.0, -4.0, -1.0, log_ratio_clamp=1.0)
    assert L == pytest.approx(-math.e, rel=1e-15) and g == pytest.approx(math.e, rel=1e-15)
    # without the clamp: w = e^3
    L, g = one("dppo_token_loss", -1.0, -4.0, -1.0)
    assert L == pytest.approx(-math.exp(3.0), rel=1e-14) and g == pytest.approx(math.exp(3.0), rel=1e-14)


def test_dppo_overflow():
    # old = −800.5, logp = −0.5: d = 800, r = inf; p − p_old ≈ e^−0.5 = 0.61 > 0.2: A > 0 dropped
    assert one("dppo_token_loss", -0.5, -800.5, 1.0) == (0.0, 0.0)
    # A = −1: kept, w = inf: L = −(−1)·inf·(−0.5) = −inf, gradient +inf, never NaN
    assert one("dppo_token_loss", -0.5, -800.5, -1.0) == (-math.inf, math.inf)
    # ratio_cap = 3: w = 3, L = 3·(−0.5) = −1.5, gradient 3
    assert one("dppo_token_loss", -0.5, -800.5, -1.0, ratio_cap=3.0) == pytest.approx((-1.5, 3.0), rel=1e-15)
    # A = 0: 0 · inf := 0
    assert one("dppo_token_loss", -0.5, -800.5, 0.0) == (0.0, 0.0)
    # logp = 0 (p = 1), A = −1, r = e^800 = inf: L = −A·inf·0 := 0, gradient −A·inf = +inf
    assert one("dppo_token_loss", 0.0, -800.0, -1.0) == (0.0, math.inf)
    # both exponentials overflow (log-"probs" 800 and 799, not probabilities): p − p_old = e^800·(1 − e^−1)
    # = +inf, not inf − inf = NaN: A > 0 drops the token; A < 0 keeps it with w = e^1:
    # L = −(−1)·e·800 = 800e, gradient e
    assert one("dppo_token_loss", 800.0, 799.0, 1.0) == (0.0, 0.0)
    L, g = one("dppo_token_loss", 800.0, 799.0, -1.0)
    assert L == pytest.approx(800.0 * math.e, rel=1e-15) and g == pytest.approx(math.e, rel=1e-15)


# --------------------------------------------------------------------------------------------
# DRO
# --------------------------------------------------------------------------------------------


def test_dro_values_both_signs():
    # logp = −1, old = −1.4, d = 0.4, β = 0.5: ½·β·d² = 0.25·0.16 = 0.04
    # A = +1: L = −(−1 − 0.04) = 1.04; gradient −A + β·d = −1 + 0.2 = −0.8
    assert one("dro_token_loss", -1.0, -1.4, 1.0, beta=0.5) == pytest.approx((1.04, -0.8), rel=1e-13)
    # A = −1: L = −(1 − 0.04) = −0.96; gradient 1 + 0.2 = 1.2
    assert one("dro_token_loss", -1.0, -1.4, -1.0, beta=0.5) == pytest.approx((-0.96, 1.2), rel=1e-13)
    # A = 0, d = −2, β = 0.1: the penalty stays: L = ½·0.1·4 = 0.2, gradient 0.1·(−2) = −0.2
    assert one("dro_token_loss", -2.5, -0.5, 0.0, beta=0.1) == pytest.approx((0.2, -0.2), rel=1e-13)
    # on-policy: L = −A·logp = −2·(−0.5) = 1, gradient −A = −2 (loss.pg)
    assert one("dro_token_loss", -0.5, -0.5, 2.0, beta=1.0) == (1.0, -2.0)
    # d = 800 (no exponential): L = ½·1·640000 = 320000, gradient 800
    assert one("dro_token_loss", 0.0, -800.0, 0.0, beta=1.0) == (320000.0, 800.0)


def test_dro_penalty_does_not_overflow_on_d_squared():
    # d = 2e154: d² = 4e308 exceeds float64 (max ≈ 1.797e308), but ½·β·d² with β = 1e−10 is 2e298
    # A = 0: L = 2e298, gradient β·d = 2e144
    L, g = one("dro_token_loss", 0.0, -2e154, 0.0, beta=1e-10)
    assert L == pytest.approx(2e298, rel=1e-14) and g == pytest.approx(2e144, rel=1e-14)
    # β = 1: ½·d² = 2e308 is beyond float64: +inf, never NaN; the gradient d = 2e154 stays finite
    assert one("dro_token_loss", 0.0, -2e154, 0.0, beta=1.0) == (math.inf, 2e154)


def test_dro_upstream_scales_the_gradient():
    # upstream 3 on the valid token: 3·(−1 + 0.2) = −2.4
    logp, old, A, mask = tok(-1.0, -1.4, 1.0)
    g = oracle.dro_token_loss_grad(logp, old, A, mask, np.array([[7.0, 3.0]]), beta=0.5)
    assert g[0, 0] == 0.0 and g[0, 1] == pytest.approx(-2.4, rel=1e-13)


# --------------------------------------------------------------------------------------------
# shared: masked positions, empty rows, finite differences, errors, presets
# --------------------------------------------------------------------------------------------

LOSSES = {
    "sapo_token_loss": [{}, {"tau_pos": 0.5, "tau_neg": 3.0}, {"log_ratio_clamp": 20.0}],
    "gmpo_token_loss": [{}, {"eps_low": 0.2, "eps_high": 0.3}],
    "dppo_token_loss": [{}, {"divergence": "kl"}, {"divergence": "kl", "delta_low": 0.05, "ratio_cap": 3.0},
                        {"ratio_cap": 1.1, "log_ratio_clamp": 20.0}],
    "dro_token_loss": [{"beta": 0.1}, {"beta": 1.0}],
}
CASES = [(name, kw) for name, kws in LOSSES.items() for kw in kws]


def _batch(seed, per_token_A=True):
    rng = np.random.default_rng(seed)
    B, T = 4, 6
    mask = rng.random((B, T)) < 0.7
    mask[:, 0] = False
    mask[2, :] = False  # an empty row
    logp = -np.abs(rng.normal(0.0, 1.0, size=(B, T))) - 0.05
    old = logp + rng.normal(0.0, 0.4, size=(B, T))
    A = rng.normal(size=(B, T)) if per_token_A else rng.normal(size=B)
    u = rng.normal(size=(B, T))
    return logp, old, A, mask, u


@pytest.mark.parametrize("name, kw", CASES)
@pytest.mark.parametrize("garbage", GARBAGE)
def test_masked_positions_never_matter(name, kw, garbage):
    logp, old, A, mask, u = _batch(11)
    fn, grad = getattr(oracle, name), getattr(oracle, name + "_grad")
    clean = (fn(logp, old, A, mask, **kw), grad(logp, old, A, mask, u, **kw))
    dirty = [x.copy() for x in (logp, old, A, u)]
    for x in dirty:
        x[~mask] = garbage
    got = (fn(*dirty[:3], mask, **kw), grad(*dirty[:3], mask, dirty[3], **kw))
    for c, d in zip(clean, got):
        np.testing.assert_array_equal(d, c)
        assert np.all(d[~mask] == 0.0)
        assert np.all(np.isfinite(d))


@pytest.mark.parametrize("name, kw", CASES)
def test_empty_rows_and_degenerate_batches(name, kw):
    fn, grad = getattr(oracle, name), getattr(oracle, name + "_grad")
    logp, old, A, mask, u = _batch(5, per_token_A=False)
    assert np.all(fn(logp, old, A, mask, **kw)[2] == 0.0)
    assert np.all(grad(logp, old, A, mask, u, **kw)[2] == 0.0)
    # all rows masked, T = 1 (no valid token), B = 0: zeros / empty
    none = np.zeros((3, 4), dtype=bool)
    assert np.all(fn(logp[:3, :4], old[:3, :4], A[:3], none, **kw) == 0.0)
    t1 = np.zeros((2, 1), dtype=bool)
    assert np.all(grad(np.zeros((2, 1)), np.zeros((2, 1)), np.ones(2), t1, np.ones((2, 1)), **kw) == 0.0)
    e = np.zeros((0, 3))
    assert fn(e, e, np.zeros(0), np.zeros((0, 3), dtype=bool), **kw).shape == (0, 3)
    assert grad(e, e, np.zeros(0), np.zeros((0, 3), dtype=bool), e, **kw).shape == (0, 3)


def _central_difference(name, logp, old, A, mask, u, kw, shift_old=False, h=1e-6):
    """d/dlogp of Σ u·L by central differences (``shift_old``: move old_logp along with logp)."""
    fn = getattr(oracle, name)
    fd = np.zeros_like(logp)
    for b, t in zip(*np.nonzero(mask)):
        e = np.zeros_like(logp)
        e[b, t] = h
        o_plus, o_minus = (old + e, old - e) if shift_old else (old, old)
        plus = np.sum(u * fn(logp + e, o_plus, A, mask, **kw))
        minus = np.sum(u * fn(logp - e, o_minus, A, mask, **kw))
        fd[b, t] = (plus - minus) / (2 * h)
    return fd


def _far_from_kinks(name, logp, old, A, mask, kw):
    """No valid token within 1e-4 of a clip / clamp / keep / cap boundary (else FD would straddle it)."""
    d = (logp - old)[mask]
    A_full = A if A.ndim == 2 else np.repeat(A[:, None], mask.shape[1], axis=1)
    if name == "gmpo_token_loss":
        bounds = [-kw.get("eps_low", 0.4), kw.get("eps_high", 0.4)]
        return all(abs(d - c).min() > 1e-4 for c in bounds) and np.all(A_full[mask] != 0)
    if name == "sapo_token_loss" and kw.get("log_ratio_clamp") is not None:
        c = kw["log_ratio_clamp"]
        return np.all(np.abs(np.abs(d) - c) > 1e-4)
    if name == "dppo_token_loss":
        p, q = np.exp(logp[mask]), np.exp(old[mask])
        lo, hi = kw.get("delta_low", 0.2), kw.get("delta_high", 0.2)
        if kw.get("divergence", "tv") == "tv":
            stat = p - q
            ok = np.all(np.abs(stat - hi) > 1e-4) and np.all(np.abs(stat + lo) > 1e-4)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):  # a positive old log-prob: D := +inf
                D = q * (np.log(q) - np.log(p)) + (1 - q) * (np.log1p(-q) - np.log1p(-p))
            D = np.where(old[mask] > 0, np.inf, D)
            ok = np.all(np.abs(D - hi) > 1e-4) and np.all(np.abs(D - lo) > 1e-4) and np.all(np.abs(d) > 1e-4)
        cap = kw.get("ratio_cap")
        return ok and (cap is None or np.all(np.abs(np.exp(d) - cap) > 1e-4))
    return True


@pytest.mark.parametrize("name, kw", CASES)
@pytest.mark.parametrize("per_token_A", [False, True])
def test_gradient_matches_central_differences(name, kw, per_token_A):
    checked = 0
    for seed in range(40):
        logp, old, A, mask, u = _batch(100 + seed, per_token_A)
        if not _far_from_kinks(name, logp, old, A, mask, kw):
            continue
        grad = getattr(oracle, name + "_grad")(logp, old, A, mask, u, **kw)
        # DPPO's ratio is a stop-gradient: move old_logp with logp, so that d (hence w) stays fixed
        fd = _central_difference(name, logp, old, A, mask, u, kw, shift_old=(name == "dppo_token_loss"))
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)
        checked += 1
        if checked == 3:
            break
    assert checked >= 1, "no well-conditioned batch found"


def test_dppo_finite_differences_see_the_stop_gradient():
    # moving logp alone changes w = r, which the gradient ignores: FD = −A·r·(1 + logp), not −A·r
    # one kept token: p_old = 0.5, p = 0.6, A = +1: FD ≈ −1.2·(1 + log 0.6) = −0.5870, gradient −1.2
    logp, old, A, mask = tok(LOG(0.6), LOG(0.5), 1.0)
    fd = _central_difference("dppo_token_loss", logp, old, A, mask, UP1, {})[0, 1]
    assert fd == pytest.approx(-1.2 * (1.0 + LOG(0.6)), rel=1e-6)
    assert oracle.dppo_token_loss_grad(logp, old, A, mask, UP1)[0, 1] == pytest.approx(-1.2, rel=1e-13)


ERRORS = [
    ("sapo_token_loss", {"tau_pos": 0.0}, "tau_pos"),
    ("sapo_token_loss", {"tau_neg": -1.05}, "tau_neg"),
    ("sapo_token_loss", {"tau_pos": math.inf}, "tau_pos"),
    ("sapo_token_loss", {"log_ratio_clamp": 0.0}, "log_ratio_clamp"),
    ("gmpo_token_loss", {"eps_low": -0.1}, "eps_low"),
    ("gmpo_token_loss", {"eps_high": -1e-9}, "eps_high"),
    ("dppo_token_loss", {"divergence": "js"}, "divergence"),
    ("dppo_token_loss", {"delta_low": -0.2}, "delta_low"),
    ("dppo_token_loss", {"delta_high": -0.2}, "delta_high"),
    ("dppo_token_loss", {"ratio_cap": 0.0}, "ratio_cap"),
    ("dppo_token_loss", {"ratio_cap": -3.0}, "ratio_cap"),
    ("dppo_token_loss", {"log_ratio_clamp": -20.0}, "log_ratio_clamp"),
    ("dro_token_loss", {"beta": 0.0}, "beta"),
    ("dro_token_loss", {"beta": -0.1}, "beta"),
    ("dro_token_loss", {"beta": None}, "beta"),
    ("dro_token_loss", {"beta": math.nan}, "beta"),
]


@pytest.mark.parametrize("name, kw, arg", ERRORS)
@pytest.mark.parametrize("with_grad", [False, True])
def test_bad_keywords_are_value_errors(name, kw, arg, with_grad):
    logp, old, A, mask = tok(-0.5, -0.6, 1.0)
    kw = ({"beta": 0.1} if name == "dro_token_loss" else {}) | kw
    fn = name + ("_grad" if with_grad else "")
    extra = (UP1,) if with_grad else ()
    with pytest.raises(ValueError, match=rf"^{fn}: {arg}: "):
        getattr(oracle, fn)(logp, old, A, mask, *extra, **kw)


@pytest.mark.parametrize("name", list(LOSSES))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("arg", ["logp", "old_logp", "advantages", "upstream"])
def test_non_finite_at_valid_positions(name, bad, arg):
    kw = {"beta": 0.1} if name == "dro_token_loss" else {}
    logp, old, _, mask = tok(-0.5, -0.6, 1.0)
    args = {"logp": logp, "old_logp": old, "advantages": np.array([[0.0, 1.0]]), "mask": mask}
    up = UP1.copy()
    if arg == "upstream":
        up[0, 1] = bad
        fn = name + "_grad"
        with pytest.raises(ValueError, match=rf"^{fn}: upstream: expected finite values"):
            getattr(oracle, fn)(*args.values(), up, **kw)
        return
    args[arg] = args[arg].copy()
    args[arg][0, 1] = bad
    for fn, extra in ((name, ()), (name + "_grad", (up,))):
        with pytest.raises(ValueError, match=rf"^{fn}: {arg}: expected finite values"):
            getattr(oracle, fn)(*args.values(), *extra, **kw)


def test_dro_beta_is_required_and_typed():
    logp, old, A, mask = tok(-0.5, -0.6, 1.0)
    with pytest.raises(TypeError):
        oracle.dro_token_loss(logp, old, A, mask)  # no default: a required keyword
    with pytest.raises(TypeError, match=r"^dro_token_loss: beta: expected a real number"):
        oracle.dro_token_loss(logp, old, A, mask, beta="0.1")
    with pytest.raises(ValueError, match=r"^dro_token_loss_grad: beta: expected a number > 0 \(DRO has no default"):
        oracle.dro_token_loss_grad(logp, old, A, mask, UP1, beta=None)


def test_mask_first_column_and_shape_errors_name_the_function():
    logp, old, A, _ = tok(-0.5, -0.6, 1.0)
    with pytest.raises(ValueError, match=r"^gmpo_token_loss: mask: expected mask\[:, 0\] False"):
        oracle.gmpo_token_loss(logp, old, A, np.array([[1, 1]], dtype=bool))
    with pytest.raises(ValueError, match=r"^dppo_token_loss_grad: old_logp: expected shape"):
        oracle.dppo_token_loss_grad(logp, old[:, :1], A, MASK1, UP1)


def test_presets_and_not_expressible():
    # verl: SAPO clamps d to ±20; GMPO uses clip_ratio 0.2/0.2; DPPO truncates at clip_ratio_c = 3 with ±20
    assert PRESETS["verl"]["sapo_token_loss"] == {"log_ratio_clamp": 20.0}
    assert PRESETS["verl"]["gmpo_token_loss"] == {"eps_low": 0.2, "eps_high": 0.2}
    assert PRESETS["verl"]["dppo_token_loss"] == {"ratio_cap": 3.0, "log_ratio_clamp": 20.0}
    assert "dro_token_loss" not in PRESETS["verl"]  # beta has no default there either
    # TRL (1.0/1.05 and GMPO 0.4) and AReaL (1.0/1.05) are canonical
    for fw, fn in (("trl", "sapo_token_loss"), ("trl", "gmpo_token_loss"), ("areal", "sapo_token_loss")):
        assert fn not in PRESETS[fw]
        assert preset_kwargs(fw, fn) == {}
    assert preset_kwargs("verl", "dppo_token_loss") == {"ratio_cap": 3.0, "log_ratio_clamp": 20.0}
    for fw in ("trl", "verl", "areal"):
        assert "sapo_token_loss" in NOT_EXPRESSIBLE[fw]
    assert "dppo_token_loss" in NOT_EXPRESSIBLE["verl"] and "gmpo_token_loss" in NOT_EXPRESSIBLE["verl"]
    # every preset's keywords are accepted by the oracle function and its gradient
    logp, old, A, mask, u = _batch(2)
    for fw, table in PRESETS.items():
        for fn in LOSSES:
            if fn in table:
                getattr(oracle, fn)(logp, old, A, mask, **table[fn])
                getattr(oracle, fn + "_grad")(logp, old, A, mask, u, **table[fn])


def test_exports_and_signatures():
    import inspect

    expected = {
        "sapo_token_loss": {"tau_pos": 1.0, "tau_neg": 1.05, "log_ratio_clamp": None},
        "gmpo_token_loss": {"eps_low": 0.4, "eps_high": 0.4},
        "dppo_token_loss": {"divergence": "tv", "delta_low": 0.2, "delta_high": 0.2, "ratio_cap": None,
                            "log_ratio_clamp": None},
        "dro_token_loss": {"beta": inspect.Parameter.empty},
    }
    for name, kws in expected.items():
        for fn, positional in ((name, ["logp", "old_logp", "advantages", "mask"]),
                               (name + "_grad", ["logp", "old_logp", "advantages", "mask", "upstream"])):
            assert fn in oracle.__all__
            params = inspect.signature(getattr(oracle, fn)).parameters.values()
            assert [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD] == positional
            assert {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY} == kws
            doc = inspect.getdoc(getattr(oracle, fn))
            assert "Spec: loss." in doc and "(v1), added by spec v1.1" in doc
