"""oracle.pg/ppo/gspo/cispo token losses and their gradients w.r.t. logp.

Hand values follow the bug catalogue (classes 13, 27, 28, 29); gradients are checked against central
finite differences where the loss is smooth and has no stop-gradient (PG, PPO, GSPO "sequence"), and
against the hand formula where a stop-gradient makes finite differences meaningless (CISPO, GSPO
"token_sg").
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle
from conformance.records.presets import preset_kwargs

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]


def _one_token(ratio, A):
    """One valid token (position 1) with logp − old_logp = log(ratio) and advantage A ([B] form)."""
    old = np.array([[0.0, -2.0]])
    logp = np.array([[0.0, -2.0 + math.log(ratio)]])
    return logp, old, np.array([float(A)]), np.array([[0, 1]], dtype=bool)


UP = np.array([[0.0, 1.0]])


# --------------------------------------------------------------------------------------------
# PG
# --------------------------------------------------------------------------------------------


def test_pg_value_and_grad():
    logp = np.array([[0.0, -0.5, -2.0]])
    A = np.array([[0.0, 0.37, -1.9]])
    mask = np.array([[0, 1, 1]], dtype=bool)
    assert oracle.pg_token_loss(logp, A, mask)[0] == pytest.approx([0.0, 0.185, -3.8], abs=1e-15)
    # ∂(−A·logp)/∂logp = −A
    assert oracle.pg_token_loss_grad(logp, A, mask, np.array([[5.0, 1.0, 2.0]]))[0] == pytest.approx(
        [0.0, -0.37, 3.8], abs=1e-15)


def test_sequence_advantage_broadcasts_over_valid_tokens():
    # B = T = 3 (silent broadcasting would not crash): [B] advantages give constant rows
    A = np.array([0.37, -1.9, 2.5])
    mask = np.array([[0, 1, 1], [0, 1, 0], [0, 0, 1]], dtype=bool)
    logp = np.full((3, 3), -1.0)
    loss = oracle.pg_token_loss(logp, A, mask)
    expected = np.array([[0, 0.37, 0.37], [0, -1.9, 0], [0, 0, 2.5]])
    assert loss == pytest.approx(expected, abs=1e-15)


# --------------------------------------------------------------------------------------------
# PPO
# --------------------------------------------------------------------------------------------


def test_ppo_positive_advantage_above_clip():
    # r = 1.3 > 1.2, A = +1: max(−1.3, −1.2) = −1.2 (clipped branch, constant) -> gradient 0
    logp, old, A, mask = _one_token(1.3, 1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask)[0, 1] == pytest.approx(-1.2, abs=1e-12)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP)[0, 1] == 0.0


def test_ppo_negative_advantage_above_clip():
    # r = 1.3, A = −1: max(1.3, 1.2) = 1.3 (unclipped); ∂(−A·r)/∂logp = −A·r = 1.3
    logp, old, A, mask = _one_token(1.3, -1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask)[0, 1] == pytest.approx(1.3, abs=1e-12)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP)[0, 1] == pytest.approx(1.3, abs=1e-12)


def test_ppo_inside_the_clip_range():
    # r = 0.9, A = 2: loss −1.8, gradient −A·r = −1.8 (upstream 0.5 -> −0.9)
    logp, old, A, mask = _one_token(0.9, 2.0)
    assert oracle.ppo_token_loss(logp, old, A, mask)[0, 1] == pytest.approx(-1.8, abs=1e-12)
    g = oracle.ppo_token_loss_grad(logp, old, A, mask, np.array([[0.0, 0.5]]))[0, 1]
    assert g == pytest.approx(-0.9, abs=1e-12)


def test_ppo_stale_rollout_is_clipped():
    # bug-catalogue class 13: after a step logp rose by log 1.5, A = +1, ε = 0.2 -> gradient 0
    logp, old, A, mask = _one_token(1.5, 1.0)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP)[0, 1] == 0.0
    # on-policy (ratio 1): gradient −1
    logp, old, A, mask = _one_token(1.0, 1.0)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP)[0, 1] == pytest.approx(-1.0, abs=1e-15)


def test_ppo_decoupled_clip_range():
    # ε_high = 0.28: r = 1.25, A = +1 is inside (loss −1.25, gradient −1.25); r = 0.75 with
    # ε_low = 0.2 and A = −1: max(0.75, 0.8) = 0.8 (clipped, gradient 0)
    logp, old, A, mask = _one_token(1.25, 1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask, eps_high=0.28)[0, 1] == pytest.approx(-1.25)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, eps_high=0.28)[0, 1] == pytest.approx(-1.25)
    logp, old, A, mask = _one_token(0.75, -1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask, eps_high=0.28)[0, 1] == pytest.approx(0.8)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, eps_high=0.28)[0, 1] == 0.0


def test_ppo_dual_clip():
    # c = 3. (r = 10, A = +1): max(−10, −1.2) = −1.2, dual clip inert for A > 0
    logp, old, A, mask = _one_token(10.0, 1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask, dual_clip=3.0)[0, 1] == pytest.approx(-1.2, abs=1e-12)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, dual_clip=3.0)[0, 1] == 0.0
    # (r = 10, A = −1): max(10, 1.2) = 10, min(10, −c·A = 3) = 3, a constant -> gradient 0
    logp, old, A, mask = _one_token(10.0, -1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask, dual_clip=3.0)[0, 1] == pytest.approx(3.0, abs=1e-12)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, dual_clip=3.0)[0, 1] == 0.0
    # (r = 2, A = −1): 2 < 3, unclipped, gradient −A·r = 2
    logp, old, A, mask = _one_token(2.0, -1.0)
    assert oracle.ppo_token_loss(logp, old, A, mask, dual_clip=3.0)[0, 1] == pytest.approx(2.0, abs=1e-12)
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, dual_clip=3.0)[0, 1] == pytest.approx(2.0)


def test_ppo_tie_goes_to_the_unclipped_branch():
    # r exactly 1 + ε: both branches equal; the unclipped gradient −A·r is used (not 0)
    old = np.array([[0.0, 0.0]])
    logp = np.array([[0.0, math.log(1.25)]])
    r = math.exp(math.log(1.25))
    mask = np.array([[0, 1]], dtype=bool)
    g = oracle.ppo_token_loss_grad(logp, old, np.array([1.0]), mask, UP, eps_low=0.25, eps_high=r - 1.0)
    assert g[0, 1] == -r


def test_ppo_log_ratio_clamp_and_overflow():
    # d = 30 clamped to 20, A = −1: loss e^20, gradient 0 (outside the clamp)
    old = np.array([[0.0, -40.0]])
    logp = np.array([[0.0, -10.0]])
    mask = np.array([[0, 1]], dtype=bool)
    A = np.array([-1.0])
    assert oracle.ppo_token_loss(logp, old, A, mask, log_ratio_clamp=20.0)[0, 1] == pytest.approx(math.exp(20))
    assert oracle.ppo_token_loss_grad(logp, old, A, mask, UP, log_ratio_clamp=20.0)[0, 1] == 0.0
    # bug-catalogue class 15: a log-ratio of 1000 (ratio overflows to inf) at A = 0 -> finite 0
    old = np.array([[0.0, -1000.0]])
    logp = np.array([[0.0, 0.0]])
    assert oracle.ppo_token_loss(logp, old, np.array([0.0]), mask)[0, 1] == 0.0
    assert oracle.ppo_token_loss_grad(logp, old, np.array([0.0]), mask, UP)[0, 1] == 0.0


def test_ppo_clip_fraction_pairs():
    # class 21 pairs with ε = 0.2: (1.5,+1) clipped, (0.5,+1) unclipped, (0.5,−1) clipped,
    # (1.5,−1) unclipped -> exactly two zero gradients
    grads = []
    for ratio, adv in [(1.5, 1.0), (0.5, 1.0), (0.5, -1.0), (1.5, -1.0)]:
        logp, old, A, mask = _one_token(ratio, adv)
        grads.append(oracle.ppo_token_loss_grad(logp, old, A, mask, UP)[0, 1])
    assert grads[0] == 0.0 and grads[2] == 0.0
    assert grads[1] == pytest.approx(-0.5) and grads[3] == pytest.approx(1.5)


# --------------------------------------------------------------------------------------------
# GSPO
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("X", [0.0, -6.0, 5.0, np.nan, np.inf, 1e30])
def test_gspo_sequence_ratio_ignores_masked_tokens(X):
    # token log-ratios [0.1, 0.3, X (masked)]: s = exp((0.1 + 0.3)/2) = e^0.2 for any X
    old = np.array([[0.0, -1.0, -1.0, -1.0]])
    logp = np.array([[0.0, -0.9, -0.7, -1.0 + X]])
    mask = np.array([[0, 1, 1, 0]], dtype=bool)
    s = math.exp(0.2)
    # A = −1, ε tiny: s > 1 + ε_high so −A·s = s > −A·clip(s): unclipped, every valid token carries s
    loss = oracle.gspo_token_loss(logp, old, np.array([-1.0]), mask)
    assert loss[0] == pytest.approx([0.0, s, s, 0.0], abs=1e-14)
    # gradient with upstream 1 on both tokens (a token sum): dL/ds = 2·(−A) = 2, ∂s/∂logp_v = s/2
    # -> every valid token gets s (= s·(−A)/n per unit upstream, times n tokens)
    up = np.array([[0.0, 1.0, 1.0, 0.0]])
    g = oracle.gspo_token_loss_grad(logp, old, np.array([-1.0]), mask, up)
    assert g[0] == pytest.approx([0.0, s, s, 0.0], abs=1e-14)
    # sequence mean (upstream 1/n): each token gets −A·s/n = s/2
    g = oracle.gspo_token_loss_grad(logp, old, np.array([-1.0]), mask, up / 2)
    assert g[0] == pytest.approx([0.0, s / 2, s / 2, 0.0], abs=1e-14)


def test_gspo_clipped_on_the_unfavourable_side_has_zero_gradient():
    # same tokens, A = +1: max(−s, −(1 + ε_high)) = −(1 + 4e-4): clipped, gradient 0
    old = np.array([[0.0, -1.0, -1.0]])
    logp = np.array([[0.0, -0.9, -0.7]])
    mask = np.array([[0, 1, 1]], dtype=bool)
    loss = oracle.gspo_token_loss(logp, old, np.array([1.0]), mask)
    assert loss[0] == pytest.approx([0.0, -1.0004, -1.0004], abs=1e-15)
    for form in ("sequence", "token_sg"):
        g = oracle.gspo_token_loss_grad(logp, old, np.array([1.0]), mask, np.ones((1, 3)), form=form)
        assert np.all(g == 0.0)


def test_gspo_length_does_not_change_the_sequence_loss():
    # lengths 2 and 20, same per-token log-ratio 0.1 -> same s = e^0.1, same per-token loss
    A = np.array([-1.0, -1.0])
    mask = np.zeros((2, 21), dtype=bool)
    mask[0, 1:3] = True
    mask[1, 1:21] = True
    old = np.zeros((2, 21))
    logp = np.where(mask, 0.1, 0.0)
    loss = oracle.gspo_token_loss(logp, old, A, mask, eps_low=0.2, eps_high=0.2)
    assert loss[0, 1] == pytest.approx(math.exp(0.1)) and loss[1, 20] == pytest.approx(math.exp(0.1))


def test_gspo_token_sg_value_equals_sequence_value_and_grad_by_hand():
    old = np.array([[0.0, -1.0, -1.2, -0.3], [0.0, -0.5, 0.0, 0.0]])
    logp = np.array([[0.0, -0.95, -1.1, -0.35], [0.0, -0.45, 0.0, 0.0]])
    mask = np.array([[0, 1, 1, 1], [0, 1, 0, 0]], dtype=bool)
    A = np.array([[0.0, 0.5, -2.0, 1.0], [0.0, 0.7, 0.0, 0.0]])  # per-token advantages
    kw = dict(eps_low=0.2, eps_high=0.2)
    seq = oracle.gspo_token_loss(logp, old, A, mask, **kw)
    tsg = oracle.gspo_token_loss(logp, old, A, mask, form="token_sg", **kw)
    assert np.array_equal(seq, tsg)
    # row 0: s = exp((0.05 + 0.1 − 0.05)/3) = e^(0.1/3), inside [0.8, 1.2]: L_t = −A_t·s
    s0 = math.exp(0.1 / 3)
    assert seq[0, 1:] == pytest.approx([-0.5 * s0, 2.0 * s0, -1.0 * s0], abs=1e-14)
    # token_sg gradient: u_t·(−A_t)·s; sequence gradient: (Σ_t u_t·(−A_t))·s/n on every token
    up = np.array([[0.0, 1.0, 0.5, 2.0], [0.0, 3.0, 0.0, 0.0]])
    g_tsg = oracle.gspo_token_loss_grad(logp, old, A, mask, up, form="token_sg", **kw)
    assert g_tsg[0, 1:] == pytest.approx([-0.5 * s0, 1.0 * s0, -2.0 * s0], abs=1e-14)
    g_seq = oracle.gspo_token_loss_grad(logp, old, A, mask, up, **kw)
    total = (-0.5 + 1.0 - 2.0) * s0 / 3
    assert g_seq[0, 1:] == pytest.approx([total] * 3, abs=1e-14)
    s1 = math.exp(0.05)
    assert g_seq[1, 1] == pytest.approx(3.0 * -0.7 * s1) and g_tsg[1, 1] == pytest.approx(3.0 * -0.7 * s1)


# --------------------------------------------------------------------------------------------
# CISPO
# --------------------------------------------------------------------------------------------


def test_cispo_gradients_by_hand():
    # A = 1, logp = −2 (bug-catalogue class 28); gradient −w·A with w = sg(clip(r))
    logp, old, A, mask = _one_token(1.1, 1.0)
    assert oracle.cispo_token_loss_grad(logp, old, A, mask, UP)[0, 1] == pytest.approx(-1.1, abs=1e-12)
    # value −w·A·logp = −1.1·(−2 + log 1.1)
    assert oracle.cispo_token_loss(logp, old, A, mask)[0, 1] == pytest.approx(-1.1 * (-2 + math.log(1.1)))
    # r = 2.0, ε_high = 0.28: w = 1.28, gradient −1.28 (PPO would give 0)
    logp, old, A, mask = _one_token(2.0, 1.0)
    assert oracle.cispo_token_loss_grad(logp, old, A, mask, UP, eps_high=0.28)[0, 1] == pytest.approx(-1.28)
    # no lower bound: r = 0.2 keeps weight 0.2 -> −0.2
    logp, old, A, mask = _one_token(0.2, 1.0)
    assert oracle.cispo_token_loss_grad(logp, old, A, mask, UP, eps_low=None)[0, 1] == pytest.approx(-0.2)
    # with ε_low = 0.2 the weight is floored at 0.8
    assert oracle.cispo_token_loss_grad(logp, old, A, mask, UP, eps_low=0.2)[0, 1] == pytest.approx(-0.8)
    # absolute bound (TRL): ε_high = 5 is the cap itself, r = 2 -> w = 2 -> −2
    logp, old, A, mask = _one_token(2.0, 1.0)
    g = oracle.cispo_token_loss_grad(logp, old, A, mask, UP, eps_high=5.0, bound="absolute")
    assert g[0, 1] == pytest.approx(-2.0)
    # absolute bound 1.5 caps r = 2 at 1.5
    g = oracle.cispo_token_loss_grad(logp, old, A, mask, UP, eps_high=1.5, bound="absolute")
    assert g[0, 1] == pytest.approx(-1.5)


@pytest.mark.parametrize("r, value, grad", [
    (1.1, -1.1, -1.1),   # inside [0.8, 1.2]: −r·A, gradient −r·A (d r/d logp = r)
    (2.0, -1.2, 0.0),    # clipped above: −1.2, and no gradient (the clip is on the graph)
    (0.5, -0.8, 0.0),    # clipped below
    (1.2, -1.2, -1.2),   # on the bound the gradient passes (torch.clamp's tie rule)
])
def test_cispo_ratio_surrogate_by_hand(r, value, grad):
    """torchrl's CISPOLoss: L = −clip(r, 1 − ε_l, 1 + ε_h)·A (A = 1, ε = 0.2), no log-prob factor."""
    logp, old, A, mask = _one_token(r, 1.0)
    kw = {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"}
    assert oracle.cispo_token_loss(logp, old, A, mask, **kw)[0, 1] == pytest.approx(value)
    assert oracle.cispo_token_loss_grad(logp, old, A, mask, UP, **kw)[0, 1] == pytest.approx(grad)


def test_cispo_definitions_in_use_differ_on_one_token():
    """r = 3, A = 1, logp = −2: the weight each framework's default gives (gradient −w·A), and torchrl's 0."""
    logp, old, A, mask = _one_token(3.0, 1.0)
    weights = {"verl": 1.2, "trl": 3.0, "skyrl": 3.0, "ms_swift": 0.2, "open_instruct": 1.272}
    for preset, w in weights.items():
        g = oracle.cispo_token_loss_grad(logp, old, A, mask, UP, **preset_kwargs(preset, "cispo_token_loss"))
        assert g[0, 1] == pytest.approx(-w), preset
    g = oracle.cispo_token_loss_grad(logp, old, A, mask, UP, **preset_kwargs("torchrl", "cispo_token_loss"))
    assert g[0, 1] == 0.0
    logp, old, A, mask = _one_token(0.5, 1.0)  # SkyRL floors the weight at 1
    g = oracle.cispo_token_loss_grad(logp, old, A, mask, UP, **preset_kwargs("skyrl", "cispo_token_loss"))
    assert g[0, 1] == pytest.approx(-1.0)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@st.composite
def policy_cases(draw, per_token_adv=None):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(2, 5))
    old = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-4, 0, allow_subnormal=False)))
    d = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-0.7, 0.7, allow_subnormal=False)))
    logp = old + d
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    if per_token_adv is None:
        per_token_adv = draw(st.booleans())
    shape = (B, T) if per_token_adv else (B,)
    A = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2, 2, allow_subnormal=False)))
    up = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-2, 2, allow_subnormal=False)))
    garbage = draw(st.sampled_from(GARBAGE))
    return logp, old, A, mask, up, garbage


