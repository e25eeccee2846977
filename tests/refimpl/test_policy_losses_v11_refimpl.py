"""refimpl's spec v1.1 policy losses of 2025-26 (api.md "Spec v1.1: policy losses of 2025-26"):
``sapo_token_loss``, ``gmpo_token_loss``, ``dppo_token_loss``, ``dro_token_loss``. The properties that
need no oracle: hand-computed values and gradients, masked positions never matter, exp overflow
(0·inf := 0, σ saturation, the float64 path for an in-range product of an out-of-range ratio), dtypes,
constants detached, error messages, degenerate batches, signatures. (The differential tests against
the oracle come from the conformance records.)
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import refimpl
from refimpl import dppo_token_loss, dro_token_loss, gmpo_token_loss, sapo_token_loss

from tests.refimpl.small_batch import MASK, POISON, B, T, assert_error_names, tok  # noqa: E402

F64 = torch.float64


def inputs(dtype=torch.float32) -> dict[str, torch.Tensor]:
    logp = tok(1, dtype)
    return {
        "logp": logp,
        "old_logp": (logp.double() + tok(2, F64, scale=0.3, offset=0.0)).to(dtype),  # nearby: some clipped, some not
        "advantages": torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=dtype),
        "adv_tokens": tok(6, dtype, scale=1.0, offset=0.0),
    }


# (function, advantages argument, keywords)
CALLS = [
    (sapo_token_loss, "advantages", {}),
    (sapo_token_loss, "adv_tokens", {"tau_pos": 0.5, "tau_neg": 3.0, "log_ratio_clamp": 0.2}),
    (gmpo_token_loss, "advantages", {}),
    (gmpo_token_loss, "adv_tokens", {"eps_low": 0.1, "eps_high": 0.2}),
    (dppo_token_loss, "advantages", {}),
    (dppo_token_loss, "adv_tokens", {"divergence": "kl", "delta_low": 0.05, "delta_high": 0.02, "ratio_cap": 1.1}),
    (dppo_token_loss, "adv_tokens", {"delta_low": 0.0, "delta_high": 0.05, "log_ratio_clamp": 0.1}),
    (dro_token_loss, "advantages", {"beta": 0.1}),
    (dro_token_loss, "adv_tokens", {"beta": 2.0}),
]
IDS = [f"{fn.__name__}-{i}" for i, (fn, _, _) in enumerate(CALLS)]
FUNCTIONS = (sapo_token_loss, gmpo_token_loss, dppo_token_loss, dro_token_loss)


def kw_for(fn) -> dict:
    return {"beta": 0.5} if fn is dro_token_loss else {}


def loss_and_grad(fn, logp, old_logp, adv, kwargs, upstream=None, mask=MASK):
    lp = logp.detach().clone().requires_grad_(True)
    out = fn(lp, old_logp, adv, mask, **kwargs)
    u = torch.ones_like(out) if upstream is None else upstream.to(out.dtype)
    (g,) = torch.autograd.grad(out, lp, grad_outputs=u)
    return out, g


def test_exported():
    for fn in FUNCTIONS:
        assert fn.__name__ in refimpl.__all__ and getattr(refimpl, fn.__name__) is fn


def test_signatures_are_the_spec_s():
    """api.md's signatures and canonical defaults; DRO's beta has no default."""
    spec = {
        sapo_token_loss: {"tau_pos": 1.0, "tau_neg": 1.05, "log_ratio_clamp": None},
        gmpo_token_loss: {"eps_low": 0.4, "eps_high": 0.4},
        dppo_token_loss: {"divergence": "tv", "delta_low": 0.2, "delta_high": 0.2, "ratio_cap": None,
                          "log_ratio_clamp": None},
        dro_token_loss: {"beta": inspect.Parameter.empty},
    }
    for fn, keywords in spec.items():
        params = inspect.signature(fn).parameters
        assert list(params)[:4] == ["logp", "old_logp", "advantages", "mask"]
        assert all(params[n].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for n in list(params)[:4])
        assert {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY} == keywords


# ----------------------------------------------------------------------------------------------
# hand-computed values (float64, so the numbers below are exact to ~1e-15)
# ----------------------------------------------------------------------------------------------

M1 = torch.tensor([[False, True, True, True]])
M2 = torch.tensor([[False, True]])


def t(*rows) -> torch.Tensor:
    """A [len(rows), T] float64 tensor."""
    return torch.tensor(rows, dtype=F64)


def adv1(a: float) -> torch.Tensor:
    """A [1] (per-sequence) float64 advantage."""
    return torch.tensor([a], dtype=F64)


def test_sapo_by_hand():
    # d = 0 → r = 1 → σ(τ·0) = 1/2: L = −A·(4/τ)·1/2 = −2A/τ, gradient −A·4·(1/4)·1 = −A.
    #   A = 1 (τ_pos = 1): L = −2, g = −1.   A = −1 (τ_neg = 1.05): L = 2/1.05, g = +1.
    # d = ln 2 → r = 2, A = 1, τ = 1: x = τ(r − 1) = 1, σ(1) = 0.7310585786300049:
    #   L = −4·σ(1) = −2.9242343145200196; g = −4·σ(1)(1 − σ(1))·2 = −8·0.19661193324148185 = −1.5728954659318548.
    lp, old = t([0.0, -1.0, -1.0 + math.log(2.0), -0.5]), t([0.0, -1.0, -1.0, -0.5])
    L, g = loss_and_grad(sapo_token_loss, lp, old, t([0.0, 1.0, 1.0, -1.0]), {}, mask=M1)
    torch.testing.assert_close(L, t([0.0, -2.0, -2.9242343145200196, 2.0 / 1.05]), rtol=1e-13, atol=0)
    torch.testing.assert_close(g, t([0.0, -1.0, -1.5728954659318548, 1.0]), rtol=1e-13, atol=0)
    # the log-ratio clamp at c = 0.5 binds at d = ln 2 ≈ 0.693: value at d = 0.5, gradient 0
    #   r = e^0.5 = 1.6487212707001282, x = 0.6487212707001282, σ(x) = 0.6567245316; L = −4σ(x)
    L, g = loss_and_grad(sapo_token_loss, lp, old, adv1(1.0), {"log_ratio_clamp": 0.5}, mask=M1)
    sig = 1.0 / (1.0 + math.exp(-(math.exp(0.5) - 1.0)))
    torch.testing.assert_close(L[0, 2], torch.tensor(-4.0 * sig, dtype=F64), rtol=1e-13, atol=0)
    assert g[0, 2] == 0 and g[0, 1] == -1.0


def test_sapo_gradient_is_autograd_exact():
    """The custom gate backward against finite differences (smooth everywhere without the clamp)."""
    v = inputs(F64)
    for kw in ({}, {"tau_pos": 0.5, "tau_neg": 3.0}):
        assert torch.autograd.gradcheck(
            lambda x, kw=kw: sapo_token_loss(x, v["old_logp"], v["adv_tokens"], MASK, **kw),
            (v["logp"].clone().requires_grad_(True),),
        )


def test_gmpo_by_hand():
    # one row, valid d = [0.1, 0.6, −0.6], ε = 0.4 (log space)
    # A = +1: s = min(d, 0.4) = [0.1, 0.4 (clipped), −0.6]; log ρ = −0.1/3; ρ = e^(−1/30) = 0.9672161004820059
    #   every valid token L = −ρ; d(ΣL)/dlogp_t = 3·(−A)·ρ/3 = −ρ where unclipped (t = 1, 3), 0 at t = 2.
    # A = −1: s = max(d, −0.4) = [0.1, 0.6, −0.4 (clipped)]; log ρ = 0.1; ρ = 1.1051709180756477
    #   L = +ρ; gradient +ρ at t = 1, 2, 0 at t = 3.
    lp, old = t([0.0, 0.1, 0.6, -0.6]), t([0.0, 0.0, 0.0, 0.0])
    rho = math.exp(-1.0 / 30.0)
    L, g = loss_and_grad(gmpo_token_loss, lp, old, adv1(1.0), {}, mask=M1)
    torch.testing.assert_close(L, t([0.0, -rho, -rho, -rho]), rtol=1e-13, atol=0)
    torch.testing.assert_close(g, t([0.0, -rho, 0.0, -rho]), rtol=1e-13, atol=0)
    rho = math.exp(0.1)
    L, g = loss_and_grad(gmpo_token_loss, lp, old, adv1(-1.0), {}, mask=M1)
    torch.testing.assert_close(L, t([0.0, rho, rho, rho]), rtol=1e-13, atol=0)
    torch.testing.assert_close(g, t([0.0, rho, rho, 0.0]), rtol=1e-13, atol=0)
    # [B, T] advantages [·, 2, −1, 0]: Ā = 1/3; s = [min(0.1, 0.4), max(0.6, −0.4), 0 (A = 0: sgn 0)]
    #   = [0.1, 0.6, 0]; ρ = e^(0.7/3); L = −ρ/3; gradient (upstream 1) 3·(−1/3)·ρ/3 = −ρ/3 at t = 1, 2
    #   and 0 at t = 3 (its s_t is the constant 0)
    rho = math.exp(0.7 / 3.0)
    L, g = loss_and_grad(gmpo_token_loss, lp, old, t([0.0, 2.0, -1.0, 0.0]), {}, mask=M1)
    torch.testing.assert_close(L, t([0.0, -rho / 3, -rho / 3, -rho / 3]), rtol=1e-13, atol=0)
    torch.testing.assert_close(g, t([0.0, -rho / 3, -rho / 3, 0.0]), rtol=1e-13, atol=0)
    # the tie d = ε_high goes to the unclipped branch (the gradient passes)
    _, g = loss_and_grad(gmpo_token_loss, t([0.0, 0.25, 0.0, 0.0]), old, adv1(1.0),
                         {"eps_high": 0.25}, mask=M1)
    assert (g[0, 1:] != 0).all()


def test_gmpo_seq_mean_token_mean_is_the_mean_over_rows():
    v = inputs(F64)
    L = gmpo_token_loss(v["logp"], v["old_logp"], v["advantages"], MASK)
    rows = MASK.any(dim=1)
    per_row = L.sum(dim=1) / MASK.sum(dim=1).clamp(min=1)  # every valid token carries its row's loss
    assert torch.allclose(L[MASK], per_row.unsqueeze(1).expand(B, T)[MASK], rtol=0, atol=0)
    agg = refimpl.aggregate(L, MASK, mode="seq_mean_token_mean")
    torch.testing.assert_close(agg, per_row[rows].sum() / B)


def test_dppo_by_hand():
    # p = 0.5, p_old = 0.2: r = 2.5, p − p_old = 0.3; logp = ln 0.5 = −0.6931471805599453
    # tv (δ = 0.2): A = 1: 0.3 > 0.2 → dropped: L = 0, g = 0.
    #               A = −1: 0.3 ≥ −0.2 → kept: L = −A·2.5·ln 0.5 = −1.7328679513998633, g = −A·2.5 = 2.5.
    # ratio_cap = 2, A = −1: L = 2·ln 0.5 = −1.3862943611198906, g = 2.
    # kl: D = 0.2·ln(0.2/0.5) + 0.8·ln(0.8/0.5) = 0.19274475702175753 ≤ 0.2 → A = 1 kept:
    #   L = −2.5·ln 0.5 = 1.7328679513998633, g = −2.5; with δ_high = 0.1: D > δ and p > p_old → dropped.
    lp, old = t([0.0, math.log(0.5)]), t([0.0, math.log(0.2)])
    ln_half = math.log(0.5)
    cases = [
        ({}, 1.0, 0.0, 0.0),
        ({}, -1.0, 2.5 * ln_half, 2.5),
        ({"ratio_cap": 2.0}, -1.0, 2.0 * ln_half, 2.0),
        ({"ratio_cap": 2.0}, 1.0, 0.0, 0.0),
        ({"divergence": "kl"}, 1.0, -2.5 * ln_half, -2.5),
        ({"divergence": "kl", "delta_high": 0.1}, 1.0, 0.0, 0.0),
        ({"divergence": "kl", "delta_low": 0.0}, -1.0, 2.5 * ln_half, 2.5),  # p ≥ p_old keeps A ≤ 0
        ({"log_ratio_clamp": math.log(2.0)}, -1.0, 2.0 * ln_half, 2.0),  # r = e^(ln 2) = 2
    ]
    for kw, a, value, grad in cases:
        L, g = loss_and_grad(dppo_token_loss, lp, old, adv1(a), kw, mask=M2)
        torch.testing.assert_close(L, t([0.0, value]), rtol=1e-13, atol=0, msg=str(kw))
        torch.testing.assert_close(g, t([0.0, grad]), rtol=1e-13, atol=0, msg=str(kw))
    # p = 0.5 → p_old = 0.9 with A = −1: p − p_old = −0.4 < −0.2 → dropped (tv);
    # D = 0.9·ln(1.8) + 0.1·ln(0.2) = 0.5290110 − 0.1609438 = 0.3680672 > 0.2 and p < p_old → dropped (kl)
    for kw in ({}, {"divergence": "kl"}):
        L, g = loss_and_grad(dppo_token_loss, lp, t([0.0, math.log(0.9)]), adv1(-1.0), kw, mask=M2)
        assert (L == 0).all() and (g == 0).all(), kw


def test_dppo_gradient_is_the_stop_gradient_weight():
    """dL/dlogp = −A·sg(min(r, cap))·keep: no derivative of the ratio or of the keep decision."""
    v = inputs(F64)
    for kw in ({}, {"ratio_cap": 1.1}, {"divergence": "kl", "delta_high": 0.01}):
        L, g = loss_and_grad(dppo_token_loss, v["logp"], v["old_logp"], v["adv_tokens"], kw)
        lp = torch.where(MASK, v["logp"], 0.0)
        w = torch.exp(v["logp"] - v["old_logp"]).clamp(max=kw.get("ratio_cap", math.inf))
        keep = (L != 0) | (torch.where(MASK, v["adv_tokens"], 0.0) == 0)
        expected = torch.where(MASK & keep, -v["adv_tokens"] * w, 0.0)
        torch.testing.assert_close(g, expected, rtol=1e-14, atol=0)
        torch.testing.assert_close(L, expected * lp, rtol=1e-14, atol=0)


def test_dppo_binary_kl_edges():
    """p = 1 > p_old: D = inf (dropped for A > 0 unless p ≤ p_old); p_old = 1: 0·log 0 := 0, D = −log p;
    logp > 0 (not a probability): D := inf and only the p-vs-p_old clause keeps the token."""
    m = torch.tensor([[False, True, True, True]])
    lp = t([0.0, 0.0, -0.1, 0.5])  # p = 1, p = e^−0.1, p = e^0.5 > 1
    old = t([0.0, -0.5, 0.0, -0.5])  # p_old = e^−0.5, 1, e^−0.5
    for a, expected_keep in ((1.0, [False, True, False]), (-1.0, [True, True, True])):
        # A = 1: t=1 D = inf, p > p_old: drop; t=2 D = 0.1 ≤ 0.2: keep; t=3 D undefined, p > p_old: drop
        # A = −1: t=1, t=3 p ≥ p_old: keep; t=2 D = 0.1 ≤ 0.2: keep
        L, g = loss_and_grad(dppo_token_loss, lp, old, adv1(a), {"divergence": "kl"}, mask=m)
        assert not torch.isnan(L).any() and not torch.isnan(g).any()
        assert ((g[0, 1:] != 0) == torch.tensor(expected_keep)).all(), (a, g)


def test_dppo_tv_where_the_probabilities_under_or_overflow():
    """p − p_old from e^max·(1 − e^−gap): logp = 100, old = 99 (both e^· = inf in float32) is a huge
    positive difference (dropped for A > 0, kept for A ≤ 0); logp = −120, old = −119 (both 0 or
    subnormal) is a tiny negative one (kept for both signs: |p − p_old| ≤ δ). Kept: gradient −A·r with
    r = e^1 at t = 1 and e^−1 at t = 2."""
    m = torch.tensor([[False, True, True]])
    lp, old = torch.tensor([[0.0, 100.0, -120.0]]), torch.tensor([[0.0, 99.0, -119.0]])
    _, g = loss_and_grad(dppo_token_loss, lp, old, torch.tensor([1.0]), {}, mask=m)
    torch.testing.assert_close(g[0], torch.tensor([0.0, 0.0, -math.exp(-1.0)]))
    _, g = loss_and_grad(dppo_token_loss, lp, old, torch.tensor([-1.0]), {}, mask=m)
    torch.testing.assert_close(g[0], torch.tensor([0.0, math.e, math.exp(-1.0)]))


def test_dro_by_hand():
    # A = 2, logp = −1, old = −1.5, β = 0.1: d = 0.5;
    #   L = −(2·(−1) − 0.05·0.25) = 2.0125; gradient −A + β·d = −2 + 0.05 = −1.95
    # A = −1, logp = −2, old = −1, β = 1: d = −1; L = −(2 − 0.5) = −1.5; gradient 1 − 1 = 0
    L, g = loss_and_grad(dro_token_loss, t([0.0, -1.0]), t([0.0, -1.5]), adv1(2.0), {"beta": 0.1},
                         mask=M2)
    torch.testing.assert_close(L, t([0.0, 2.0125]), rtol=1e-14, atol=0)
    torch.testing.assert_close(g, t([0.0, -1.95]), rtol=1e-14, atol=0)
    L, g = loss_and_grad(dro_token_loss, t([0.0, -2.0]), t([0.0, -1.0]), adv1(-1.0), {"beta": 1.0},
                         mask=M2)
    torch.testing.assert_close(L, t([0.0, -1.5]), rtol=1e-14, atol=0)
    assert (g == 0).all()


# ----------------------------------------------------------------------------------------------
# masked positions, constants, dtypes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("poison", POISON)
@pytest.mark.parametrize("fn,adv,kwargs", CALLS, ids=IDS)
def test_masked_positions_never_matter(fn, adv, kwargs, poison):
    clean = inputs()
    u = tok(9, scale=1.0, offset=0.0)
    L0, g0 = loss_and_grad(fn, clean["logp"], clean["old_logp"], clean[adv], kwargs, u)
    dirty = {n: torch.where(MASK, x, poison) if x.dim() == 2 else x for n, x in clean.items()}
    L1, g1 = loss_and_grad(fn, dirty["logp"], dirty["old_logp"], dirty[adv], kwargs, u)
    assert torch.equal(L0, L1) and torch.equal(g0, g1)
    assert (L1[~MASK] == 0).all() and (g1[~MASK] == 0).all()
    assert torch.isfinite(L1).all() and torch.isfinite(g1).all()
    # and a poisoned upstream at masked positions does not matter either
    _, g2 = loss_and_grad(fn, dirty["logp"], dirty["old_logp"], dirty[adv], kwargs, torch.where(MASK, u, 0.0))
    assert torch.equal(g0, g2)


@pytest.mark.parametrize("fn,adv,kwargs", CALLS, ids=IDS)
def test_only_logp_gets_a_gradient(fn, adv, kwargs):
    v = inputs(F64)
    lp, old, A = (v[n].clone().requires_grad_(True) for n in ("logp", "old_logp", adv))
    out = fn(lp, old, A, MASK, **kwargs)
    g_lp, g_old, g_A = torch.autograd.grad(out.sum(), (lp, old, A), allow_unused=True)
    assert g_lp is not None and torch.isfinite(g_lp).all() and (g_lp[~MASK] == 0).all()
    for g in (g_old, g_A):
        assert g is None or (g == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("fn,adv,kwargs", CALLS, ids=IDS)
def test_output_dtype(fn, adv, kwargs, dtype):
    v = inputs(dtype)
    L, g = loss_and_grad(fn, v["logp"], v["old_logp"], v[adv], kwargs)
    assert L.dtype == dtype and g.dtype == dtype and L.shape == (B, T)
    assert torch.isfinite(L).all() and torch.isfinite(g).all()
    if dtype in (torch.bfloat16, torch.float16):  # computed in float32, rounded once
        rounded = {n: x.to(torch.float32) for n, x in v.items()}
        L32, g32 = loss_and_grad(fn, rounded["logp"], rounded["old_logp"], rounded[adv], kwargs)
        assert torch.equal(L, L32.to(dtype)) and torch.equal(g, g32.to(dtype))


def test_mixed_input_dtypes_promote():
    v = inputs()
    for fn in FUNCTIONS:
        out = fn(v["logp"].double(), v["old_logp"], v["advantages"].bfloat16(), MASK, **kw_for(fn))
        assert out.dtype == F64


# ----------------------------------------------------------------------------------------------
# overflow: d = 800 (e^800 overflows every float dtype), 0·inf := 0
# ----------------------------------------------------------------------------------------------


def overflowing(dtype=torch.float32):
    """logp − old_logp = 800 at (0, 2), 0 elsewhere."""
    old = torch.full((B, T), -1.0, dtype=dtype)
    logp = old.clone()
    logp[0, 2] = 799.0
    return logp, old


ALL_KWARGS = [(fn, kw) for fn, _, kw in CALLS] + [(sapo_token_loss, {"log_ratio_clamp": 20.0}),
                                                  (dppo_token_loss, {"ratio_cap": 3.0})]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fn,kwargs", ALL_KWARGS, ids=[f"{fn.__name__}-{i}" for i, (fn, _) in enumerate(ALL_KWARGS)])
def test_zero_advantage_times_overflowing_ratio_is_zero(fn, kwargs, dtype):
    logp, old = overflowing(dtype)
    for A in (torch.zeros(B, dtype=dtype), torch.zeros(B, T, dtype=dtype)):
        L, g = loss_and_grad(fn, logp, old, A, kwargs)
        if fn is dro_token_loss:  # no ratio: L = ½β·d², gradient β·d (finite, nonzero at d = 800)
            beta = kwargs["beta"]
            assert L[0, 2].item() == pytest.approx(0.5 * beta * 800.0**2, rel=1e-2)
            assert g[0, 2].item() == pytest.approx(beta * 800.0, rel=1e-2)
            assert (L[MASK & (logp == old)] == 0).all()
        else:
            assert (L == 0).all() and (g == 0).all(), (L, g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_overflowing_ratio_with_nonzero_advantage(dtype):
    logp, old = overflowing(dtype)
    pos, neg = torch.ones(B, dtype=dtype), -torch.ones(B, dtype=dtype)
    inf = math.inf

    # SAPO: σ saturates: L = −A·4/τ, gradient exactly 0 (not 0·inf); finite everywhere
    for A, tau in ((pos, 1.0), (neg, 1.05)):
        L, g = loss_and_grad(sapo_token_loss, logp, old, A, {})
        assert L[0, 2].item() == pytest.approx(-A[0].item() * 4.0 / tau, rel=1e-2)
        assert g[0, 2] == 0 and torch.isfinite(L).all() and torch.isfinite(g).all()
        assert (g[MASK & (logp == old)] == -A[0]).all()  # d = 0: −A·4·¼·1

    # GMPO, A > 0: s = min(800, ε_high) is clipped: ρ finite, no gradient at (0, 2)
    L, g = loss_and_grad(gmpo_token_loss, logp, old, pos, {})
    assert torch.isfinite(L).all() and torch.isfinite(g).all() and g[0, 2] == 0
    rho = math.exp(0.4 / 4)  # row 0: s = [0, 0.4, 0, 0] over 4 valid tokens
    assert L[0, 1].item() == pytest.approx(-rho, rel=1e-2)
    # GMPO, A < 0: s = 800 unclipped, log ρ = 200: every valid token of row 0 carries ρ = e^200 and its
    # gradient is 4·ρ/4 = ρ (beyond float32 and bfloat16: +inf there; no NaN)
    L, g = loss_and_grad(gmpo_token_loss, logp, old, neg, {})
    rho = math.exp(200.0) if dtype == F64 else inf
    assert torch.equal(L[0][MASK[0]], torch.full((4,), rho, dtype=dtype))
    assert torch.allclose(g[0][MASK[0]], torch.full((4,), rho, dtype=dtype), rtol=1e-12)
    assert torch.isfinite(L[1:]).all() and torch.isfinite(g[1:]).all()
    # ... with a zero upstream on row 0: gradient 0 there, not 0·inf
    u = torch.ones(B, T, dtype=dtype)
    u[0] = 0.0
    _, g = loss_and_grad(gmpo_token_loss, logp, old, neg, {}, u)
    assert (g[0] == 0).all() and not torch.isnan(g).any()

    # DPPO: A > 0, p = e^799 = inf: p − p_old > δ_high → dropped (0, not 0·inf)
    L, g = loss_and_grad(dppo_token_loss, logp, old, pos, {})
    assert L[0, 2] == 0 and g[0, 2] == 0 and not torch.isnan(L).any() and not torch.isnan(g).any()
    # A < 0: kept, r = inf: L = −A·inf·799 = +inf, gradient −A·inf = +inf
    L, g = loss_and_grad(dppo_token_loss, logp, old, neg, {})
    assert L[0, 2] == inf and g[0, 2] == inf and torch.isfinite(L[MASK & (logp == old)]).all()
    # ... capped at 3: L = 3·799, gradient 3; clamped to 20: r = e^20
    L, g = loss_and_grad(dppo_token_loss, logp, old, neg, {"ratio_cap": 3.0})
    assert L[0, 2].item() == pytest.approx(3 * 799.0, rel=1e-2) and g[0, 2].item() == pytest.approx(3.0, rel=1e-2)
    L, g = loss_and_grad(dppo_token_loss, logp, old, neg, {"log_ratio_clamp": 20.0})
    assert g[0, 2].item() == pytest.approx(math.exp(20.0), rel=1e-2) and torch.isfinite(L).all()
    # ... a zero upstream at the infinite gradient: 0
    u = torch.ones(B, T, dtype=dtype)
    u[0, 2] = 0.0
    _, g = loss_and_grad(dppo_token_loss, logp, old, neg, {}, u)
    assert g[0, 2] == 0 and not torch.isnan(g).any()

    # DRO has no ratio: finite
    L, g = loss_and_grad(dro_token_loss, logp, old, neg, {"beta": 0.1})
    assert torch.isfinite(L).all() and torch.isfinite(g).all()


@pytest.mark.parametrize("poison", POISON)
def test_masked_positions_never_matter_on_the_float64_path(poison):
    """d = 800 with A < 0 sends GMPO and DPPO through the float64 recomputation: masked poison still
    changes nothing."""
    logp, old = overflowing()
    A = -torch.ones(B)
    u = tok(9, scale=1.0, offset=0.0)
    for fn in (gmpo_token_loss, dppo_token_loss):
        L0, g0 = loss_and_grad(fn, logp, old, A, {}, u)
        L1, g1 = loss_and_grad(fn, torch.where(MASK, logp, poison), torch.where(MASK, old, poison), A, {}, u)
        assert torch.equal(L0, L1) and torch.equal(g0, g1) and L1.dtype == torch.float32
        assert (L1[~MASK] == 0).all() and (g1[~MASK] == 0).all() and not torch.isnan(g1).any()


def test_dppo_logp_zero_times_infinite_weight():
    """logp = 0 with r = e^100 = inf in float32 and A < 0 (kept: p ≥ p_old): L = −A·inf·0 := 0, gradient +inf."""
    logp = torch.full((B, T), -1.0)
    old = torch.full((B, T), -1.0)
    logp[0, 2], old[0, 2] = 0.0, -100.0
    L, g = loss_and_grad(dppo_token_loss, logp, old, -torch.ones(B), {})
    assert L[0, 2] == 0 and g[0, 2] == math.inf and not torch.isnan(L).any()


def test_in_range_product_of_an_overflowing_ratio_is_exact():
    """float32: ρ = e^90 overflows, but Ā·ρ with Ā = −1e-5 is 1.22e34; DPPO's −A·e^90·logp with
    A = −1e-3, logp = −1e-3 is −1.22e33 (gradient 1.22e36); DRO's ½β·d² with d = 3e19, β = 0.01 is
    4.5e36 though d² = 9e38 overflows. The exact values rounded once, not inf."""
    m = torch.tensor([[False, True]])
    e90 = math.exp(90.0)
    L, g = loss_and_grad(gmpo_token_loss, torch.tensor([[0.0, 89.0]]), torch.tensor([[0.0, -1.0]]),
                         torch.tensor([-1e-5]), {}, mask=m)
    assert L[0, 1].item() == pytest.approx(1e-5 * e90, rel=1e-5) and g[0, 1].item() == pytest.approx(1e-5 * e90, rel=1e-5)
    L, g = loss_and_grad(dppo_token_loss, torch.tensor([[0.0, -1e-3]]), torch.tensor([[0.0, -90.001]]),
                         torch.tensor([-1e-3]), {}, mask=m)
    assert L[0, 1].item() == pytest.approx(-1e-6 * e90, rel=1e-5) and g[0, 1].item() == pytest.approx(1e-3 * e90, rel=1e-5)
    L, g = loss_and_grad(dro_token_loss, torch.tensor([[0.0, 1.5e19]]), torch.tensor([[0.0, -1.5e19]]),
                         torch.tensor([0.0]), {"beta": 0.01}, mask=m)
    assert L[0, 1].item() == pytest.approx(0.005 * 9e38, rel=1e-5) and g[0, 1].item() == pytest.approx(3e17, rel=1e-5)
    # DRO: both terms beyond float32 (inf − inf): the exact difference
    L, g = loss_and_grad(dro_token_loss, torch.tensor([[0.0, 1e19]]), torch.tensor([[0.0, -2e19]]),
                         torch.tensor([1e20]), {"beta": 1.0}, mask=m)
    # ½·(3e19)² − 1e20·1e19 = 4.5e38 − 1e39 = −5.5e38: beyond float32, −inf (not NaN)
    assert L[0, 1] == -math.inf and g[0, 1].item() == pytest.approx(-1e20 + 3e19, rel=1e-5)


def test_sapo_gradient_decays_smoothly_where_sigma_saturates():
    """d where σ(τ(r − 1)) rounds to 1 in float32 but σ(1 − σ)·r does not underflow: the gradient is the
    exact −A·4·e^(d + log σ(x) + log σ(−x)), not 0."""
    m = torch.tensor([[False, True, True]])
    d = [0.0, math.log(21.0), math.log(60.0)]  # x = 20 and 59 (τ = 1)
    _, g = loss_and_grad(sapo_token_loss, torch.tensor([d]), torch.zeros(1, 3), torch.tensor([1.0]), {}, mask=m)
    for t_, x in ((1, 20.0), (2, 59.0)):
        exact = -4.0 * (x + 1.0) * math.exp(-x) / (1.0 + math.exp(-x)) ** 2
        assert g[0, t_].item() == pytest.approx(exact, rel=1e-5) and g[0, t_] != 0


# ----------------------------------------------------------------------------------------------
# bad inputs and degenerate batches
# ----------------------------------------------------------------------------------------------

V = inputs()
_A = (V["logp"], V["old_logp"], V["advantages"], MASK)
_NAN_LOGP = torch.where(MASK, math.nan, V["logp"])
_INF_OLD = torch.where(MASK, math.inf, V["old_logp"])
_NAN_ADV = torch.where(MASK, math.nan, V["adv_tokens"])
_BAD_MASK = MASK.clone()
_BAD_MASK[0, 0] = True
BAD = [
    (sapo_token_loss, _A, {"tau_pos": 0.0}, ValueError, "tau_pos"),
    (sapo_token_loss, _A, {"tau_neg": -1.0}, ValueError, "tau_neg"),
    (sapo_token_loss, _A, {"tau_pos": math.nan}, ValueError, "tau_pos"),
    (sapo_token_loss, _A, {"tau_neg": "1"}, TypeError, "tau_neg"),
    (sapo_token_loss, _A, {"log_ratio_clamp": 0.0}, ValueError, "log_ratio_clamp"),
    (sapo_token_loss, (V["logp"].long(), V["old_logp"], V["advantages"], MASK), {}, TypeError, "logp"),
    (sapo_token_loss, (_NAN_LOGP, V["old_logp"], V["advantages"], MASK), {}, ValueError, "logp"),
    (gmpo_token_loss, _A, {"eps_low": -0.1}, ValueError, "eps_low"),
    (gmpo_token_loss, _A, {"eps_high": -0.1}, ValueError, "eps_high"),
    (gmpo_token_loss, _A, {"eps_high": True}, TypeError, "eps_high"),
    (gmpo_token_loss, (V["logp"], _INF_OLD, V["advantages"], MASK), {}, ValueError, "old_logp"),
    (gmpo_token_loss, (V["logp"], V["old_logp"].int(), V["advantages"], MASK), {}, TypeError, "old_logp"),
    (gmpo_token_loss, (V["logp"], V["old_logp"], V["advantages"][:2], MASK), {}, ValueError, "advantages"),
    (dppo_token_loss, _A, {"divergence": "js"}, ValueError, "divergence"),
    (dppo_token_loss, _A, {"divergence": 1}, TypeError, "divergence"),
    (dppo_token_loss, _A, {"delta_low": -0.1}, ValueError, "delta_low"),
    (dppo_token_loss, _A, {"delta_high": -1e-9}, ValueError, "delta_high"),
    (dppo_token_loss, _A, {"ratio_cap": 0.0}, ValueError, "ratio_cap"),
    (dppo_token_loss, _A, {"ratio_cap": -2.0}, ValueError, "ratio_cap"),
    (dppo_token_loss, _A, {"log_ratio_clamp": -1.0}, ValueError, "log_ratio_clamp"),
    (dppo_token_loss, (V["logp"], V["old_logp"], _NAN_ADV, MASK), {}, ValueError, "advantages"),
    (dppo_token_loss, (V["logp"], V["old_logp"], V["advantages"], _BAD_MASK), {}, ValueError, "mask"),
    (dro_token_loss, _A, {"beta": 0.0}, ValueError, "beta"),
    (dro_token_loss, _A, {"beta": -0.1}, ValueError, "beta"),
    (dro_token_loss, _A, {"beta": None}, ValueError, "beta"),
    (dro_token_loss, _A, {"beta": math.inf}, ValueError, "beta"),
    (dro_token_loss, _A, {"beta": "0.1"}, TypeError, "beta"),
    (dro_token_loss, (V["logp"], V["old_logp"][:, :3], V["advantages"], MASK), {"beta": 0.1}, ValueError, "old_logp"),
    (dro_token_loss, (V["logp"], V["old_logp"], torch.tensor([1.0, math.nan, 0.0, 0.0]), MASK), {"beta": 0.1},
     ValueError, "advantages"),
]


@pytest.mark.parametrize("fn,args,kwargs,exc,arg", BAD, ids=[f"{b[0].__name__}-{b[4]}-{i}" for i, b in enumerate(BAD)])
def test_bad_input_names_function_and_argument(fn, args, kwargs, exc, arg):
    assert_error_names(fn, args, kwargs, exc, arg)


def test_dro_beta_is_required():
    with pytest.raises(TypeError, match="beta"):
        dro_token_loss(*_A)  # no default (api.md): Python's missing-keyword error


@pytest.mark.parametrize("fn", FUNCTIONS, ids=[f.__name__ for f in FUNCTIONS])
def test_degenerate_batches(fn):
    for b, t_ in ((0, 4), (3, 1), (2, 0), (2, 5)):  # B = 0, T = 1, T = 0, all masked
        m = torch.zeros(b, t_, dtype=torch.bool)
        x = torch.full((b, t_), -0.7)
        lp = x.clone().requires_grad_(True)
        L = fn(lp, x - 0.3, torch.ones(b), m, **kw_for(fn))
        assert L.shape == (b, t_) and (L == 0).all()
        (g,) = torch.autograd.grad(L.sum(), lp, allow_unused=True)
        assert g is None or (g == 0).all()
