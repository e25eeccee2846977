"""Numerical extremes (spec v1, api.md "Numerical extremes"): logits of ±1e4, log-ratios of ±100 at
valid and masked positions, groups of 10⁶ identical rewards, bfloat16 inputs, T = 32768.

The rule tested: every output and gradient is the exact value of the spec's equation on the inputs
the implementation saw, rounded to the output dtype. So refimpl (float64 / float32 / bfloat16) is
compared with the oracle (float64, on the same rounded inputs) *rounded to refimpl's dtype*: where
the exact value exceeds the dtype's range (k3 = e^100 − 101 in float32) both sides are the same
±inf. A zero factor (A = 0, kl_coef = 0, a zero upstream, an unselected branch) gives exactly 0
against an overflowing one, never NaN. With the spec's clamps (`log_ratio_clamp`, KL `clamp`,
PPO `dual_clip`) everything is finite. Masked positions never matter, ±100 or NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
import refimpl
from conformance.records import cases
from conformance.runner.compare import compare
from conformance.records import BY_FUNCTION, RECORDS
from conformance.tolerances import Tol, tolerance

DTYPES = ("float64", "float32", "bfloat16")
TORCH = cases.TORCH_DTYPES
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-8}


def _rounded(args: dict, dtype: str) -> dict:
    return {k: cases.round_to(v, dtype) if cases.is_float_array(v) else v for k, v in args.items()}


def _torch_args(rounded: dict, dtype: str, grad: tuple[str, ...]) -> dict:
    return cases.torch_args(rounded, dtype, grad)


def _as_np(x) -> np.ndarray:
    return x.detach().to(torch.float64).numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=np.float64)


def _check(actual, expected, dtype: str, tol: Tol, what: str) -> None:
    """`actual` (refimpl) against the oracle's `expected` rounded to `dtype` (so an overflow is the
    same ±inf on both sides); no NaN anywhere."""
    a = _as_np(actual)
    assert not np.isnan(a).any(), f"{what}: NaN in {a}"
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf where both overflowed: equal
        e = cases.round_to(np.asarray(expected, dtype=np.float64), dtype)
        mismatch = compare(a, e, tol, what=what)
    assert mismatch is None, mismatch.describe()


def run_both(function: str, args: dict, kwargs: dict, dtype: str, *, tol: Tol | None = None,
             grad_tol: Tol | None = None, upstream: np.ndarray | float | None = None) -> tuple:
    """Oracle and refimpl on `args` rounded to `dtype`: values (and gradients w.r.t. the registry's
    gradient arguments for `upstream`, default all ones) must agree as `_check` says. Returns
    (refimpl values, refimpl gradients) as float64 arrays."""
    record = BY_FUNCTION[function]
    rounded = _rounded(args, dtype)
    with np.errstate(over="ignore"):
        expected = record.oracle(*rounded.values(), **kwargs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    targs = _torch_args(rounded, dtype, record.grad_args)
    out = getattr(refimpl, function)(*targs.values(), **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:  # a keep mask is bool whatever the input dtype
        assert o.dtype == (torch.bool if record.output == "mask" else TORCH[dtype]), f"{function}: output dtype {o.dtype} for {dtype} inputs"
    tol = tol or tolerance(record.spec_id, dtype, "value")
    for i, (a, e) in enumerate(zip(outs, expected)):
        _check(a, e, dtype, tol, f"{function}[{dtype}] value {i}")
    grads = ()
    if record.grad_args:
        shape = np.shape(expected[0])
        u = np.ones(shape) if upstream is None else upstream
        u = float(u) if record.output == "scalar" else cases.round_to(u, dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            expected_grads = record.oracle_grad(*rounded.values(), u, **kwargs)
        expected_grads = expected_grads if isinstance(expected_grads, tuple) else (expected_grads,)
        inputs = [targs[n] for n in record.grad_args]
        g = torch.as_tensor(u, dtype=outs[0].dtype)
        grads = torch.autograd.grad(outs[0], inputs, grad_outputs=g, allow_unused=True)
        grads = tuple(torch.zeros_like(t) if d is None else d for t, d in zip(inputs, grads))
        gtol = grad_tol or tolerance(record.spec_id, dtype, "grad")
        for name, a, e in zip(record.grad_args, grads, expected_grads):
            _check(a, e, dtype, gtol, f"{function}[{dtype}] grad[{name}]")
    return tuple(_as_np(o) for o in outs), tuple(_as_np(g) for g in grads)


def _logit_tol(dtype: str, scale: float, base: Tol) -> Tol:
    """log-softmax and entropy at |z/τ| ~ scale: a few ulps of `scale` (the log-sum-exp and the
    entropy's log Z − Σ p·z are differences of numbers of that size)."""
    return Tol(rtol=max(base.rtol, 8 * EPS[dtype]), atol=max(base.atol, 8 * EPS[dtype] * scale),
               reason=f"|logits/T| up to {scale:g}: a few ulps of it")


# ----------------------------------------------------------------------------------------------
# logits of ±1e4
# ----------------------------------------------------------------------------------------------

MASK = np.array([[0, 1, 1, 1, 0, 1], [0, 0, 1, 1, 1, 0], [0, 1, 0, 0, 0, 0]], dtype=bool)


def _huge_logits(seed: int, V: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    B, T = MASK.shape
    z = rng.choice([-1e4, 1e4, 0.0, 9999.5, -9999.0], size=(B, T, V)) + rng.normal(0, 1.0, size=(B, T, V))
    z[0, 1] = 1e4  # a row of equal extreme logits: uniform
    z[1, 2, :] = -1e4
    z[1, 2, 3] = 1e4  # one certain token; the others have log-prob -2e4
    ids = rng.integers(0, V, size=(B, T))
    ids[1, 3] = 0  # predicted by row 2: log-prob -2e4 / T
    return z, ids


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_logits_of_1e4(dtype, temperature):
    z, ids = _huge_logits(0)
    record = BY_FUNCTION["token_logprobs"]
    scale = 2e4 / temperature
    vt = _logit_tol(dtype, scale, tolerance(record.spec_id, dtype))
    gt = _logit_tol(dtype, 1.0, tolerance(record.spec_id, dtype, "grad"))
    (lp,), _ = run_both("token_logprobs", {"logits": z, "input_ids": ids, "mask": MASK},
                        {"temperature": temperature}, dtype, tol=vt, grad_tol=gt)
    assert np.all(np.isfinite(lp)) and np.all(lp <= 0)
    assert lp[1, 3] < -1e4  # -2e4/T, not -inf, not clamped
    (H,), _ = run_both("token_entropy", {"logits": z, "mask": MASK}, {"temperature": temperature}, dtype,
                       tol=_logit_tol(dtype, scale, tolerance("logprob.entropy", dtype)),
                       grad_tol=_logit_tol(dtype, scale, tolerance("logprob.entropy", dtype, "grad")))
    assert np.all(np.isfinite(H)) and np.all(H >= 0) and np.all(H <= np.log(7) + 1e-2)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fused_head_with_logits_of_1e4(dtype):
    """hidden @ weight.T reaching ±1e4 (bfloat16 is checked for finiteness below: its GEMM rounds each
    logit to 8 bits, an absolute error of ~40 at 1e4, by design)."""
    rng = np.random.default_rng(1)
    B, T = MASK.shape
    D, V = 4, 9
    hidden = rng.choice([-100.0, 100.0, 0.0], size=(B, T, D))
    weight = rng.choice([-25.0, 25.0], size=(V, D))
    ids = rng.integers(0, V, size=(B, T))
    scale = float(np.abs(hidden @ weight.T).max())
    assert scale >= 1e4
    for fn, extra in (("token_logprobs_from_hidden", {"input_ids": ids}), ("token_entropy_from_hidden", {})):
        record = BY_FUNCTION[fn]
        args = {"hidden": hidden, "weight": weight, **extra, "mask": MASK}
        (out,), _ = run_both(fn, args, {}, dtype, tol=_logit_tol(dtype, scale, tolerance(record.spec_id, dtype)),
                             grad_tol=_logit_tol(dtype, scale * 100.0, tolerance(record.spec_id, dtype, "grad")))
        # (dL/dweight = Σ dL/dz · hidden, |hidden| = 100: the logits' error times 100)
        assert np.all(np.isfinite(out))


def test_bfloat16_extreme_logits_stay_finite():
    z, ids = _huge_logits(2)
    t = torch.tensor(z, dtype=torch.bfloat16, requires_grad=True)
    lp = refimpl.token_logprobs(t, torch.tensor(ids), torch.tensor(MASK))
    H = refimpl.token_entropy(t, torch.tensor(MASK))
    (lp.sum() + H.sum()).backward()
    assert torch.isfinite(lp).all() and torch.isfinite(H).all() and torch.isfinite(t.grad).all()
    hidden = torch.tensor(np.random.default_rng(3).choice([-100.0, 100.0], size=(3, 6, 4)), dtype=torch.bfloat16)
    weight = torch.full((9, 4), 25.0, dtype=torch.bfloat16)
    out = refimpl.token_logprobs_from_hidden(hidden, weight, torch.tensor(ids).clamp(max=8), torch.tensor(MASK))
    assert torch.isfinite(out).all() and (out <= 0).all()


# ----------------------------------------------------------------------------------------------
# log-ratios of ±100 at valid and masked positions
# ----------------------------------------------------------------------------------------------

LR_MASK = np.array([[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 1]], dtype=bool)


def _log_ratio_inputs() -> tuple[np.ndarray, np.ndarray]:
    """logp and old/ref log-probs whose difference d is +100, -100, 0 or small at valid positions,
    and ±100 at masked positions. Row 1 has mean d = +100 (GSPO's sequence ratio overflows float32),
    row 2 mean d = -100."""
    logp = np.array([
        [-1.0, -0.5, -100.5, -2.0, -0.25, -3.0],
        [-4.0, -9.0, -0.5, -1.5, -2.0, -1.0],
        [-1.0, -101.0, -0.75, -2.0, -5.0, -0.5],
    ])
    d = np.array([
        [100.0, 100.0, -100.0, 0.0, 0.05, -100.0],
        [-100.0, 7.0, 100.0, 100.0, -100.0, 100.0],
        [100.0, -100.0, -100.0, 100.0, -100.0, -100.0],
    ])
    return logp, logp - d


def _masked_zeroed(args: dict) -> dict:
    """The same inputs with the masked positions of every [B, T] float array set to 0 (and the
    log-ratios there to 0): the outputs must not change at all."""
    out = dict(args)
    for k, v in args.items():
        if cases.is_float_array(v) and v.shape == LR_MASK.shape:
            out[k] = np.where(LR_MASK, v, 0.0)
    return out


def _same(a: tuple, b: tuple) -> bool:
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


# the advantage kinds a record's `Extremes.log_ratio_bounded` is asked about
ADVANTAGES = {
    "positive": np.array([1.0, 2.0, 0.5]),
    "negative": np.array([-1.0, -2.0, -0.5]),
    "zero": np.zeros(3),
    "mixed [B, T]": np.array([[0.0, 1.0, -1.0, 0.0, 2.0, 0.0], [0.0, 0.0, -1.0, 1.0, 0.0, 0.0],
                              [0.0, 0.0, 1.0, 0.0, 0.0, -3.0]]),
}
LOG_RATIO_ARGS = ("logp", "old_logp", "advantages", "mask")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("function", [r.function for r in RECORDS if r.extremes.log_ratio_keywords])
def test_policy_losses_at_log_ratios_of_100(function, dtype):
    """Every record with `extremes.log_ratio_keywords`, at each of them and each kind of advantages: what
    `Extremes` says (no NaN, masked ±100 change nothing, A = 0 gives 0, finite where `log_ratio_bounded`)."""
    record = BY_FUNCTION[function]
    extremes = record.extremes
    assert record.arg_names == LOG_RATIO_ARGS, f"{function}: log-ratio extremes need the signature {LOG_RATIO_ARGS}"
    logp, old = _log_ratio_inputs()
    for adv_name, adv in ADVANTAGES.items():
        for kw in extremes.log_ratio_keywords:
            args = {"logp": logp, "old_logp": old, "advantages": adv, "mask": LR_MASK}
            values, grads = run_both(function, args, kw, dtype)
            again = run_both(function, _masked_zeroed(args), kw, dtype)
            assert _same(values + grads, again[0] + again[1]), f"{function} {kw}: masked ±100 changed something"
            everything = np.concatenate([x.ravel() for x in values + grads])
            assert not np.isnan(everything).any()
            assert np.all(values[0][~LR_MASK] == 0)
            if adv_name == "zero" and extremes.zero_advantage_vanishes:  # an overflowing ratio times A = 0 is 0
                assert np.all(everything == 0), f"{function} {kw}: A = 0 gave {everything}"
            if extremes.log_ratio_bounded(kw, adv_name, dtype):
                assert np.all(np.isfinite(everything)), f"{function} {kw} A {adv_name}: {everything}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_cov_mask_at_log_ratios_of_100(dtype):
    """Ratios e^±100 (inf in float32) and log-probs near -100 (covariances in the hundreds): the keep
    mask equals the oracle's on the same rounded inputs (A > 0 with r = inf is on the clipped branch,
    never a NaN decision), in a wide window that makes every unclipped token a candidate and in the
    default one; ±100 at masked positions change nothing."""
    logp, old = _log_ratio_inputs()
    draws = np.linspace(1.0, 0.0, LR_MASK.size).reshape(LR_MASK.shape)
    for adv_name, adv in ADVANTAGES.items():
        for kw in ({}, {"fraction": 1.0, "cov_low": -1e6, "cov_high": 1e6}):
            args = {"logp": logp, "old_logp": old, "advantages": adv, "mask": LR_MASK, "draws": draws}
            keep = []
            for a in (args, _masked_zeroed(args)):
                rounded = _rounded(a, dtype)
                expected = oracle.clip_cov_mask(*rounded.values(), **kw)
                got = refimpl.clip_cov_mask(*_torch_args(rounded, dtype, ()).values(), **kw)
                assert got.dtype == torch.bool and np.array_equal(got.numpy(), expected), f"{kw} A {adv_name}"
                keep.append(expected)
            assert np.array_equal(*keep), f"{kw} A {adv_name}: masked ±100 changed the mask"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_kl_at_log_ratios_of_100(estimator, dtype):
    logp, ref = _log_ratio_inputs()
    u = np.where(LR_MASK, 1.0, 0.0)
    u[0, 1] = 0.0  # a zero upstream at an overflowing k3 gradient (d = +100 there: e^(-d) fine) ...
    u[0, 2] = 0.0  # ... and at d = -100, where 1 - e^(100) overflows float32: 0, not NaN
    for kw in ({}, {"log_ratio_clamp": 20.0}, {"clamp": 10.0}, {"log_ratio_clamp": 1.0, "clamp": 0.5}):
        args = {"logp": logp, "ref_logp": ref, "mask": LR_MASK}
        (k,), (g,) = run_both("kl_penalty", args, {"estimator": estimator, **kw}, dtype, upstream=u)
        again = run_both("kl_penalty", _masked_zeroed(args), {"estimator": estimator, **kw}, dtype, upstream=u)
        assert _same((k, g), again[0] + again[1])
        assert g[0, 2] == 0 and g[0, 1] == 0
        d_minus_100 = LR_MASK & (logp - ref < -99)
        if kw or estimator != "k3" or dtype == "float64":
            assert np.all(np.isfinite(k)) and np.all(np.isfinite(g)), (kw, k, g)
        else:  # canonical k3 in float32/bfloat16: e^100 − 101 is beyond the range: +inf, gradient −inf
            assert np.all(k[d_minus_100] == np.inf) and np.all(np.isfinite(k[~d_minus_100]))
            assert np.all(g[d_minus_100 & (u != 0)] == -np.inf)
        if dtype == "float64" and not kw and estimator == "k3":
            assert np.allclose(k[d_minus_100], np.exp(100.0) - 101.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("gradient", ["estimator", "straight_through", "unbiased", "bias_corrected"])
@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "abs"])
def test_kl_loss_term_at_log_ratios_of_100(estimator, gradient, dtype):
    """kl.loss with d = logp - ref_logp and logp - old_logp of ±100 (ratios e^±100, beyond float32):
    never NaN, masked ±100 change nothing, oracle = refimpl; finite wherever the equations are (float64;
    in float32/bfloat16 the forms without a ratio once k3 is clamped or another estimator is used)."""
    logp, ref = _log_ratio_inputs()
    old = logp - np.roll(logp - ref, 1, axis=1)  # other log-ratios to the sampler: r = e^±100, e^0, e^0.05, e^7
    for kw in ({}, {"log_ratio_clamp": 20.0, "clamp": 10.0}, {"weight_cap": None}):
        args = {"logp": logp, "ref_logp": ref, "mask": LR_MASK, "old_logp": old}
        keywords = {"estimator": estimator, "gradient": gradient, **kw}
        values, grads = run_both("kl_loss_term", args, keywords, dtype)
        again = run_both("kl_loss_term", _masked_zeroed(args), keywords, dtype)
        assert _same(values + grads, again[0] + again[1]), f"{keywords}: masked ±100 changed something"
        everything = np.concatenate([x.ravel() for x in values + grads])
        assert not np.isnan(everything).any(), keywords
        finite = dtype == "float64" or (gradient != "bias_corrected" and "weight_cap" not in kw
                                        and (estimator != "k3" or "clamp" in kw))
        if finite:
            assert np.all(np.isfinite(everything)), (keywords, everything)
    if estimator == "k3" and gradient == "bias_corrected":  # r near e^0.1: K = e^100 - 101 overflows below
        args = {"logp": logp, "ref_logp": ref, "mask": LR_MASK, "old_logp": logp - 0.1}  # float64, the gradient r d does not
        values, (g,) = run_both("kl_loss_term", args, {"estimator": "k3", "gradient": "bias_corrected"}, dtype)
        lp, rf, od = (cases.round_to(x, dtype) for x in (logp, ref, logp - 0.1))  # what both implementations saw
        overflowing = values[0][LR_MASK & (lp - rf < -99)]  # K r = (e^100 - 101) e^0.1: beyond float32
        assert np.all(np.isfinite(overflowing)) if dtype == "float64" else np.all(overflowing == np.inf)
        np.testing.assert_allclose(g, np.where(LR_MASK, np.exp(lp - od) * (lp - rf), 0.0), rtol=1e-2 if dtype == "bfloat16" else 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rlhf_rewards_and_policy_loss_at_log_ratios_of_100(dtype):
    logp, ref = _log_ratio_inputs()
    scores = np.array([1.0, -2.0, 0.5])
    for estimator in ("k1", "k2", "k3"):
        for kl_coef in (0.0, 0.05):
            args = {"scores": scores, "logp": logp, "ref_logp": ref, "mask": LR_MASK}
            (R,), _ = run_both("rlhf_token_rewards", args, {"kl_coef": kl_coef, "estimator": estimator}, dtype)
            assert not np.isnan(R).any()
            if kl_coef == 0.0:  # 0 · inf := 0: only the scores remain, exactly
                assert np.count_nonzero(R) <= 3 and np.isclose(R.sum(), cases.round_to(scores, dtype).sum())
    for old, adv, dual_clip in ((logp, "positive", 3.0), (ref, "negative", None), (ref, "negative", 3.0)):
        for estimator in ("k1", "k2", "k3"):
            for mode in ("token_mean", "seq_mean_token_mean", "token_sum"):
                for kl_coef in (0.0, 0.04):
                    args = {"logp": logp, "old_logp": old, "ref_logp": ref, "advantages": ADVANTAGES[adv],
                            "mask": LR_MASK}
                    kw = {"kl_coef": kl_coef, "kl_estimator": estimator, "mode": mode, "dual_clip": dual_clip}
                    (L,), (g,) = run_both("policy_loss", args, kw, dtype)
                    overflows = dtype != "float64" and (
                        (kl_coef and estimator == "k3") or (dual_clip is None and adv == "negative"))
                    if overflows:  # a k3 term or an unclipped ratio is e^100: +inf in float32, like the oracle rounded
                        assert L == np.inf and not np.isnan(g).any()
                    else:
                        assert np.isfinite(L) and np.all(np.isfinite(g))


# ----------------------------------------------------------------------------------------------
# reward shaping (spec v1.1): rewards near the dtype's range, lengths of 2^40
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_shaped_rewards_at_the_edge_of_the_range(dtype):
    """Rewards of ±3e38 and ±1e30: the clip brings them back exactly; a scale of the largest ones
    overflows to ±inf as the oracle's value rounded (never NaN), and the clip then bounds that too."""
    big = float(torch.finfo(TORCH[dtype]).max) if dtype != "float64" else 1e308
    r = np.array([big, -big, 1e30, -1e30, 0.5])
    t = np.array([True, True, False, True, False])
    for kw in ({"clip_low": -10.0, "clip_high": 10.0}, {"truncated_scale": 0.5}, {"truncated_scale": 4.0},
               {"truncated_scale": 4.0, "clip_low": -20.0, "clip_high": 20.0}, {"truncated_value": -1e30}):
        (out,), _ = run_both("shaped_rewards", {"rewards": r, "truncated": t}, kw, dtype)
        assert not np.isnan(out).any(), kw
        if "clip_low" in kw:
            assert np.all(np.abs(out) <= kw["clip_high"]), (kw, out)


def test_overlong_penalty_at_huge_lengths():
    """Lengths up to 2^40 with budgets up to 2^31: finite, float64, the oracle's values exactly."""
    lengths = np.array([0, 2**30, 2**31, 2**31 + 1, 2**40], dtype=np.int64)
    for kw in ({"max_length": 2**31, "buffer": 2**30}, {"max_length": 2**31, "buffer": 2**30, "beyond": "linear"},
               {"max_length": 2**31, "buffer": 0, "factor": 1e300}):
        expected = oracle.overlong_penalty(lengths, **kw)
        out = refimpl.overlong_penalty(torch.from_numpy(lengths), **kw)
        assert out.dtype == torch.float64 and np.all(np.isfinite(out.numpy()))
        np.testing.assert_array_equal(out.numpy(), expected)


# ----------------------------------------------------------------------------------------------
# groups of 10⁶ identical rewards
# ----------------------------------------------------------------------------------------------

N_IDENTICAL = 10**6


def _identical_checks(value: float, dtype: str, n: int, *, full: bool = True) -> None:
    r = torch.full((n,), value, dtype=TORCH[dtype])
    grid = [(s, k, e) for s in ("group", "batch", "none") for k in (0, 1) for e in (0.0, 1e-6)]
    for scale, std_ddof, eps in grid if full else [("group", 1, 0.0), ("batch", 0, 0.0), ("none", 1, 1e-6)]:
        a = refimpl.grpo_advantages(r, n, scale=scale, std_ddof=std_ddof, eps=eps)
        assert a.dtype == r.dtype and torch.count_nonzero(a) == 0, (scale, std_ddof, eps, a[:4])
    assert torch.count_nonzero(refimpl.grpo_advantages(r, n // 2)) == 0
    assert torch.count_nonzero(refimpl.rloo_advantages(r, n)) == 0
    assert torch.count_nonzero(refimpl.reinforce_advantages(r, baseline="batch_mean")) == 0
    x = torch.full((1, n + 1), value, dtype=TORCH[dtype])
    m = torch.ones(1, n + 1, dtype=torch.bool)
    m[0, 0] = False
    for eps in (0.0, 1e-8):
        assert torch.count_nonzero(refimpl.whiten(x, m, eps=eps)) == 0
        assert torch.equal(refimpl.whiten(x, m, shift_mean=False, eps=eps)[0, 1:], x[0, 1:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_million_identical_rewards_give_exactly_zero(dtype):
    _identical_checks(0.7, dtype, N_IDENTICAL, full=False)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [0.0, 1.0, -3.3, 1e4 + 0.1, 1e30])
def test_a_million_identical_rewards_many_values(value, dtype):
    _identical_checks(value, dtype, N_IDENTICAL)


@pytest.mark.parametrize("n", [10**5, pytest.param(N_IDENTICAL, marks=pytest.mark.slow)])
def test_oracle_on_identical_rewards_is_exactly_zero(n):
    r = np.full(n, 0.7)
    for scale in ("group", "batch", "none"):
        assert np.count_nonzero(oracle.grpo_advantages(r, n, scale=scale, eps=0.0)) == 0
    x = np.full((1, n + 1), 0.7)
    m = np.ones((1, n + 1), dtype=bool)
    m[0, 0] = False
    assert np.count_nonzero(oracle.whiten(x, m, eps=0.0)) == 0  # was O(1): a summation residue / its std
    assert np.array_equal(oracle.whiten(x, m, shift_mean=False)[0, 1:], x[0, 1:])
    assert np.count_nonzero(oracle.rloo_advantages(np.full(6, 0.7), 6)) == 0  # (O(G²) literal loops)


def _estimator_calls(lib, r, n: int):
    """spec v1.1 advantage estimators on n identical rewards (one group of n, or of n/2), each call paired
    with what must be all zero."""
    mask = np.zeros((n, 3), dtype=bool) if lib is np else torch.zeros((n, 3), dtype=torch.bool)
    mask[:, 1:] = True
    mod = oracle if lib is np else refimpl
    stack = np.stack if lib is np else torch.stack
    # the optimal token baseline: the reward on each row's last token, a different path weight W per row
    zero = r * 0
    old_logp = -0.1 - (lib.arange(n) % 5) / 10.0
    otb = (stack([zero, zero, r], 1), mask, n, stack([old_logp, old_logp, 2 * old_logp], 1), stack([zero + 0.5] * 3, 1))
    return {
        **{f"optimal_token_baseline[{align}]": mod.optimal_token_baseline_advantages(*otb, align=align)[0]
           for align in ("position", "valid_token")},
        "reinforce_pp_baseline[token]": mod.reinforce_pp_baseline_advantages(r, n, mask, eps=0.0),
        "reinforce_pp_baseline[sequence]": mod.reinforce_pp_baseline_advantages(r, n // 2, mask, level="sequence", eps=0.0),
        "opo": mod.opo_advantages(r, n, mask),
        "grpo_passk": mod.grpo_passk_advantages(r, n // 2, eps=0.0),
        "gdpo": mod.gdpo_advantages(stack([r, r], 1), n, eps=0.0),
        "maxrl": mod.maxrl_advantages(r, n // 2, eps=0.0),
        "gpg": mod.gpg_advantages(r, n),
    }


@pytest.mark.parametrize("dtype", DTYPES)
def test_estimators_on_a_million_identical_rewards(dtype):
    """Spec v1.1 estimators: an all-equal group (and a batch of equal values) is exactly 0, with eps 0 too."""
    r = torch.full((N_IDENTICAL,), 0.7, dtype=TORCH[dtype])
    for name, a in _estimator_calls(torch, r, N_IDENTICAL).items():
        assert torch.count_nonzero(a) == 0, (name, a.flatten()[:4])


def test_oracle_estimators_on_identical_rewards():
    for name, a in _estimator_calls(np, np.full(10**4, 0.7), 10**4).items():
        assert np.count_nonzero(a) == 0, name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("align", ["position", "valid_token"])
def test_optimal_token_baseline_at_extreme_probabilities_and_weights(align, dtype):
    """One group: row 0 certain (π = 1, Σπ² = 1: w = 0) with a weight of 1e30, row 1 with π = e^-100
    (w = 1 + Σπ²) weighted 1e30 (w·ρ² = 1.3e60, computed in float64), row 2 with weight 1e-30; ±1e30 and
    log-ratios of -100 at masked positions. The baseline is a weighted mean of the present returns: row 1's
    return where it is present, finite everywhere, the oracle's values."""
    m = np.array([[0, 1, 1, 0], [0, 1, 1, 1], [0, 1, 0, 1]], dtype=bool)
    args = {"token_rewards": np.where(m, [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.5]], 1e30),
            "mask": m, "group_size": 3,
            "old_logp": np.where(m, [[0.0] * 4, [-100.0] * 4, [-0.5] * 4], -100.0),
            "sum_pi_squared": np.where(m, [[1.0] * 4, [0.3] * 4, [0.5] * 4], -1e30),
            "is_weights": np.where(m, [[1e30] * 4, [1e30] * 4, [1e-30] * 4], 1e30)}
    (adv, ret), _ = run_both("optimal_token_baseline_advantages", args, {"align": align, "zero_tail": False}, dtype)
    assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret))
    assert np.all(adv[1][m[1]] == 0)  # row 1 dominates every step it is present at: its own return


# ----------------------------------------------------------------------------------------------
# long sequences: T = 32768 (slow) and T = 4096
# ----------------------------------------------------------------------------------------------


def _long_case(T: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    B, V = 2, 11
    mask = np.zeros((B, T), dtype=bool)
    mask[0, T // 8 :] = True  # a long completion
    mask[1, 1 : T // 2] = True  # right padding
    mask[1, rng.integers(2, T // 2, size=T // 64)] = False  # tool tokens inside
    logp = -np.abs(rng.normal(0, 1.5, size=(B, T)))
    return {
        "mask": mask,
        "logits": np.clip(rng.normal(0, 8.0, size=(B, T, V)), -30, 30),
        "ids": rng.integers(0, V, size=(B, T)),
        "logp": logp,
        "old": logp + rng.normal(0, 0.3, size=(B, T)),
        "values": rng.normal(0, 2.0, size=(B, T)),
        "rewards": rng.normal(0, 0.1, size=(B, T)),
        "adv": rng.normal(0, 1.0, size=(B, T)),
    }


def _long_checks(T: int, dtypes: tuple[str, ...]) -> None:
    c = _long_case(T)
    m = c["mask"]
    for dtype in dtypes:
        run_both("token_logprobs", {"logits": c["logits"], "input_ids": c["ids"], "mask": m}, {"temperature": 0.7}, dtype)
        (adv, ret), _ = run_both("gae", {"token_rewards": c["rewards"], "values": c["values"], "mask": m},
                                 {"gamma": 1.0, "lam": 0.95}, dtype,
                                 tol=Tol(rtol=1e-9 if dtype == "float64" else 1e-4, atol=1e-9 if dtype == "float64" else 2e-3,
                                         reason=f"{T} steps of the GAE recursion"))
        assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret))
        run_both("ppo_token_loss", {"logp": c["logp"], "old_logp": c["old"], "advantages": c["adv"], "mask": m}, {}, dtype)
        for mode in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "token_sum"):
            kw = {"mode": mode, "norm_length": float(T)} if mode.endswith("norm") else {"mode": mode}
            run_both("aggregate", {"token_loss": c["adv"], "mask": m}, kw, dtype,
                     tol=Tol(rtol=1e-9 if dtype == "float64" else 1e-4, atol=1e-9 if dtype == "float64" else 1e-3,
                             reason=f"a sum of {T} terms"))


def test_long_sequences_t4096():
    _long_checks(4096, ("float64", "float32"))


@pytest.mark.slow
def test_long_sequences_t32768():
    _long_checks(32768, ("float64", "float32"))


# ----------------------------------------------------------------------------------------------
# spec v1.1 entropy terms and controllers: long batches with ties, a pool beyond torch.quantile's
# 2**24 elements, controller ratios that overflow
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_entropy_terms_on_a_long_batch(dtype):
    """T = 4096: entropies on a 1/16 grid (ties everywhere, exact in every dtype) and a few huge ones
    (1e4): the top-ρ mask equals the oracle's for every ρ, the bonus (a sum of 4096 terms) too."""
    c = _long_case(4096)
    m = c["mask"]
    H = np.round(np.abs(c["adv"]) * 16.0) / 16.0
    H[0, -3:] = 1e4
    for rho in (0.0, 0.2, 0.5, 1.0):
        (keep,), _ = run_both("entropy_top_mask", {"entropy": H, "mask": m}, {"rho": rho}, dtype)
        assert keep[m].any() and not keep[~m].any()
    for mode in ("token_mean", "seq_mean_token_mean"):
        run_both("entropy_bonus", {"entropy": H, "mask": m}, {"entropy_coef": 0.01, "mode": mode}, dtype,
                 tol=Tol(rtol=1e-9 if dtype == "float64" else 1e-4, atol=1e-9 if dtype == "float64" else 1e-3,
                         reason="a sum of 4096 terms"))


def test_entropy_top_mask_pool_beyond_the_torch_quantile_limit():
    """A pool of 2**24 + 1 entropies (more than torch.quantile accepts): k/2**24 for k = 0..2**24, so
    with ρ = 0.5 the threshold is the order statistic 2**23/2**24 = 0.5 exactly; the part's 0.25 is
    dropped, its 0.5 (a tie) and 0.75 kept."""
    n = 2**24
    pool = torch.arange(n + 1, dtype=torch.float64) / n
    with pytest.raises(RuntimeError, match="too large"):  # what TRL's get_high_entropy_mask calls
        torch.quantile(pool.float(), 0.5)
    H = torch.tensor([[0.0, 0.25, 0.5, 0.75]])
    m = torch.tensor([[False, True, True, True]])
    keep = refimpl.entropy_top_mask(H, m, rho=0.5, pooled_entropy=pool)
    assert keep.tolist() == [[False, False, True, True]]


def test_controllers_at_extreme_ratios():
    """KL / target overflowing (1e10 / 1e-300 = inf) clips to +0.2; an entropy of +inf or 1e308; a
    coefficient of 1e308: finite, and the oracle's."""
    for kl, target in ((1e10, 1e-300), (-1e10, 1e-300), (1e308, 0.5)):
        args = {"kl_coef": 0.1, "current_kl": kl, "n_steps": 100}
        expected = oracle.kl_controller_update(*args.values(), target=target, horizon=1000)
        got = refimpl.kl_controller_update(*args.values(), target=target, horizon=1000)
        assert np.isfinite(got) and got == pytest.approx(float(expected), rel=1e-12)
        assert got == pytest.approx(0.1 * (1 + (0.2 if kl > 0 else -0.2) * 0.1), rel=1e-12)
    assert refimpl.entropy_coef_update(1e308, 1e308, delta=1e308) == oracle.entropy_coef_update(1e308, 1e308, delta=1e308) == 0.0
    assert refimpl.entropy_coef_applied(1e308, float("inf")) == oracle.entropy_coef_applied(1e308, float("inf")) == 0.0
