"""The memory budget of the fused log-probs (``memory_budget=``, refimpl.fused_budget).

The kept-tile path is checked against the oracle on the conformance cases (through the
differential runner, at the spec's tolerances) with none, half or all of the tokens kept, in
float64, float32 and bfloat16; the budget in bytes is checked against the peak memory measured in
a fresh process (the `rlspec bench` worker's memory pass).
"""

from __future__ import annotations

import pytest
import torch

import refimpl
from conformance.records import make_case
from conformance.runner.loading import load_adapter
from conformance.bench.runner import run_case as run_bench_case
from conformance.runner.differential import run_case
from conformance.records import BY_FUNCTION
from refimpl import fused_budget

FUNCTIONS = ["token_logprobs_from_hidden", "token_entropy_from_hidden"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
@pytest.mark.parametrize("keep", ["half", "all"])
@pytest.mark.parametrize("function", FUNCTIONS)
def test_conformance_cases_with_kept_tiles(monkeypatch, function, keep, dtype):
    """Any budget: kept_tokens is pinned to half / all of the tokens, so every case exercises the
    kept tiles whatever its size (the byte arithmetic is tested below)."""
    kept_counts = []

    def pinned(budget, working, n_tok, V, size):
        n = n_tok if keep == "all" else (n_tok + 1) // 2
        kept_counts.append(n)
        return n

    monkeypatch.setattr(fused_budget, "kept_tokens", pinned)
    adapter = load_adapter("refimpl")
    record = BY_FUNCTION[function]
    for seed in [497, 1070, 1969, *range(30)]:
        case = make_case(function, seed)
        outcome = run_case(record, adapter, case, dtype, {**case.kwargs, "memory_budget": 1 << 40}, case.kwargs)
        assert outcome.status in ("pass", "ill_conditioned"), outcome.report()
    assert any(n > 0 for n in kept_counts)


def _inputs(dtype, seed=0, B=3, T=50, D=16, V=3000):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, T, D, generator=g).to(dtype)
    weight = (torch.randn(V, D, generator=g) * 0.6).to(dtype)
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = torch.rand(B, T, generator=g) > 0.2
    mask[:, 0] = False
    return hidden, weight, ids, mask, torch.randn(B, T, generator=g)


@pytest.mark.parametrize("entropy", [False, True], ids=["logprobs", "logprobs+entropy"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kept_tiles_equal_recomputed_and_survive_a_second_backward(dtype, entropy):
    """All tokens kept vs none: the same values, and gradients equal within the rounding of the kept
    tile; retain_graph + a second backward gives the same gradients (the kept tiles are restored)."""
    hidden, weight, ids, mask, up = _inputs(dtype)
    res = {}
    for budget in (None, 1 << 40):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        kw = dict(memory_budget=budget, chunk_size=40, vocab_chunk_size=700)
        if entropy:
            lp, ent = refimpl.token_logprobs_and_entropy_from_hidden(h, w, ids, mask, **kw)
            loss = (lp.float() * up).sum() + (ent.float() * up.flip(1)).sum()
        else:
            lp = refimpl.token_logprobs_from_hidden(h, w, ids, mask, **kw)
            loss = (lp.float() * up).sum()
        g1 = torch.autograd.grad(loss, (h, w), retain_graph=True)
        g2 = torch.autograd.grad(loss, (h, w))
        for a, b in zip(g1, g2):
            assert torch.equal(a, b)
        res[budget] = (lp.detach().double(), *(x.double() for x in g1))
    tol = 1e-6 if dtype == torch.float32 else 2**-7
    for a, b in zip(res[None], res[1 << 40]):
        assert (a - b).abs().max() <= tol * b.abs().max() + 1e-6


@pytest.mark.parametrize(
    "value,message",
    [("lots", "expected a number of bytes, 'auto' or None"), (-1, "memory_budget"), (True, "memory_budget"), (1.5, "memory_budget")],
)
def test_bad_budget_is_a_clear_error(value, message):
    hidden, weight, ids, mask, _ = _inputs(torch.float32)
    with pytest.raises((ValueError, TypeError), match="token_logprobs_from_hidden: memory_budget") as err:
        refimpl.token_logprobs_from_hidden(hidden, weight, ids, mask, memory_budget=value)
    assert message in str(err.value)


def test_auto_and_integral_float_budgets():
    hidden, weight, ids, mask, _ = _inputs(torch.float32)
    base = refimpl.token_logprobs_from_hidden(hidden, weight, ids, mask)
    for budget in ("auto", 1e9, 0):
        assert torch.equal(refimpl.token_logprobs_from_hidden(hidden, weight, ids, mask, memory_budget=budget), base)
    assert fused_budget.resolve("f", "auto", torch.device("cpu")) > 0


def test_kept_tokens_arithmetic():
    assert fused_budget.kept_tokens(None, 100, 10, 5, 4) == 0
    assert fused_budget.kept_tokens(100, 100, 10, 5, 4) == 0  # nothing beyond the working set
    assert fused_budget.kept_tokens(100 + 3 * (5 * 4 + 8), 100, 10, 5, 4) == 3
    assert fused_budget.kept_tokens(1 << 40, 100, 10, 5, 4) == 10


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_peak_memory_stays_within_the_budget(dtype):
    """Fresh processes (the bench worker's memory pass, VmHWM): the lean call stays within its working
    set estimate, and with a budget of half the logits the peak stays within the budget while it
    keeps tiles."""
    N, D, V = 2048, 128, 16000
    size = 4 if dtype == "float32" else 2
    case = {"kind": "logprob", "pass": "mem", "impl": "refimpl", "N": N, "D": D, "V": V, "dtype": dtype,
            "mode": "fwd+bwd", "entropy": False, "device": "cpu", "reps": 1, "threads": 2}
    lean = run_bench_case({**case, "memory_budget_mb": None}, memory=True, timeout_s=300)
    assert lean["ok"], lean
    half_path = dtype == "bfloat16"
    working = fused_budget.working_bytes(N, N + N // 1024, D, V, getattr(torch, dtype), half_path, 1024, 2048, False)
    assert lean["peak_extra_mb"] * 2**20 <= working
    budget_mb = (working + N * V * size // 2) / 2**20
    assert fused_budget.kept_tokens(int(budget_mb * 2**20), working, N, V, size) >= N // 2 - 1
    kept = run_bench_case({**case, "memory_budget_mb": budget_mb}, memory=True, timeout_s=300)
    assert kept["ok"], kept
    assert kept["peak_extra_mb"] <= budget_mb
    assert kept["peak_extra_mb"] > lean["peak_extra_mb"] + 0.3 * N * V * size / 2**20  # the tiles were kept
