"""oracle.kl_loss_term (+ grad), spec v1.1 kl.loss: the KL term's value and gradient as it enters a loss.

Every expected number is worked out by hand in the comments (e^x with ``math``, never with the code
under test). What the tests show: the four gradient forms agree in value where the spec says so
(straight-through, unbiased = kl_penalty; bias-corrected = kl_penalty on-policy) and differ in the
gradient; the estimator and bias-corrected gradients are the derivatives of the values (finite
differences), the straight-through and unbiased ones those of ½d² and w·½d²; the k3 cancellation, the
abs tie, the clamps, the cap, overflow, old_logp's rules, the presets.
"""

import inspect
import math

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from tests.preset_tables import NOT_EXPRESSIBLE, PRESETS

pytestmark = pytest.mark.filterwarnings("error")  # no overflow / invalid-value warning anywhere

E = math.e
GRADIENTS = ("estimator", "straight_through", "unbiased", "bias_corrected")
MASK1 = np.array([[0, 1]], dtype=bool)
UP1 = np.array([[0.0, 1.0]])


def tok(d, log_r):
    """One valid token (position 1): logp = −1, ref_logp = logp − d, old_logp = logp − log r."""
    logp = np.array([[0.0, -1.0]])
    return logp, logp - np.array([[0.0, d]]), MASK1, logp - np.array([[0.0, log_r]])


def one(d, log_r, **kw):
    """(L, dL/dlogp) of the single valid token, upstream 1."""
    logp, ref, m, old = tok(d, log_r)
    L = oracle.kl_loss_term(logp, ref, m, old, **kw)
    g = oracle.kl_loss_term_grad(logp, ref, m, old, UP1, **kw)
    assert L[0, 0] == 0.0 and g[0, 0] == 0.0  # the masked first position
    return float(L[0, 1]), float(g[0, 1])


def batch(seed, scale=1.5):
    rng = np.random.default_rng(seed)
    B, T = 3, 6
    m = np.ones((B, T), dtype=bool)
    m[:, 0] = False
    m[1, 4:] = False
    logp = -np.abs(rng.normal(0.0, 1.0, (B, T))) - 0.01
    return logp, logp - rng.normal(0.0, scale, (B, T)), m, logp - rng.normal(0.0, scale, (B, T)), rng.normal(0, 1, (B, T))


# --------------------------------------------------------------------------------------------
# The worked values of kl.loss.md (d = −1, r = 2)
# --------------------------------------------------------------------------------------------


def test_worked_values_k3():
    log2 = math.log(2.0)
    # K = e^1 − 1 − 1 = e − 2; ∂K/∂logp = 1 − e^1 = 1 − e
    assert one(-1.0, log2, gradient="estimator") == pytest.approx((E - 2, 1 - E), rel=1e-14)
    # straight-through: value K, gradient d = −1
    assert one(-1.0, log2, gradient="straight_through") == pytest.approx((E - 2, -1.0), rel=1e-14)
    # unbiased: value K, gradient w·d with w = min(2, 10) = 2
    assert one(-1.0, log2, gradient="unbiased") == pytest.approx((E - 2, -2.0), rel=1e-14)
    # bias-corrected: value K·r = 2(e − 2); gradient r·(∂K + K) = 2·((1 − e) + (e − 2)) = 2·(−1) = −2
    assert one(-1.0, log2, gradient="bias_corrected") == pytest.approx((2 * (E - 2), -2.0), rel=1e-14)