def _dirty(arr, mask, garbage):
    out = arr.copy()
    if out.ndim == 2:
        out[~mask] = garbage
    return out


LOSSES = [
    ("pg", lambda lp, old, A, m, **kw: oracle.pg_token_loss(lp, A, m),
     lambda lp, old, A, m, up, **kw: oracle.pg_token_loss_grad(lp, A, m, up)),
    ("ppo", oracle.ppo_token_loss, oracle.ppo_token_loss_grad),
    ("gspo", oracle.gspo_token_loss, oracle.gspo_token_loss_grad),
    ("cispo", oracle.cispo_token_loss, oracle.cispo_token_loss_grad),
]
LOSS_KWARGS = {
    "pg": [{}],
    "ppo": [{}, {"eps_low": 0.1, "eps_high": 0.28, "dual_clip": 1.5, "log_ratio_clamp": 0.5}],
    "gspo": [{"eps_low": 0.1, "eps_high": 0.1}, {"form": "token_sg", "eps_low": 0.1, "eps_high": 0.1}],
    "cispo": [{}, {"eps_low": 0.2, "eps_high": 0.1}, {"eps_high": 1.3, "bound": "absolute"}],
}
PARAMS = [(name, f, g, kw) for name, f, g in LOSSES for kw in LOSS_KWARGS[name]]


