"""pytest-benchmark regression tracking for the functions `rlspec bench` compares, on small shapes.

Run `pytest -m benchmark` (timed; `--benchmark-autosave` / `--benchmark-compare` to track) or, as CI
does, `pytest -m benchmark --benchmark-disable` (each once, untimed). The side-by-side numbers with
peak memory come from `rlspec bench` (one process per measurement), not from here.
"""

from __future__ import annotations

import pytest
import torch

from conformance.bench import impls

pytestmark = pytest.mark.benchmark

N, D, V = 1024, 128, 8000


def _logprob_case(impl: str, dtype: torch.dtype, mode: str):
    x = impls.logprob_inputs(N, D, V, dtype, "cpu", impl, grad=mode == "fwd+bwd")
    step = impls.logprob_step(impl, x, mode, entropy=False)

    def call():
        impls.clear_grads(x)
        return step()

    return x, call


@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("impl", ["refimpl", "naive", "trl", "trl_fused"])
def test_logprobs_from_hidden(benchmark, impl, dtype, mode):
    x, call = _logprob_case(impl, dtype, mode)
    lp, _ = benchmark(call)
    ref_lp, _ = impls.logprob_reference(x)
    tol = 1e-4 if dtype == torch.float32 else (0.1 if impl in ("trl", "naive") else 0.06)
    assert (lp[: ref_lp.numel()].double() - ref_lp).abs().max() < tol
    if mode == "fwd+bwd":
        leaf = x.hidden if impl == "refimpl" else x.rows
        assert leaf.grad is not None and x.weight.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_logprobs_and_entropy_from_hidden(benchmark, dtype):
    x, _ = _logprob_case("refimpl", dtype, "fwd+bwd")
    step = impls.logprob_step("refimpl", x, "fwd+bwd", entropy=True)

    def call():
        impls.clear_grads(x)
        return step()

    lp, ent = benchmark(call)
    assert ent is not None and torch.isfinite(ent).all()


@pytest.mark.parametrize("mask_kind", impls.GAE_MASKS)
@pytest.mark.parametrize("lam", [1.0, 0.95])
@pytest.mark.parametrize("impl", impls.GAE_IMPLS)
def test_gae(benchmark, impl, lam, mask_kind):
    if impl in impls.TORCHRL_GAE:  # `rlspec bench` runs these in torchrl's environment; here only where it imports
        pytest.importorskip("torchrl")
    r, v, m = impls.gae_inputs(64, 512, torch.float32, "cpu", mask_kind=mask_kind)
    fn = impls.gae_fn(impl, r, v, m, 1.0, lam, mask_kind)
    adv = benchmark(fn)
    ref = impls.gae_loop(r.double(), v.double(), m, 1.0, lam)
    assert impls.gae_max_rel_err(adv, ref, m) < 1e-5
