"""Records of the KL estimators and of the KL term as it enters a loss (kl.estimator, spec v1.1 kl.loss)."""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.records.builders import Catalogue, build, f64, inf, mask, nan
from conformance.records.conditioning import far
from conformance.records.inputs import Inputs, batch_dims, logprobs_like, nearby, ragged_mask
from conformance.records.keywords import (
    CLAMP, KL_ESTIMATOR, KL_GRADIENT, KL_LOSS_ESTIMATOR, LOG_RATIO_CLAMP, WEIGHT_CAP,
)
from conformance.records.record import Arg, Quantity

_golden = Catalogue()
add, entries = _golden.add, _golden.of


# ---------------------------------------------------------------------------------------------------
# kl_penalty (kl.estimator)
# ---------------------------------------------------------------------------------------------------


def _kl_penalty_inputs(rng: np.random.Generator) -> Inputs:
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return (
        {"logp": logp, "ref_logp": nearby(rng, logp), "mask": mask},
        {
            "estimator": str(rng.choice(["k1", "k2", "k3"])),
            "log_ratio_clamp": rng.choice([None, 20.0, 1.0]),
            "clamp": rng.choice([None, 10.0, 0.5]),
        },
    )


def _kl_conditioned(args: dict[str, Any], kw: dict[str, Any], default_estimator: str = "k1") -> bool:
    """The KL estimators' clamp kinks: d off ±log_ratio_clamp and the estimate off ±clamp. abs's kink at
    d = 0 needs none: the sign of a difference of two rounded inputs is exact."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in hostile cases: not near a kink
        d = (args["logp"] - args["ref_logp"])[args["mask"]]
    if kw.get("log_ratio_clamp") is not None:
        c = kw["log_ratio_clamp"]
        if not far(d, [-c, c]):
            return False
        d = np.clip(d, -c, c)
    if kw.get("clamp") is not None:
        est = kw.get("estimator", default_estimator)
        with np.errstate(over="ignore"):
            k = {"k1": d, "k2": d * d / 2, "k3": np.expm1(-d) + d, "abs": np.abs(d)}[est]
        return far(k, [-kw["clamp"], kw["clamp"]])
    return True


KL_LOGP = [-1.0, -0.2, -1.4, -0.5, -3.0, -0.75]
KL_REF = [-1.0, -0.5, -1.0, -2.0, -0.5, -0.8]  # d = [_, 0.3, -0.4, 1.5, -2.5, 0.05]
KL_M = mask(".xxxxx")


def _kl(logp, ref, m, **kw):
    return lambda: build("kl_penalty", {"logp": f64(logp), "ref_logp": f64(ref), "mask": m}, kw)


_D = np.array([0.3, -0.4, 1.5, -2.5, 0.05])
_K = {"k1": _D, "k2": _D**2 / 2, "k3": np.exp(-_D) - 1 + _D}
_DK = {"k1": np.ones(5), "k2": _D, "k3": 1 - np.exp(-_D)}


def _pad1(values: Any) -> np.ndarray:
    return f64([[0.0, *values]])


for _est in ("k1", "k2", "k3"):
    add(f"kl_penalty/{_est}",
        f"{_est} without clamps on log-ratios from -2.5 to 1.5",
        _kl([KL_LOGP], [KL_REF], KL_M, estimator=_est),
        expect=_pad1(_K[_est]), grad_factor=_pad1(_DK[_est]))
    _kc = np.clip(_K[_est], -1.0, 1.0)
    add(f"kl_penalty/{_est}-clamp",
        f"{_est} with the output clamped to +-1: clamped tokens pass no gradient",
        _kl([KL_LOGP], [KL_REF], KL_M, estimator=_est, clamp=1.0),
        expect=_pad1(_kc), grad_factor=_pad1(np.where(np.abs(_K[_est]) < 1.0, _DK[_est], 0.0)))
    _dc = np.clip(_D, -1.0, 1.0)
    _kd = {"k1": _dc, "k2": _dc**2 / 2, "k3": np.exp(-_dc) - 1 + _dc}[_est]
    _dkd = {"k1": np.ones(5), "k2": _dc, "k3": 1 - np.exp(-_dc)}[_est]
    add(f"kl_penalty/{_est}-log-ratio-clamp",
        f"{_est} with the log-ratio clamped to +-1 first: clamped tokens pass no gradient",
        _kl([KL_LOGP], [KL_REF], KL_M, estimator=_est, log_ratio_clamp=1.0),
        expect=_pad1(_kd), grad_factor=_pad1(np.where(np.abs(_D) < 1.0, _dkd, 0.0)))

add("kl_penalty/k3-both-clamps",
    "k3 with the log-ratio clamped to +-2 and the output to +-0.5",
    _kl([KL_LOGP], [KL_REF], KL_M, estimator="k3", log_ratio_clamp=2.0, clamp=0.5))
add("kl_penalty/on-policy",
    "logp == ref_logp: k3 is 0 with a zero gradient",
    _kl([KL_LOGP], [KL_LOGP], KL_M, estimator="k3"),
    expect=np.zeros((1, 6)), grad_factor=np.zeros((1, 6)))
add("kl_penalty/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions change nothing",
    _kl([[nan, -0.2, -1.4, inf, -3.0, 1e30]], [[-inf, -0.5, -1.0, nan, -0.5, -0.8]],
        mask(".xx.x."), estimator="k3"))
add("kl_penalty/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _kl([KL_LOGP, KL_LOGP], [KL_REF, KL_REF], mask(".xxxxx", "......"), estimator="k2"))

add("kl_penalty/k3-large-log-ratios",
    "k3 at log-ratios -30 and 30 without clamps: finite in float64 (e^30 - 31 and about 29)",
    _kl([[-1.0, -31.0, -0.5]], [[-1.0, -1.0, -30.5]], mask(".xx"), estimator="k3"),
    expect=f64([[0.0, np.exp(30.0) - 31.0, np.exp(-30.0) + 29.0]]),
    grad_factor=f64([[0.0, 1.0 - np.exp(30.0), 1.0 - np.exp(-30.0)]]))


KL_PENALTY = Quantity(
    "kl_penalty",
    "kl.estimator",
    returns="`[B,T]`",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("ref_logp", "[B, T]", "token"),
        Arg("mask", "[B, T] bool", "mask"),
    ),
    keywords=(KL_ESTIMATOR("k1"), LOG_RATIO_CLAMP(None), CLAMP(None)),
    inputs=_kl_penalty_inputs,
    invariants=("mask", "on_policy"),
    question=("estimator",),
    variants={"log_ratio_clamp": (None, 20.0, 40.0), "clamp": (None, 10.0)},
    well_conditioned=_kl_conditioned,
    golden=entries("kl_penalty"),
    golden_seeds=(1, 2, 3),
    # d = 25 (beyond the +-20 log-ratio clamp) and d = -3 (k3 = 16 > the +-10 output clamp).
    preset_inputs=lambda preset, **kw: _kl(
        [[-1.0, -0.5, -3.5, -0.2, -1.4, -0.5]], [[-1.0, -25.5, -0.5, -0.5, -1.0, -2.0]], KL_M, **kw),
)


# ---------------------------------------------------------------------------------------------------
# kl_loss_term (kl.loss)
# ---------------------------------------------------------------------------------------------------


def _kl_loss_term_inputs(rng: np.random.Generator) -> Inputs:
    """kl.loss (spec v1.1): reference and old log-probs near or far (ratios beyond the weight cap),
    every estimator and gradient form; old_logp always given, so one case can be judged under each form."""
    B, T = batch_dims(rng)
    mask = ragged_mask(rng, B, T)
    logp = logprobs_like(rng, (B, T))
    return (
        {"logp": logp, "ref_logp": nearby(rng, logp), "mask": mask, "old_logp": nearby(rng, logp)},
        {
            "estimator": str(rng.choice(["k1", "k2", "k3", "abs"])),
            "gradient": str(rng.choice(["estimator", "straight_through", "unbiased", "bias_corrected"])),
            "log_ratio_clamp": rng.choice([None, 20.0, 1.0]),
            "clamp": rng.choice([None, 10.0, 0.5]),
            "weight_cap": rng.choice([10.0, None, 2.0]),
        },
    )


def _kl_loss_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """kl.estimator's clamp kinks where the gradient reads them ("estimator", "bias_corrected"); the
    straight-through and unbiased gradients w·d are continuous (their clamps act on the value only, and
    w = min(r, cap) is a constant factor)."""
    if kw.get("gradient", "estimator") in ("straight_through", "unbiased"):
        return True
    return _kl_conditioned(args, kw, default_estimator="k3")


KLL_D = np.array([-1.0, 0.3, 1.5, 0.0])
KLL_LOG_R = np.array([np.log(2.0), -0.5, 3.0, 0.2])
KLL_LOGP = np.array([-1.0, -1.5, -0.4, -2.0, -0.7])
KLL_M = mask(".xxxx")


def _kll(logp, ref, m, old=None, **kw):
    return lambda: build("kl_loss_term", {"logp": f64(logp), "ref_logp": f64(ref), "mask": m,
                                          "old_logp": None if old is None else f64(old)}, kw)


def _kll_row(d=KLL_D, log_r=KLL_LOG_R, with_old=True, **kw):
    """The row above: logp = KLL_LOGP, ref = logp - d, old = logp - log r (masked position 0: all -1)."""
    ref = KLL_LOGP - _pad1(d)[0]
    old = KLL_LOGP - _pad1(log_r)[0] if with_old else None
    return _kll([KLL_LOGP], [ref], KLL_M, None if old is None else [old], **kw)


_R = np.exp(KLL_LOG_R)
_W = np.minimum(_R, 10.0)
_KL_K = {"k1": KLL_D, "k2": KLL_D**2 / 2, "k3": np.exp(-KLL_D) - 1 + KLL_D, "abs": np.abs(KLL_D)}
_KL_DK = {"k1": np.ones(4), "k2": KLL_D, "k3": 1 - np.exp(-KLL_D), "abs": np.sign(KLL_D)}  # sgn(0) = 0


def _kl_form(est: str, gradient: str) -> tuple[np.ndarray, np.ndarray]:
    """(value, gradient factor) of the row, worked out from the equations of kl.loss.md."""
    K, dK = _KL_K[est], _KL_DK[est]
    if gradient == "estimator":
        return K, dK
    if gradient == "straight_through":
        return K, KLL_D
    if gradient == "unbiased":
        return K, _W * KLL_D
    # bias_corrected: K r, r (dK + K); for k3 dK + K = (1 - e^-d) + (e^-d - 1 + d) = d
    return K * _R, _R * (KLL_D if est == "k3" else dK + K)


for _est in ("k1", "k2", "k3", "abs"):
    for _grad in ("estimator", "straight_through", "unbiased", "bias_corrected"):
        _value, _factor = _kl_form(_est, _grad)
        add(f"kl_loss_term/{_est}-{_grad.replace('_', '-')}",
            f"{_est} with the {_grad.replace('_', '-')} gradient: d = [-1, 0.3, 1.5, 0], r = [2, e^-0.5, e^3, e^0.2]",
            _kll_row(estimator=_est, gradient=_grad), expect=_pad1(_value), grad_factor=_pad1(_factor))

add("kl_loss_term/straight-through-ignores-clamps",
    "k3 straight-through with log_ratio_clamp=1 and clamp=0.5: the value is clamped, the gradient is the raw d",
    _kll_row(estimator="k3", gradient="straight_through", log_ratio_clamp=1.0, clamp=0.5, with_old=False),
    expect=_pad1(np.clip(np.exp(-np.clip(KLL_D, -1, 1)) - 1 + np.clip(KLL_D, -1, 1), -0.5, 0.5)),
    grad_factor=_pad1(KLL_D))
add("kl_loss_term/unbiased-ignores-clamps",
    "k1 unbiased with clamp=0.5: the value is clamped to +-0.5, the gradient is w d with the raw d",
    _kll_row(estimator="k1", gradient="unbiased", clamp=0.5),
    expect=_pad1(np.clip(KLL_D, -0.5, 0.5)), grad_factor=_pad1(_W * KLL_D))
add("kl_loss_term/unbiased-weight-cap-2",
    "weight_cap=2: w = min(r, 2) = [2, e^-0.5, 2, e^0.2]",
    _kll_row(estimator="k3", gradient="unbiased", weight_cap=2.0),
    expect=_pad1(_KL_K["k3"]), grad_factor=_pad1(np.minimum(_R, 2.0) * KLL_D))
add("kl_loss_term/unbiased-uncapped",
    "weight_cap=None: w = r, e^3 = 20.1 included; the k3 gradient then equals the bias-corrected one (r d)",
    _kll_row(estimator="k3", gradient="unbiased", weight_cap=None),
    expect=_pad1(_KL_K["k3"]), grad_factor=_pad1(_R * KLL_D))
add("kl_loss_term/bias-corrected-clamped",
    "k3 bias-corrected with clamp=0.5: a clamped estimate is a constant, its gradient r K (not r d)",
    _kll_row(estimator="k3", gradient="bias_corrected", clamp=0.5),
    expect=_pad1(np.clip(_KL_K["k3"], -0.5, 0.5) * _R),
    grad_factor=_pad1(_R * np.where(np.abs(_KL_K["k3"]) <= 0.5, KLL_D, np.clip(_KL_K["k3"], -0.5, 0.5))))
add("kl_loss_term/bias-corrected-log-ratio-clamp",
    "k1 bias-corrected with log_ratio_clamp=1: d = 1.5 is clipped (K = 1, a constant: gradient r K)",
    _kll_row(estimator="k1", gradient="bias_corrected", log_ratio_clamp=1.0),
    expect=_pad1(np.clip(KLL_D, -1, 1) * _R),
    grad_factor=_pad1(_R * np.where(np.abs(KLL_D) <= 1.0, 1.0 + KLL_D, np.clip(KLL_D, -1, 1))))
add("kl_loss_term/bias-corrected-k3-cancellation",
    "k3 bias-corrected at d = -50: K = e^50 - 51 and dK = 1 - e^50 cancel to the gradient r d = -50 r exactly",
    _kll([[-1.0, -60.0]], [[-1.0, -10.0]], mask(".x"), [[-1.0, -60.5]], estimator="k3", gradient="bias_corrected"),
    expect=f64([[0.0, (np.expm1(50.0) - 50.0) * np.exp(0.5)]]), grad_factor=f64([[0.0, -50.0 * np.exp(0.5)]]))
add("kl_loss_term/bias-corrected-k3-overflow",
    "k3 bias-corrected at d = -800: K = e^800 overflows (value inf), the gradient r d = -800 r is finite, never NaN",
    _kll([[-1.0, -801.0]], [[-1.0, -1.0]], mask(".x"), [[-1.0, -801.0]], estimator="k3", gradient="bias_corrected"),
    expect=f64([[0.0, inf]]), grad_factor=f64([[0.0, -800.0]]))
add("kl_loss_term/ratio-overflow-zero-estimate",
    "r = e^800 (overflows) where d = 0: K r = 0 and the gradients w d, r d are 0 (0 inf := 0); the other token is finite",
    _kll([[-1.0, -0.5, -0.5]], [[-1.0, -0.5, -0.7]], mask(".xx"), [[-1.0, -800.5, -0.5]], estimator="k3",
         gradient="bias_corrected"),
    expect=f64([[0.0, 0.0, np.exp(-0.2) - 1 + 0.2]]), grad_factor=f64([[0.0, 0.0, 0.2]]))
add("kl_loss_term/unbiased-uncapped-ratio-overflow",
    "weight_cap=None and r = e^800 where d = 0: the gradient w d is 0, never NaN",
    _kll([[-1.0, -0.5, -0.5]], [[-1.0, -0.5, -0.7]], mask(".xx"), [[-1.0, -800.5, -0.5]], estimator="k3",
         gradient="unbiased", weight_cap=None),
    expect=f64([[0.0, 0.0, np.exp(-0.2) - 1 + 0.2]]), grad_factor=f64([[0.0, 0.0, 0.2]]))
add("kl_loss_term/unbiased-capped-ratio-overflow",
    "weight_cap=10 and r = e^800: w = 10, the gradient 10 d",
    _kll([[-1.0, -0.5]], [[-1.0, 0.0]], mask(".x"), [[-1.0, -800.5]], estimator="k3", gradient="unbiased"),
    expect=f64([[0.0, np.exp(0.5) - 1.5]]), grad_factor=f64([[0.0, -5.0]]))
add("kl_loss_term/old-equals-logp-bias-corrected",
    "old_logp = logp (r = 1): the value is K, but the gradient dK + K differs from the estimator's dK",
    _kll_row(estimator="k3", gradient="bias_corrected", log_r=np.zeros(4)),
    expect=_pad1(_KL_K["k3"]), grad_factor=_pad1(KLL_D))
add("kl_loss_term/on-policy",
    "old_logp = ref_logp = logp: every form is 0; k1 bias-corrected keeps the gradient r (dk1/dd + k1) = 1",
    _kll_row(estimator="k1", gradient="bias_corrected", d=np.zeros(4), log_r=np.zeros(4)),
    expect=np.zeros((1, 5)), grad_factor=_pad1(np.ones(4)))
add("kl_loss_term/old-logp-none",
    "old_logp=None: accepted by the straight-through form, which never reads it",
    _kll_row(estimator="abs", gradient="straight_through", with_old=False),
    expect=_pad1(np.abs(KLL_D)), grad_factor=_pad1(KLL_D))
add("kl_loss_term/empty-mask-row",
    "a row with no valid token is 0 with a zero gradient",
    _kll([KLL_LOGP, KLL_LOGP], [KLL_LOGP - 0.5, KLL_LOGP - 0.5], mask(".xxxx", "....."),
         [KLL_LOGP - 0.1, KLL_LOGP - 0.1], gradient="bias_corrected"))
add("kl_loss_term/nonfinite-at-masked",
    "NaN, +-inf and 1e30 at masked positions of logp, ref_logp and old_logp change nothing",
    _kll([[nan, -0.2, -1.4, inf, -3.0, 1e30]], [[-inf, -0.5, -1.0, nan, -0.5, -0.8]], mask(".xx.x."),
         [[1e30, -0.4, -1.2, -inf, -3.5, nan]], gradient="bias_corrected"))


KL_LOSS_TERM = Quantity(
    "kl_loss_term",
    "kl.loss",
    returns="`[B,T]` (gradient: `kl_loss_term_grad(logp, ref_logp, mask, old_logp, upstream, *, …)`)",
    args=(
        Arg("logp", "[B, T]", "token", grad=True), Arg("ref_logp", "[B, T]", "token", constant=True),
        Arg("mask", "[B, T] bool", "mask"), Arg("old_logp", "[B, T]", "token", constant=True, optional=True),
    ),
    keywords=(
        KL_LOSS_ESTIMATOR("k3"), KL_GRADIENT("estimator"), LOG_RATIO_CLAMP(None), CLAMP(None),
        WEIGHT_CAP(10.0),
    ),
    inputs=_kl_loss_term_inputs,
    invariants=("mask", "on_policy"),
    question=("estimator", "gradient"),
    variants={"gradient": ("estimator", "straight_through", "unbiased", "bias_corrected"), "log_ratio_clamp": (None, 20.0), "clamp": (None, 10.0), "weight_cap": (10.0, None)},
    well_conditioned=_kl_loss_conditioned,
    golden=entries("kl_loss_term"),
    golden_seeds=(1, 2, 3),
    # d = 25 and d = -3 (k3 = 24 and 16, beyond verl's and OpenRLHF's clamp at 10), d = -45 (beyond
    # open-instruct's +-40 log-ratio clamp) and ordinary tokens; r = 2 and e^-0.5 (TRL's ratio)
    preset_inputs=lambda preset, **kw: _kll(
        [[-1.0, -0.5, -3.5, -0.2, -1.4, -46.0]], [[-1.0, -25.5, -0.5, -0.5, -1.0, -1.0]], mask(".xxxxx"),
        [[-1.0, -0.5 - np.log(2.0), -3.0, -0.2, -1.4, -46.0]], **kw),
)


RECORDS = (KL_PENALTY, KL_LOSS_TERM)