@pytest.mark.parametrize("name,loss_fn,grad_fn,kw", PARAMS, ids=[f"{p[0]}-{i}" for i, p in enumerate(PARAMS)])
@settings(deadline=None)
@given(case=policy_cases())
def test_masked_positions_never_matter(name, loss_fn, grad_fn, kw, case):
    logp, old, A, mask, up, garbage = case
    clean = loss_fn(logp, old, A, mask, **kw), grad_fn(logp, old, A, mask, up, **kw)
    d_logp, d_old, d_A, d_up = (_dirty(x, mask, garbage) for x in (logp, old, A, up))
    dirty = loss_fn(d_logp, d_old, d_A, mask, **kw), grad_fn(d_logp, d_old, d_A, mask, d_up, **kw)
    for c, d in zip(clean, dirty):
        assert np.array_equal(c, d)
        assert np.all(c[~mask] == 0.0)


def _numeric_vjp(f, x, upstream, h=1e-6):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = np.sum(upstream * (f(xp) - f(xm))) / (2 * h)
    return g


def _away_from(values, kinks, margin=1e-4):
    return all(abs(v - k) > margin for v in values for k in kinks)


@settings(deadline=None)
@given(policy_cases(), st.sampled_from([(0.2, 0.2, None, None), (0.1, 0.28, 1.5, None), (0.2, 0.2, None, 0.4)]))
def test_ppo_grad_matches_finite_differences(case, params):
    logp, old, A, mask, up, _ = case
    eps_low, eps_high, dual_clip, lrc = params
    d = (logp - old)[mask]
    # avoid the kinks: the clip edges, the dual-clip edge and the log-ratio clamp
    kinks_r = [1 - eps_low, 1 + eps_high] + ([dual_clip] if dual_clip else [])
    assume(_away_from(np.exp(d), kinks_r, 1e-4))
    if lrc is not None:
        assume(_away_from(np.abs(d), [lrc], 1e-4))
    kw = dict(eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, log_ratio_clamp=lrc)
    g = oracle.ppo_token_loss_grad(logp, old, A, mask, up, **kw)
    num = _numeric_vjp(lambda x: oracle.ppo_token_loss(x, old, A, mask, **kw), logp, up)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


