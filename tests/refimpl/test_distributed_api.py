"""The multi-GPU API on one process (``torch.distributed`` not initialised: no communication, W = 1):
``step_counts`` / ``micro_batch_loss`` partition invariance with simulated ranks, and the
vocabulary-parallel functions equal to the single-device quantities (and to the oracle). The
multi-process runs are in ``tests/distributed/test_multiprocess.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
import refimpl
from refimpl.aggregation import AGGREGATION_MODES

B, T, V, D = 4, 7, 11, 5


def batch(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) < 0.7
    mask[:, 0] = False
    mask[2] = False
    ids = torch.randint(0, V, (B, T), generator=g)
    return {
        "mask": mask,
        "ids": ids,
        "logits": (3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).to(dtype),
        "hidden": torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype),
        "weight": torch.randn(V, D, generator=g, dtype=torch.float64).to(dtype),
        "loss": torch.randn(B, T, generator=g, dtype=torch.float64).to(dtype),
        "g": torch.randn(B, T, generator=g, dtype=torch.float64).to(dtype),
    }


# ----------------------------------------------------------------------------------------------
# step_counts / micro_batch_loss
# ----------------------------------------------------------------------------------------------


def test_step_counts_sums_every_micro_batch():
    mask = batch()["mask"]
    parts = [mask[:1], mask[1:1], mask[1:].float()]  # an empty micro-batch, a float mask
    counts = refimpl.step_counts(parts)
    assert counts == refimpl.StepCounts(num_tokens=float(mask.sum()), num_seqs=float(B))
    assert refimpl.step_counts([]) == refimpl.StepCounts(0.0, 0.0)
    assert refimpl.step_counts([mask], seqs_per_mask=[9]).num_seqs == 9.0


@pytest.mark.parametrize("mode", AGGREGATION_MODES)
@pytest.mark.parametrize("world", [1, 2, 4])
def test_simulated_ranks_and_micro_batches_give_the_whole_batch(mode, world):
    """W simulated ranks, each with micro-batches (one empty, one fully masked): summing each rank's
    micro-batch gradients, then averaging over ranks as DDP does, gives the whole batch's gradient."""
    d = batch(1)
    mask, loss = d["mask"], d["loss"]
    whole = oracle.aggregate(loss.numpy(), mask.numpy(), mode=mode, norm_length=4.0)
    whole_grad = oracle.aggregate_grad(loss.numpy(), mask.numpy(), 1.0, mode=mode, norm_length=4.0)
    rows = np.array_split(np.arange(B), world)
    parts = [[r[:1].tolist(), [], r[1:].tolist()] for r in rows]
    counts = refimpl.step_counts([mask[p] for rank in parts for p in rank])  # all ranks' counts (the all-reduce)
    x = loss.clone().requires_grad_()
    total, rank_grads = 0.0, []
    for rank in parts:
        grad = torch.zeros(B, T, dtype=torch.float64)
        for p in rank:
            out = refimpl.micro_batch_loss(x[p], mask[p], counts, mode=mode, norm_length=4.0, dp_world_size=world)
            (g,) = torch.autograd.grad(out, x)
            grad += g
            total += float(out.detach()) / world
        rank_grads.append(grad)
    ddp_grad = sum(rank_grads) / world
    assert abs(total - whole) <= 1e-12 * max(1.0, abs(whole))
    np.testing.assert_allclose(ddp_grad.numpy(), whole_grad, rtol=1e-12, atol=1e-15)


def test_micro_batch_loss_is_aggregate_times_world_size():
    d = batch(2)
    counts = refimpl.StepCounts(num_tokens=20.0, num_seqs=8.0)
    got = refimpl.micro_batch_loss(d["loss"], d["mask"], counts, mode="token_mean", dp_world_size=4)
    assert torch.equal(got, 4 * refimpl.aggregate(d["loss"], d["mask"], mode="token_mean", num_tokens=20.0, num_seqs=8.0))
    zero = refimpl.micro_batch_loss(torch.full((1, T), float("nan")), torch.zeros(1, T, dtype=torch.bool),
                                    refimpl.StepCounts(0.0, 0.0), mode="token_mean")
    assert float(zero) == 0.0  # no valid token anywhere: 0, never NaN