def test_worked_values_other_estimators():
    log2 = math.log(2.0)
    # k1 = d = −1: estimator gradient 1; ST −1; unbiased 2·(−1); bias-corrected value −2, gradient 2·(1 + (−1)) = 0
    assert one(-1.0, log2, estimator="k1") == pytest.approx((-1.0, 1.0))
    assert one(-1.0, log2, estimator="k1", gradient="straight_through") == pytest.approx((-1.0, -1.0))
    assert one(-1.0, log2, estimator="k1", gradient="unbiased") == pytest.approx((-1.0, -2.0))
    assert one(-1.0, log2, estimator="k1", gradient="bias_corrected") == pytest.approx((-2.0, 0.0), abs=1e-15)
    # k2 = ½: bias-corrected value 1, gradient 2·(d + d²/2) = 2·(−1 + ½) = −1
    assert one(-1.0, log2, estimator="k2", gradient="bias_corrected") == pytest.approx((1.0, -1.0))
    # abs = 1, ∂|d|/∂d = −1; bias-corrected value 2, gradient 2·(−1 + 1) = 0
    assert one(-1.0, log2, estimator="abs") == pytest.approx((1.0, -1.0))
    assert one(-1.0, log2, estimator="abs", gradient="bias_corrected") == pytest.approx((2.0, 0.0), abs=1e-15)


def test_worked_values_above_the_cap():
    # r = 20 > weight_cap = 10: unbiased w = 10, gradient −10; bias-corrected is not capped: 20(e − 2), −20
    assert one(-1.0, math.log(20.0), gradient="unbiased") == pytest.approx((E - 2, -10.0), rel=1e-14)
    assert one(-1.0, math.log(20.0), gradient="bias_corrected") == pytest.approx((20 * (E - 2), -20.0), rel=1e-13)
    # weight_cap=None: w = r = 20; weight_cap=2: w = 2
    assert one(-1.0, math.log(20.0), gradient="unbiased", weight_cap=None)[1] == pytest.approx(-20.0, rel=1e-14)
    assert one(-1.0, math.log(20.0), gradient="unbiased", weight_cap=2.0)[1] == pytest.approx(-2.0, rel=1e-14)
    # the cap is read by "unbiased" only
    assert one(-1.0, math.log(20.0), gradient="bias_corrected", weight_cap=2.0) == one(-1.0, math.log(20.0),
                                                                                        gradient="bias_corrected")