@settings(deadline=None)
@given(policy_cases())
def test_pg_grad_matches_finite_differences(case):
    logp, _, A, mask, up, _ = case
    g = oracle.pg_token_loss_grad(logp, A, mask, up)
    num = _numeric_vjp(lambda x: oracle.pg_token_loss(x, A, mask), logp, up)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


@settings(deadline=None)
@given(policy_cases())
def test_gspo_sequence_grad_matches_finite_differences(case):
    logp, old, A, mask, up, _ = case
    kw = dict(eps_low=0.1, eps_high=0.15)
    for b in range(mask.shape[0]):
        n_b = mask[b].sum()
        if n_b:
            s_b = math.exp((logp[b] - old[b])[mask[b]].sum() / n_b)
            assume(_away_from([s_b], [0.9, 1.15], 1e-4))
    g = oracle.gspo_token_loss_grad(logp, old, A, mask, up, **kw)
    num = _numeric_vjp(lambda x: oracle.gspo_token_loss(x, old, A, mask, **kw), logp, up)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


@settings(deadline=None)
@given(policy_cases(per_token_adv=False))
def test_gspo_forms_agree_after_seq_mean_token_mean(case):
    # per-sequence A and u_t = upstream/(S·n_b) (seq_mean_token_mean): both gradients are −A·s/(S·n_b)
    logp, old, A, mask, _, _ = case
    kw = dict(eps_low=0.1, eps_high=0.15)
    u = oracle.aggregate_grad(np.zeros(mask.shape), mask, 1.0, mode="seq_mean_token_mean")
    g_seq = oracle.gspo_token_loss_grad(logp, old, A, mask, u, **kw)
    g_tsg = oracle.gspo_token_loss_grad(logp, old, A, mask, u, form="token_sg", **kw)
    np.testing.assert_allclose(g_seq, g_tsg, rtol=1e-12, atol=1e-15)