@pytest.mark.parametrize("call,error,message", [
    (lambda d: refimpl.step_counts(d["mask"]), TypeError, "step_counts: masks: expected a sequence"),
    (lambda d: refimpl.step_counts([d["mask"].int() * 2]), ValueError, r"step_counts: masks\[0\]: expected a binary mask"),
    (lambda d: refimpl.step_counts([d["mask"]], seqs_per_mask=[1, 2]), ValueError, "step_counts: seqs_per_mask: expected 1 counts"),
    (lambda d: refimpl.micro_batch_loss(d["loss"], d["mask"], (1, 2), mode="token_mean"), TypeError, "micro_batch_loss: counts"),
    (lambda d: refimpl.micro_batch_loss(d["loss"], d["mask"], refimpl.StepCounts(1.0, 1.0), mode="mean"), ValueError,
     "micro_batch_loss: mode"),
    (lambda d: refimpl.micro_batch_loss(d["loss"], d["mask"], refimpl.StepCounts(1.0, 1.0), mode="token_mean", dp_world_size=0),
     ValueError, "micro_batch_loss: dp_world_size"),
    (lambda d: refimpl.micro_batch_loss(d["loss"][:, :-1], d["mask"], refimpl.StepCounts(1.0, 1.0), mode="token_mean"),
     ValueError, "micro_batch_loss: token_loss"),
    (lambda d: refimpl.micro_batch_loss(d["loss"], d["mask"], refimpl.StepCounts(-1.0, 1.0), mode="token_mean"),
     ValueError, "micro_batch_loss: num_tokens"),
])
def test_errors(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call(batch())


# ----------------------------------------------------------------------------------------------
# vocabulary parallelism on one rank
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tau", [1.0, 0.6])
def test_one_rank_equals_single_device(dtype, tau):
    d = batch(3, dtype)
    mask, ids = d["mask"], d["ids"]
    z = d["logits"].clone().requires_grad_()
    lp = refimpl.vocab_parallel_token_logprobs(z, ids, mask, vocab_start=0, temperature=tau, chunk_size=3)
    ent = refimpl.vocab_parallel_token_entropy(z, mask, temperature=tau, chunk_size=2)
    grads = torch.autograd.grad((lp * d["g"]).sum() + (ent * d["g"]).sum(), z)
    z2 = d["logits"].clone().requires_grad_()
    lp2 = refimpl.token_logprobs(z2, ids, mask, temperature=tau)
    ent2 = refimpl.token_entropy(z2, mask, temperature=tau)
    grads2 = torch.autograd.grad((lp2 * d["g"]).sum() + (ent2 * d["g"]).sum(), z2)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    if dtype == torch.bfloat16:
        tol = dict(rtol=1e-2, atol=1e-2)
    # bfloat16 from hidden: the single-device path runs bfloat16 GEMMs (each tile gradient rounded
    # to bfloat16), the vocabulary-parallel one float32 math; both are within ~1 bfloat16 ulp of
    # float64, so they agree to ~2 ulps (2^-7 relative)
    tol_fused = dict(rtol=2e-2, atol=1e-2) if dtype == torch.bfloat16 else tol
    for a, b in ((lp, lp2), (ent, ent2), (grads[0], grads2[0])):
        torch.testing.assert_close(a.double(), b.double(), **tol)
        assert a.dtype == dtype

    h = d["hidden"].clone().requires_grad_()
    w = d["weight"].clone().requires_grad_()
    lp3, ent3 = refimpl.vocab_parallel_token_logprobs_and_entropy_from_hidden(
        h, w, ids, mask, vocab_start=0, temperature=tau, chunk_size=2, vocab_chunk_size=4)
    g3 = torch.autograd.grad((lp3 * d["g"]).sum() + (ent3 * d["g"]).sum(), (h, w))
    h2 = d["hidden"].clone().requires_grad_()
    w2 = d["weight"].clone().requires_grad_()
    lp4, ent4 = refimpl.token_logprobs_and_entropy_from_hidden(h2, w2, ids, mask, temperature=tau)
    g4 = torch.autograd.grad((lp4 * d["g"]).sum() + (ent4 * d["g"]).sum(), (h2, w2))
    for a, b in ((lp3, lp4), (ent3, ent4), (g3[0], g4[0]), (g3[1], g4[1])):
        torch.testing.assert_close(a.double(), b.double(), **tol_fused)
        assert a.dtype == dtype


def test_one_rank_matches_oracle_float64():
    d = batch(4)
    m, ids = d["mask"].numpy(), d["ids"].numpy()
    h = d["hidden"].clone().requires_grad_()
    w = d["weight"].clone().requires_grad_()
    lp = refimpl.vocab_parallel_token_logprobs_from_hidden(h, w, d["ids"], d["mask"], vocab_start=0, temperature=0.8)
    np.testing.assert_allclose(lp.detach().numpy(), oracle.token_logprobs_from_hidden(h.detach().numpy(), w.detach().numpy(),
                                                                                      ids, m, temperature=0.8), rtol=1e-12, atol=1e-12)
    dh, dw = torch.autograd.grad((lp * d["g"]).sum(), (h, w))
    edh, edw = oracle.token_logprobs_from_hidden_grad(h.detach().numpy(), w.detach().numpy(), ids, m, d["g"].numpy(), temperature=0.8)
    np.testing.assert_allclose(dh.numpy(), edh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw.numpy(), edw, rtol=1e-12, atol=1e-12)
    ent = refimpl.vocab_parallel_token_entropy_from_hidden(h, w, d["mask"], vocab_chunk_size=3)
    np.testing.assert_allclose(ent.detach().numpy(), oracle.token_entropy_from_hidden(h.detach().numpy(), w.detach().numpy(), m),
                               rtol=1e-12, atol=1e-12)


def test_simulated_shards_merge_like_the_collectives():
    """Two shards' local statistics merged by hand (the all-reduce MAX / SUM the functions do) give
    the full log-softmax: the merge formula itself, without processes."""
    d = batch(5)
    z = d["logits"][d["mask"].roll(-1, 1)]  # rows that predict a valid token
    cut = 4
    m_parts = [z[:, :cut].amax(1), z[:, cut:].amax(1)]
    m = torch.maximum(*m_parts)
    s = sum(torch.exp(part - m.unsqueeze(1)).sum(1) for part in (z[:, :cut], z[:, cut:]))
    torch.testing.assert_close(m + s.log(), torch.logsumexp(z, 1), rtol=1e-14, atol=1e-14)


def test_no_valid_token_and_poisoned_unread_rows():
    d = batch(6)
    mask = torch.zeros(B, T, dtype=torch.bool)
    z = torch.full((B, T, V), float("nan"), dtype=torch.float64, requires_grad=True)
    lp = refimpl.vocab_parallel_token_logprobs(z, d["ids"], mask, vocab_start=0)
    ent = refimpl.vocab_parallel_token_entropy(z, mask)
    (g,) = torch.autograd.grad(lp.sum() + ent.sum(), z)
    assert (lp == 0).all() and (ent == 0).all() and (g == 0).all()


@pytest.mark.parametrize("call,error,message", [
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"], d["ids"], d["mask"], vocab_start=-1), ValueError,
     "vocab_parallel_token_logprobs: vocab_start: expected an int >= 0"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"], d["ids"], d["mask"], vocab_start=0.5), TypeError,
     "vocab_parallel_token_logprobs: vocab_start: expected an int"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"], d["ids"], d["mask"], vocab_start=1000), ValueError,
     r"vocab_parallel_token_logprobs: input_ids: expected token ids in \[0, V\)"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"].int(), d["ids"], d["mask"], vocab_start=0), TypeError,
     "vocab_parallel_token_logprobs: logits_shard"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"][:, 1:], d["ids"], d["mask"], vocab_start=0), ValueError,
     "vocab_parallel_token_logprobs: logits_shard: expected leading dims"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"], d["ids"].float(), d["mask"], vocab_start=0), TypeError,
     "vocab_parallel_token_logprobs: input_ids"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(d["logits"], -1 - d["ids"], d["mask"], vocab_start=0), ValueError,
     "vocab_parallel_token_logprobs: input_ids"),
    (lambda d: refimpl.vocab_parallel_token_entropy(d["logits"], d["mask"], temperature=0.0), ValueError,
     "vocab_parallel_token_entropy: temperature"),
    (lambda d: refimpl.vocab_parallel_token_logprobs(torch.where(d["mask"].roll(-1, 1).unsqueeze(2), float("nan"), d["logits"]),
                                                     d["ids"], d["mask"], vocab_start=0), ValueError,
     "vocab_parallel_token_logprobs: logits_shard: expected finite values"),
    (lambda d: refimpl.vocab_parallel_token_logprobs_from_hidden(d["hidden"], d["weight"][:, 1:], d["ids"], d["mask"], vocab_start=0),
     ValueError, "vocab_parallel_token_logprobs_from_hidden: weight_shard: expected shape"),
    (lambda d: refimpl.vocab_parallel_token_logprobs_from_hidden(d["hidden"], d["weight"].float(), d["ids"], d["mask"], vocab_start=0),
     TypeError, "vocab_parallel_token_logprobs_from_hidden: weight_shard: expected the dtype of hidden"),
    (lambda d: refimpl.vocab_parallel_token_entropy_from_hidden(d["hidden"], d["weight"] * float("inf"), d["mask"]),
     ValueError, "vocab_parallel_token_entropy_from_hidden: weight_shard: expected finite values"),
    (lambda d: refimpl.vocab_parallel_token_entropy_from_hidden(d["hidden"], d["weight"], d["mask"], reduce_hidden_grad=1),
     TypeError, "vocab_parallel_token_entropy_from_hidden: reduce_hidden_grad"),
    (lambda d: refimpl.vocab_parallel_token_entropy_from_hidden(d["hidden"], d["weight"], d["mask"], chunk_size=0),
     ValueError, "vocab_parallel_token_entropy_from_hidden: chunk_size"),
])
def test_vocab_parallel_errors(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call(batch(7))
