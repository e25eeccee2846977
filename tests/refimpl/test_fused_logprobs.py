"""Fused LM-head log-probs / entropy vs the logits path on ``hidden @ weight.T``.

Both paths are also checked against a plain autograd composition written here (log_softmax,
gather), so the reference is not the code under test. Value and gradients w.r.t. hidden and
weight; float64 tight, float32, bfloat16; temperatures; left/right padding, a fully masked row;
token chunks and vocabulary tiles that do not divide N and V.
"""

from __future__ import annotations

import pytest
import torch

from refimpl import (
    token_entropy,
    token_entropy_from_hidden,
    token_logprobs,
    token_logprobs_and_entropy_from_hidden,
    token_logprobs_from_hidden,
)

B, T, D, V = 4, 9, 6, 37


def batch(dtype: torch.dtype, seed: int = 0, weight_scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, 3:7] = True  # prompt, completion, right padding
    mask[1, 5:] = True  # left padding: completion runs to the end
    mask[2, 2:8] = True
    mask[2, 4] = False  # a masked tool token inside the completion
    # row 3 is fully masked
    hidden = torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype)
    weight = (weight_scale * torch.randn(V, D, generator=g, dtype=torch.float64)).to(dtype)
    ids = torch.randint(0, V, (B, T), generator=g)
    upstream = torch.randn(B, T, generator=g, dtype=torch.float64)
    return hidden, weight, ids, mask, upstream


def plain_logprobs_and_entropy(logits, ids, mask, tau):
    """log_softmax/gather in float64 on the shifted logits, zero at masked positions."""
    z = logits[:, :-1].double() / tau
    logp = torch.log_softmax(z, dim=-1)
    lp = logp.gather(2, ids[:, 1:, None]).squeeze(2)
    ent = -(logp.exp() * logp).sum(-1)
    pad = torch.zeros(logits.shape[0], 1, dtype=lp.dtype)
    m = mask[:, 1:]
    return (
        torch.cat([pad, torch.where(m, lp, 0.0)], dim=1),
        torch.cat([pad, torch.where(m, ent, 0.0)], dim=1),
    )