@settings(deadline=None)
@given(policy_cases(), st.sampled_from([(None, 0.28, "relative"), (0.2, 0.2, "relative"), (None, 1.5, "absolute")]))
def test_cispo_grad_is_the_stop_gradient_formula(case, params):
    logp, old, A, mask, up, _ = case
    eps_low, eps_high, bound = params
    kw = dict(eps_low=eps_low, eps_high=eps_high, bound=bound)
    g = oracle.cispo_token_loss_grad(logp, old, A, mask, up, **kw)
    hi = 1 + eps_high if bound == "relative" else eps_high
    lo = -math.inf if eps_low is None else 1 - eps_low
    for b, t in zip(*np.nonzero(mask)):
        A_t = A[b] if A.ndim == 1 else A[b, t]
        w = min(max(math.exp(logp[b, t] - old[b, t]), lo), hi)
        assert g[b, t] == pytest.approx(-w * A_t * up[b, t], rel=1e-12, abs=1e-15)
    assert np.all(g[~mask] == 0.0)


@settings(deadline=None)
@given(policy_cases())
def test_ppo_equals_pg_scaled_by_ratio_inside_the_clip_range(case):
    # with r inside [1 − ε, 1 + ε] PPO's loss is −A·r and its gradient −A·r (the ratio-weighted PG)
    logp, old, A, mask, up, _ = case
    kw = dict(eps_low=1.0, eps_high=2.0)  # r = e^d with |d| <= 0.7 is inside [0, 3]
    loss = oracle.ppo_token_loss(logp, old, A, mask, **kw)
    g = oracle.ppo_token_loss_grad(logp, old, A, mask, up, **kw)
    r = np.exp(logp - old)
    A_bt = A[:, None] if A.ndim == 1 else A
    np.testing.assert_allclose(loss, np.where(mask, -A_bt * r, 0.0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(g, np.where(mask, -A_bt * r * up, 0.0), rtol=1e-12, atol=1e-15)


@settings(deadline=None)
@given(policy_cases(per_token_adv=True))
def test_gspo_token_sg_grad_is_the_stop_gradient_formula(case):
    # token_sg: ∂s_{b,t}/∂logp_v = s_b·[v = t], so dL/dlogp_t = u_t·(−A_t)·s_b on the unclipped branch, else 0
    logp, old, A, mask, up, _ = case
    eps_low, eps_high = 0.1, 0.15
    g = oracle.gspo_token_loss_grad(logp, old, A, mask, up, eps_low=eps_low, eps_high=eps_high, form="token_sg")
    for b in range(mask.shape[0]):
        valid = np.nonzero(mask[b])[0]
        if valid.size == 0:
            assert np.all(g[b] == 0.0)
            continue
        s_b = math.exp(sum(logp[b, t] - old[b, t] for t in valid) / valid.size)
        for t in valid:
            unclipped = -A[b, t] * s_b
            clipped = -A[b, t] * min(max(s_b, 1 - eps_low), 1 + eps_high)
            expected = up[b, t] * -A[b, t] * s_b if unclipped >= clipped else 0.0
            assert g[b, t] == pytest.approx(expected, rel=1e-9, abs=1e-12)