# --------------------------------------------------------------------------------------------
# Values agree, gradients differ
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("kw", [{}, {"log_ratio_clamp": 1.0}, {"clamp": 0.5}, {"log_ratio_clamp": 2.0, "clamp": 1.0}])
def test_values_agree_with_kl_penalty_gradients_differ(estimator, kw):
    logp, ref, m, old, u = batch(1)
    K = oracle.kl_penalty(logp, ref, m, estimator=estimator, **kw)
    dK = oracle.kl_penalty_grad(logp, ref, m, u, estimator=estimator, **kw)
    values = {g: oracle.kl_loss_term(logp, ref, m, old, estimator=estimator, gradient=g, **kw) for g in GRADIENTS}
    grads = {g: oracle.kl_loss_term_grad(logp, ref, m, old, u, estimator=estimator, gradient=g, **kw) for g in GRADIENTS}
    for g in ("estimator", "straight_through", "unbiased"):  # the value is kl.estimator's, exactly
        np.testing.assert_array_equal(values[g], K)
    np.testing.assert_array_equal(grads["estimator"], dK)  # gradient="estimator" is kl_penalty_grad
    assert not np.allclose(values["bias_corrected"], K)  # K·r off-policy
    # the pairs that coincide without a clamp: ∂(d²/2)/∂logp = d (k2's own gradient is straight-through's),
    # and k3's r·(∂K + K) = r·d = w·d while every r <= weight_cap (test below)
    same = {"k2": {"estimator", "straight_through"}, "k3": {"unbiased", "bias_corrected"}}.get(estimator) if not kw else None
    for a in GRADIENTS:  # every other pair of forms has a different gradient on this batch
        for b in GRADIENTS:
            if a < b and {a, b} != same:
                assert not np.allclose(grads[a], grads[b]), (a, b)
    if same:
        a, b = sorted(same)
        np.testing.assert_allclose(grads[a], grads[b], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_bias_corrected_on_policy_has_the_value_not_the_gradient(estimator):
    """old_logp = logp: r = 1, so K·r = K; but r is differentiable: the gradient is ∂K + K, not ∂K."""
    logp, ref, m, _, u = batch(2)
    L = oracle.kl_loss_term(logp, ref, m, logp, estimator=estimator, gradient="bias_corrected")
    g = oracle.kl_loss_term_grad(logp, ref, m, logp, u, estimator=estimator, gradient="bias_corrected")
    K = oracle.kl_loss_term(logp, ref, m, estimator=estimator)
    dK = oracle.kl_loss_term_grad(logp, ref, m, None, u, estimator=estimator)
    np.testing.assert_array_equal(L, K)
    np.testing.assert_allclose(g, dK + u * K, rtol=1e-12, atol=1e-12)
    assert not np.allclose(g, dK)


def test_on_policy_to_the_reference():
    """ref = old = logp: K = 0 for every form; the gradient is 0, except k1 under "estimator" and
    "bias_corrected" (∂k1/∂d = 1: gradient u)."""
    logp, _, m, _, u = batch(3)
    for est in ("k1", "k2", "k3", "abs"):
        for g in GRADIENTS:
            L = oracle.kl_loss_term(logp, logp, m, logp, estimator=est, gradient=g)
            dL = oracle.kl_loss_term_grad(logp, logp, m, logp, u, estimator=est, gradient=g)
            assert np.all(L == 0)
            expected = np.where(m, u, 0.0) if est == "k1" and g in ("estimator", "bias_corrected") else 0.0
            np.testing.assert_array_equal(dL, np.broadcast_to(expected, m.shape))


def test_unbiased_and_bias_corrected_k3_gradients_coincide_below_the_cap():
    """k3: r·(∂K + K) = r·d, which is the unbiased form's w·d while r <= weight_cap (the values differ)."""
    logp, ref, m, old, u = batch(4, scale=0.5)  # every r = e^(logp − old) below 10 here
    assert np.exp(np.where(m, logp - old, 0.0)).max() < 10.0
    kw = {"estimator": "k3"}
    np.testing.assert_allclose(oracle.kl_loss_term_grad(logp, ref, m, old, u, gradient="unbiased", **kw),
                               oracle.kl_loss_term_grad(logp, ref, m, old, u, gradient="bias_corrected", **kw),
                               rtol=1e-12, atol=1e-15)
    assert not np.allclose(oracle.kl_loss_term(logp, ref, m, old, gradient="unbiased", **kw),
                           oracle.kl_loss_term(logp, ref, m, old, gradient="bias_corrected", **kw))


# --------------------------------------------------------------------------------------------
# Gradients against finite differences
# --------------------------------------------------------------------------------------------


def _fd(f, logp, h=1e-6):
    """Central differences of sum(f(logp)) per element (each token's term depends on its own logp only)."""
    return (f(logp + h) - f(logp - h)) / (2 * h)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
@pytest.mark.parametrize("gradient", GRADIENTS)
def test_gradients_by_finite_differences(estimator, gradient):
    logp, ref, m, old, _ = batch(5)
    ones = np.ones_like(logp)
    kw = {"estimator": estimator, "gradient": gradient, "log_ratio_clamp": 2.0}  # some d beyond ±2
    g = oracle.kl_loss_term_grad(logp, ref, m, old, ones, **kw)
    d = np.where(m, logp - ref, 0.0)
    assert np.any(np.abs(d) > 2.0)
    if gradient in ("estimator", "bias_corrected"):  # the derivative of the value itself (old_logp fixed)
        expected = _fd(lambda lp: oracle.kl_loss_term(lp, ref, m, old, **kw), logp)
    elif gradient == "straight_through":  # of ½d², unclipped
        expected = _fd(lambda lp: np.where(m, 0.5 * (lp - ref) ** 2, 0.0), logp)
    else:  # of w·½d² with w = min(r, 10) held at its value
        w = np.minimum(np.exp(np.where(m, logp - old, 0.0)), 10.0)
        expected = _fd(lambda lp: np.where(m, w * 0.5 * (lp - ref) ** 2, 0.0), logp)
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------------------------
# Edges: the abs tie, clamps, the k3 cancellation, overflow
# --------------------------------------------------------------------------------------------


def test_abs_tie_at_zero_has_zero_gradient():
    # |d| = max(d, −d) ties at d = 0: sgn(0) = 0 (as torch.abs); on either side ±1
    assert one(0.0, 0.3, estimator="abs") == (0.0, 0.0)
    assert one(1e-9, 0.3, estimator="abs")[1] == 1.0
    assert one(-1e-9, 0.3, estimator="abs")[1] == -1.0
    # bias-corrected at the tie: r·(sgn 0 + |0|) = 0
    assert one(0.0, 0.3, estimator="abs", gradient="bias_corrected") == (0.0, 0.0)


def test_straight_through_and_unbiased_gradients_ignore_the_clamps():
    # d = −3, log_ratio_clamp 1, clamp 0.5: K = clip(e^1 − 2, ±0.5) = 0.5 (value), gradient the raw d = −3
    kw = {"estimator": "k3", "log_ratio_clamp": 1.0, "clamp": 0.5}
    assert one(-3.0, 0.0, gradient="straight_through", **kw) == (0.5, -3.0)
    # unbiased with r = e^0.5: gradient e^0.5·(−3)
    L, g = one(-3.0, 0.5, gradient="unbiased", **kw)
    assert L == 0.5 and g == pytest.approx(-3.0 * math.exp(0.5), rel=1e-14)
    # estimator: the clamped K passes no gradient
    assert one(-3.0, 0.0, gradient="estimator", **kw) == (0.5, 0.0)
    # bias-corrected: a clamped K is a constant, so the gradient is r·K = e^0.5·0.5
    L, g = one(-3.0, 0.5, gradient="bias_corrected", **kw)
    assert L == pytest.approx(0.5 * math.exp(0.5), rel=1e-14) and g == pytest.approx(0.5 * math.exp(0.5), rel=1e-14)


def test_bias_corrected_k3_cancellation_is_exact():
    # d = −50: K = e^50 − 51, ∂K = 1 − e^50: summed in floating point they would leave ±e^50·2^-53 ≈ 6e5
    # of error; the spec's r·d is −50·e^0.5 exactly
    L, g = one(-50.0, 0.5, gradient="bias_corrected")
    assert L == pytest.approx((math.expm1(50.0) - 50.0) * math.exp(0.5), rel=1e-14)
    assert g == pytest.approx(-50.0 * math.exp(0.5), rel=1e-14)


def test_overflow_is_inf_never_nan():
    # d = −800: K = e^800 overflows float64 (value inf); the bias-corrected gradient r·d = −800 is finite
    assert one(-800.0, 0.0, gradient="bias_corrected") == (math.inf, -800.0)
    assert one(-800.0, 0.0, gradient="estimator") == (math.inf, -math.inf)  # 1 − e^800
    assert one(-800.0, 0.0, gradient="straight_through") == (math.inf, -800.0)
    # r = e^800 where d = 0: K·r = 0·inf := 0, gradients 0
    assert one(0.0, 800.0, gradient="bias_corrected") == (0.0, 0.0)
    assert one(0.0, 800.0, gradient="unbiased", weight_cap=None) == (0.0, 0.0)
    # r = e^800 with the cap: w = 10
    assert one(0.5, 800.0, gradient="unbiased")[1] == 5.0
    # a zero upstream gives 0 whatever the slope
    logp, ref, m, old = tok(-800.0, 0.0)
    assert np.all(oracle.kl_loss_term_grad(logp, ref, m, old, np.zeros((1, 2)), estimator="k3") == 0)


def test_masked_positions_are_never_read():
    logp, ref, m, old, u = batch(6)
    bad = [np.nan, np.inf, -np.inf, 1e30]
    dirty = [np.where(m, x, bad[i % 4]) for i, x in enumerate((logp, ref, old, u))]
    for g in GRADIENTS:
        for est in ("k1", "k3", "abs"):
            kw = {"estimator": est, "gradient": g}
            np.testing.assert_array_equal(oracle.kl_loss_term(logp, ref, m, old, **kw),
                                          oracle.kl_loss_term(*dirty[:2], m, dirty[2], **kw))
            np.testing.assert_array_equal(oracle.kl_loss_term_grad(logp, ref, m, old, u, **kw),
                                          oracle.kl_loss_term_grad(*dirty[:2], m, dirty[2], dirty[3], **kw))


# --------------------------------------------------------------------------------------------
# old_logp: required by the ratio forms, validated when given, read by no other
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gradient", ["unbiased", "bias_corrected"])
def test_old_logp_required_by_the_ratio_forms(gradient):
    logp, ref, m, _, u = batch(7)
    with pytest.raises(ValueError, match=r"^kl_loss_term: old_logp: required for gradient="):
        oracle.kl_loss_term(logp, ref, m, gradient=gradient)
    with pytest.raises(ValueError, match=r"^kl_loss_term_grad: old_logp: required for gradient="):
        oracle.kl_loss_term_grad(logp, ref, m, None, u, gradient=gradient)


@pytest.mark.parametrize("gradient", ["estimator", "straight_through"])
def test_old_logp_ignored_by_the_other_forms_but_validated(gradient):
    logp, ref, m, old, u = batch(8)
    kw = {"estimator": "k3", "gradient": gradient}
    base = oracle.kl_loss_term(logp, ref, m, **kw), oracle.kl_loss_term_grad(logp, ref, m, None, u, **kw)
    other = oracle.kl_loss_term(logp, ref, m, old, **kw), oracle.kl_loss_term_grad(logp, ref, m, old + 3.0, u, **kw)
    for a, b in zip(base, other):
        np.testing.assert_array_equal(a, b)
    nan_old = np.where(m, np.nan, old)
    with pytest.raises(ValueError, match=r"^kl_loss_term: old_logp: "):
        oracle.kl_loss_term(logp, ref, m, nan_old, **kw)
    with pytest.raises(ValueError, match=r"^kl_loss_term: old_logp: "):
        oracle.kl_loss_term(logp, ref, m, old[:, :-1], **kw)


def test_bad_keywords_name_the_argument():
    logp, ref, m, old, _ = batch(9)
    for kw, arg in (({"estimator": "k4"}, "estimator"), ({"gradient": "sg"}, "gradient"),
                    ({"weight_cap": 0.0}, "weight_cap"), ({"clamp": -1.0}, "clamp"),
                    ({"log_ratio_clamp": 0.0}, "log_ratio_clamp")):
        with pytest.raises(ValueError, match=rf"^kl_loss_term: {arg}: "):
            oracle.kl_loss_term(logp, ref, m, old, **kw)


# --------------------------------------------------------------------------------------------
# Presets: each framework's knob, as its code computes it
# --------------------------------------------------------------------------------------------


def test_presets_and_not_expressible():
    assert PRESETS["trl"]["kl_loss_term"] == {"gradient": "bias_corrected"}
    assert PRESETS["verl"]["kl_loss_term"] == {"clamp": 10.0}
    assert PRESETS["openrlhf"]["kl_loss_term"] == {"clamp": 10.0}
    assert preset_kwargs("verl", "kl_loss_term") == {"clamp": 10.0}
    # the v1 lines kl.loss now expresses are gone; TRL's sequence-level ratio is what remains
    for fw in ("trl", "verl", "openrlhf"):
        assert "kl_penalty" not in NOT_EXPRESSIBLE[fw]
    assert "sequence" in NOT_EXPRESSIBLE["trl"]["kl_loss_term"][0]


@pytest.mark.parametrize("gradient", GRADIENTS)
def test_verl_log_ratio_clamp_is_subsumed_by_its_output_clamp(gradient):
    """verl clamps k3's log-ratio to ±20 and k3 to ±10; |d| >= 20 gives k3 >= 19, so the first clamp
    changes nothing once the second holds, in every form (why the verl preset is clamp=10.0 alone)."""
    logp = np.array([[0.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]])
    ref = logp - np.array([[0.0, -25.0, -20.0, -19.5, 3.0, 20.0, 25.0]])
    m, old, u = np.ones_like(logp, dtype=bool), logp - 0.3, np.ones_like(logp)
    m[0, 0] = False
    kw = {"estimator": "k3", "gradient": gradient, "clamp": 10.0}
    np.testing.assert_array_equal(oracle.kl_loss_term(logp, ref, m, old, **kw),
                                  oracle.kl_loss_term(logp, ref, m, old, log_ratio_clamp=20.0, **kw))
    np.testing.assert_array_equal(oracle.kl_loss_term_grad(logp, ref, m, old, u, **kw),
                                  oracle.kl_loss_term_grad(logp, ref, m, old, u, log_ratio_clamp=20.0, **kw))


def test_verl_plus_suffix_is_straight_through_with_its_clamps():
    """verl "low_var_kl+" (core_algos.py:2200-2245): value clamp(e^clamp(ref − logp, ±20) − clamp(…) − 1,
    ±10), gradient the unclamped logp − ref. d = −3: k3 = e^3 − 4 = 16.09 → 10; d = 25: k3 at 20 =
    e^−20 + 19 = 19 → 10; both gradients the raw d."""
    kw = {**preset_kwargs("verl", "kl_loss_term"), "gradient": "straight_through"}
    assert one(-3.0, 0.0, **kw) == (10.0, -3.0)
    assert one(25.0, 0.0, **kw) == (10.0, 25.0)
    assert one(-0.5, 0.0, **kw) == pytest.approx((math.exp(0.5) - 1.5, -0.5), rel=1e-14)


def test_openrlhf_unbiased_gradient():
    """compute_approx_kl(kl_estimator="k1", unbiased_gradient=True) (models/utils.py:96-128): value
    clamp(d, ±10), gradient min(e^(logp − old), 10)·d with the raw d. d = 12, r = 3: value 10, gradient 36."""
    kw = {**preset_kwargs("openrlhf", "kl_loss_term"), "estimator": "k1", "gradient": "unbiased"}
    assert one(12.0, math.log(3.0), **kw) == pytest.approx((10.0, 36.0), rel=1e-14)
    # its k3 (e^-12 + 11 = 11.000006 -> 10): the same clamp, the same gradient
    assert one(12.0, math.log(3.0), **{**kw, "estimator": "k3"}) == pytest.approx((10.0, 36.0), rel=1e-14)


def test_trl_bias_corrected_k3():
    """grpo_trainer.py:3100-3105: (e^(ref − logp) − (ref − logp) − 1)·e^(logp − old), autograd through both.
    d = 0.5, r = e^0.2: value (e^−0.5 − 0.5)·e^0.2; gradient r·d = 0.5·e^0.2."""
    L, g = one(0.5, 0.2, **preset_kwargs("trl", "kl_loss_term"))
    assert L == pytest.approx((math.exp(-0.5) - 0.5) * math.exp(0.2), rel=1e-14)
    assert g == pytest.approx(0.5 * math.exp(0.2), rel=1e-14)


# --------------------------------------------------------------------------------------------
# Exports and signatures
# --------------------------------------------------------------------------------------------


def test_exports_and_signatures():
    keywords = {"estimator": "k3", "gradient": "estimator", "log_ratio_clamp": None, "clamp": None, "weight_cap": 10.0}
    for name, positional in (("kl_loss_term", ["logp", "ref_logp", "mask", "old_logp"]),
                             ("kl_loss_term_grad", ["logp", "ref_logp", "mask", "old_logp", "upstream"])):
        assert name in oracle.__all__
        params = inspect.signature(getattr(oracle, name)).parameters.values()
        assert [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD] == positional
        assert {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY} == keywords
        assert "Spec: kl.loss (v1)" in inspect.getdoc(getattr(oracle, name))
    assert inspect.signature(oracle.kl_loss_term).parameters["old_logp"].default is None
    assert inspect.signature(oracle.kl_loss_term_grad).parameters["old_logp"].default is inspect.Parameter.empty