def grads(out, inputs, upstream):
    return torch.autograd.grad(out, inputs, upstream.to(out.dtype), retain_graph=True)


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size,vocab_chunk_size", [(None, None), (1, None), (4, 10), (5, 36), (100, 7)])
def test_float64_matches_logits_path(tau, chunk_size, vocab_chunk_size):
    hidden, weight, ids, mask, up = batch(torch.float64)
    h = hidden.clone().requires_grad_()
    w = weight.clone().requires_grad_()
    kw = dict(temperature=tau, chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size)
    lp = token_logprobs_from_hidden(h, w, ids, mask, **kw)
    ent = token_entropy_from_hidden(h, w, mask, **kw)
    lp2, ent2 = token_logprobs_and_entropy_from_hidden(h, w, ids, mask, **kw)

    logits = h @ w.T
    ref_lp = token_logprobs(logits, ids, mask, temperature=tau)
    ref_ent = token_entropy(logits, mask, temperature=tau)
    plain_lp, plain_ent = plain_logprobs_and_entropy(logits, ids, mask, tau)

    for a, b in [(lp, ref_lp), (lp2, ref_lp), (ent, ref_ent), (ent2, ref_ent), (ref_lp, plain_lp), (ref_ent, plain_ent)]:
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for out, ref, plain in [(lp, ref_lp, plain_lp), (ent, ref_ent, plain_ent)]:
        got = grads(out, (h, w), up)
        want = grads(ref, (h, w), up)
        want_plain = grads(plain, (h, w), up)
        for a, b, c in zip(got, want, want_plain):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(b, c, rtol=1e-10, atol=1e-12)
    # the combined function: gradient of a mix of both outputs
    up2 = up.flip(0)
    mixed = torch.autograd.grad((lp2 * up).sum() + (ent2 * up2).sum(), (h, w), retain_graph=True)
    mixed_ref = torch.autograd.grad((ref_lp * up).sum() + (ref_ent * up2).sum(), (h, w), retain_graph=True)
    for a, b in zip(mixed, mixed_ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_masked_positions_and_rows():
    hidden, weight, ids, mask, up = batch(torch.float64)
    h = hidden.clone().requires_grad_()
    lp, ent = token_logprobs_and_entropy_from_hidden(h, weight, ids, mask, chunk_size=3)
    assert (lp[~mask] == 0).all() and (ent[~mask] == 0).all()
    assert (lp[mask] < 0).all() and (ent[mask] > 0).all()
    (gh,) = torch.autograd.grad((lp * up).sum() + (ent * up).sum(), h)
    read = torch.zeros_like(mask)
    read[:, :-1] = mask[:, 1:]  # rows t-1 that predict a valid token t
    assert (gh[~read] == 0).all() and (gh[read].abs().sum(-1) > 0).all()
    assert (gh[3] == 0).all()  # the fully masked row


@pytest.mark.parametrize("tau", [1.0, 1.3])
@pytest.mark.parametrize("vocab_chunk_size", [None, 16])
def test_float32_close_to_float64(tau, vocab_chunk_size):
    hidden, weight, ids, mask, up = batch(torch.float64, seed=1, weight_scale=3.0)
    want_lp, want_ent = plain_logprobs_and_entropy(hidden @ weight.T, ids, mask, tau)
    h = hidden.float().requires_grad_()
    w = weight.float().requires_grad_()
    lp, ent = token_logprobs_and_entropy_from_hidden(
        h, w, ids, mask, temperature=tau, chunk_size=5, vocab_chunk_size=vocab_chunk_size
    )
    assert lp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(lp.double(), want_lp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent.double(), want_ent, rtol=1e-5, atol=1e-5)
    h64, w64 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref_lp, ref_ent = plain_logprobs_and_entropy(h64 @ w64.T, ids, mask, tau)
    for out, ref in [(lp, ref_lp), (ent, ref_ent)]:
        for a, b in zip(grads(out, (h, w), up), grads(ref, (h64, w64), up)):
            torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vocab_chunk_size", [None, 16])
def test_bfloat16_float32_softmax_and_accumulation(vocab_chunk_size):
    """bf16 inputs: logits, softmax and accumulation are float32-accurate, so the error vs float64
    on the same (rounded) inputs is far below bf16 rounding of the logits themselves."""
    hidden, weight, ids, mask, up = batch(torch.float64, seed=2, weight_scale=3.0)
    h = hidden.bfloat16().requires_grad_()
    w = weight.bfloat16().requires_grad_()
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    lp, ent = token_logprobs_and_entropy_from_hidden(h, w, ids, mask, chunk_size=3, vocab_chunk_size=vocab_chunk_size)
    assert lp.dtype == ent.dtype == torch.bfloat16
    ref_lp, ref_ent = plain_logprobs_and_entropy(h64 @ w64.T, ids, mask, 1.0)
    # bf16 outputs: one final rounding (2^-9 relative) on top of float32-accurate math
    torch.testing.assert_close(lp.double(), ref_lp, rtol=2**-8, atol=1e-3)
    torch.testing.assert_close(ent.double(), ref_ent, rtol=2**-8, atol=1e-3)
    for out, ref in [(lp, ref_lp), (ent, ref_ent)]:
        for a, b in zip(grads(out, (h, w), up), grads(ref, (h64, w64), up)):
            scale = b.abs().max()
            assert (a.double() - b).abs().max() <= 2e-2 * scale


def test_only_needed_gradients():
    """A frozen weight (or frozen hidden) gets no gradient and the other one is unchanged."""
    hidden, weight, ids, mask, up = batch(torch.float64)
    h = hidden.clone().requires_grad_()
    lp = token_logprobs_from_hidden(h, weight, ids, mask)
    (gh,) = grads(lp, (h,), up)
    h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    gh2, _ = grads(token_logprobs_from_hidden(h2, w2, ids, mask), (h2, w2), up)
    torch.testing.assert_close(gh, gh2, rtol=0, atol=0)


def test_no_valid_token():
    hidden, weight, ids, _, up = batch(torch.float32)
    mask = torch.zeros(B, T, dtype=torch.bool)
    h, w = hidden.requires_grad_(), weight.requires_grad_()
    lp, ent = token_logprobs_and_entropy_from_hidden(h, w, ids, mask)
    assert (lp == 0).all() and (ent == 0).all()
    gh, gw = torch.autograd.grad((lp * up.float()).sum() + ent.sum(), (h, w))
    assert (gh == 0).all() and (gw == 0).all()
