"""The one tolerance table of rlspec.

An implementation's output `actual` is accepted against the float64 oracle's `expected` (computed on
the same rounded inputs) when, elementwise, `|actual - expected| <= atol + rtol * |expected|`.

`DEFAULT` holds one (rtol, atol) pair per input dtype. `OVERRIDES` may widen a pair for one
(spec id, dtype, what) with a reason; `what` is "value" or "grad". The meta-test
`tests/conformance/test_tolerances.py` rejects an override without a reason or one that widens nothing,
and checks that the classes are nested (float64 inside float32 inside bfloat16) for every spec id: the
conformance run reports the finest class an adapter meets, which needs that order.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tol:
    rtol: float
    atol: float
    reason: str = ""


DTYPES = ("float64", "float32", "bfloat16")

DEFAULT: dict[str, Tol] = {
    # Both sides in float64: only the order of operations differs.
    "float64": Tol(rtol=1e-9, atol=1e-12, reason="float64 computation, reordered"),
    # float32 computation and output (PyTorch's float32 default is rtol 1.3e-6, atol 1e-5).
    "float32": Tol(rtol=2e-6, atol=1e-5, reason="float32 computation and output"),
    # bfloat16 inputs, float32 accumulation, output rounded once to bfloat16 (8 significant bits,
    # half an ulp is 2**-9 ~ 2e-3 relative); two roundings plus float32 work stay within 8e-3.
    "bfloat16": Tol(rtol=8e-3, atol=1e-5, reason="bfloat16 output rounding"),
}

OVERRIDES: dict[tuple[str, str, str], Tol] = {
    ("logprob.fused", "bfloat16", "value"): Tol(
        rtol=8e-3,
        atol=6e-2,
        reason="the LM-head GEMM of bfloat16 hidden states and weights rounds each logit to bfloat16 "
        "(|z| <= ~20 gives up to 2**-9 * 20 ~ 0.04 absolute), as every bfloat16 trainer does",
    ),
    ("logprob.fused", "bfloat16", "grad"): Tol(
        rtol=3e-2,
        atol=3e-2,
        reason="bfloat16 logits (see value) propagate into dL/dhidden and dL/dweight, and those "
        "sum over up to T*B or V products rounded to bfloat16",
    ),
    ("logprob.fused", "float32", "grad"): Tol(
        rtol=1e-5,
        atol=3e-5,
        reason="dL/dweight sums over every valid token (a float32 GEMM reduction); the entropy "
        "gradient also carries the cancellation of logprob.entropy",
    ),
    ("logprob.entropy", "float32", "value"): Tol(
        rtol=2e-6,
        atol=3e-5,
        reason="entropy as log Z - sum p*z (TRL, verl) cancels two terms of size max|z/T| (up to 60 "
        "in the cases); one float32 ulp there is 7.6e-6 and a few roundings reach 2-3e-5",
    ),
    ("logprob.entropy", "float32", "grad"): Tol(
        rtol=2e-6,
        atol=3e-5,
        reason="the entropy gradient -p*(log p + H) inherits the cancellation of H (see value)",
    ),
    ("logprob.fused", "float32", "value"): Tol(
        rtol=2e-6,
        atol=3e-5,
        reason="entropy from hidden states: same cancellation as logprob.entropy",
    ),
    ("adv.gae", "float32", "value"): Tol(
        rtol=2e-5,
        atol=2e-5,
        reason="the recursion accumulates one float32 rounding per valid step of the row",
    ),
    ("adv.whiten", "float32", "value"): Tol(
        rtol=1e-5,
        atol=2e-5,
        reason="division by a float32 standard deviation computed from a batch reduction",
    ),
    ("adv.whiten", "bfloat16", "value"): Tol(
        rtol=1.6e-2,
        atol=1e-2,
        reason="whitened values near 0 after mean subtraction; bfloat16 outputs of magnitude ~1",
    ),
}


# An inference engine's log-probs of the tokens it sampled against the same weights' transformers forward
# (rlspec train --engine vllm --verify): the whole model runs through other kernels on each side.
ENGINE_FLOAT32 = Tol(
    rtol=1e-5, atol=1e-4,
    reason="a float32 engine's whole forward (oneDNN GEMMs, its own attention, unpadded prompts) against the "
    "trainer's left-padded float32 forward: up to 1.0e-5 measured on the vLLM checks' model at T = 0.7 "
    "(logit differences divided by T), bounded here ten times above",
)


def tolerance(spec_id: str, dtype: str, what: str = "value") -> Tol:
    """The tolerance for one comparison: the dtype's default, widened by an override if listed,
    and never narrower than a finer class's (the classes are nested: whatever meets the float32
    class meets the bfloat16 one, so a float32 override that widens atol widens bfloat16's too)."""
    if dtype not in DEFAULT:
        raise ValueError(f"tolerance: dtype: expected one of {DTYPES}, got {dtype!r}")
    if what not in ("value", "grad"):
        raise ValueError(f"tolerance: what: expected 'value' or 'grad', got {what!r}")
    own = _own(spec_id, dtype, what)
    finer = [_own(spec_id, klass, what) for klass in DTYPES[: DTYPES.index(dtype)]]
    wider = [t for t in finer if t.rtol > own.rtol or t.atol > own.atol]
    if not wider:
        return own
    rtol = max([own.rtol] + [t.rtol for t in finer])
    atol = max([own.atol] + [t.atol for t in finer])
    return Tol(rtol=rtol, atol=atol, reason=f"{own.reason}; widened to a finer class's ({wider[-1].reason})")


def _own(spec_id: str, dtype: str, what: str) -> Tol:
    """One class's own entry: the default widened by an override."""
    base = DEFAULT[dtype]
    override = OVERRIDES.get((spec_id, dtype, what))
    if override is None:
        return base
    return Tol(rtol=max(base.rtol, override.rtol), atol=max(base.atol, override.atol), reason=override.reason)
