"""Packed sequences (bug-catalogue class 17): several sequences in one row, described by
``cu_seqlens`` or ``position_ids``, give exactly the unpacked values and gradients (one row per
sequence, checked against the float64 oracle); no label crosses a sequence boundary; a one-token
sequence survives."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oracle
import refimpl
from refimpl.aggregation import AGGREGATION_MODES

V = 7
LENGTHS = (3, 1, 4)  # the catalogue's example: a one-token sequence between two others


def sequences(lengths, seed=0):
    """Per sequence: logits [L, V] (as the model gives them inside the sequence), ids [L], mask [L]
    (first token never valid), token loss [L]."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for L in lengths:
        mask = torch.rand(L, generator=g) < 0.8
        mask[0] = False
        if L >= 2:
            mask[-1] = True
        out.append({
            "logits": 3 * torch.randn(L, V, generator=g, dtype=torch.float64),
            "ids": torch.randint(0, V, (L,), generator=g),
            "mask": mask,
            "loss": torch.randn(L, generator=g, dtype=torch.float64),
        })
    return out


def pack(seqs, rows=1, width=None):
    """Sequences laid out row after row (filling each row in order, a new row when the next does not
    fit): [rows, T] tensors, cu_seqlens over the flattened rows (needs no gap) or position_ids with
    -1 padding, and each sequence's (row, start)."""
    width = width or sum(len(s["ids"]) for s in seqs)
    logits = torch.zeros(rows, width, V, dtype=torch.float64)
    ids = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    loss = torch.zeros(rows, width, dtype=torch.float64)
    pos = torch.full((rows, width), -1, dtype=torch.long)
    where, r, c = [], 0, 0
    for s in seqs:
        L = len(s["ids"])
        if c + L > width:
            r, c = r + 1, 0
        logits[r, c : c + L], ids[r, c : c + L], mask[r, c : c + L], loss[r, c : c + L] = s["logits"], s["ids"], s["mask"], s["loss"]
        pos[r, c : c + L] = torch.arange(L)
        where.append((r, c))
        c += L
    return logits, ids, mask, loss, pos, where


def unpack_batch(seqs):
    """One row per sequence, right-padded to the longest: the oracle's input."""
    L = max(len(s["ids"]) for s in seqs)
    S = len(seqs)
    logits = np.zeros((S, L, V))
    ids = np.zeros((S, L), dtype=np.int64)
    mask = np.zeros((S, L), dtype=bool)
    loss = np.zeros((S, L))
    for i, s in enumerate(seqs):
        n = len(s["ids"])
        logits[i, :n], ids[i, :n], mask[i, :n], loss[i, :n] = s["logits"].numpy(), s["ids"].numpy(), s["mask"].numpy(), s["loss"].numpy()
    return logits, ids, mask, loss


def cu(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)


def layouts():
    """(name, seqs, packed tensors, packing keywords) for B = 1 with cu_seqlens and with position_ids
    (ids 0,1,2,0,0,1,2,3: the 0 -> 0 boundary of the one-token sequence), and B = 2 padded rows."""
    seqs = sequences(LENGTHS)
    p1 = pack(seqs)
    yield "cu_seqlens", seqs, p1, {"cu_seqlens": cu(LENGTHS)}
    yield "position_ids", seqs, p1, {"position_ids": p1[4]}
    seqs2 = sequences((3, 1, 4, 2), seed=1)
    p2 = pack(seqs2, rows=2, width=6)  # row 0: [3, 1] + 2 padding (-1); row 1: [4, 2]
    yield "two_rows_position_ids", seqs2, p2, {"position_ids": p2[4]}


LAYOUTS = list(layouts())


def test_layouts_are_what_they_claim():
    _, _, p, kw = LAYOUTS[1]
    assert kw["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1, 2, 3]]
    seg, S = refimpl.packed_segments(p[2], **kw)
    assert S == 3 and seg.tolist() == [[0, 0, 0, 1, 2, 2, 2, 2]]  # the one-token sequence survives
    seg_cu, S_cu = refimpl.packed_segments(p[2], cu_seqlens=cu(LENGTHS))
    assert S_cu == 3 and torch.equal(seg, seg_cu)
    boundary = refimpl.pack_boundary_mask(p[2], **kw)
    assert boundary.tolist() == [[True, False, False, True, True, False, False, False]]


def test_two_row_layout_pads_and_counts_sequences():
    _, seqs, p, kw = LAYOUTS[2]
    seg, S = refimpl.packed_segments(p[2], **kw)
    assert S == len(seqs)
    assert (seg[p[4] < 0] == -1).all()


@pytest.mark.parametrize("name", [n for n, *_ in LAYOUTS])
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_logprobs_and_entropy_equal_unpacked_oracle(name, tau):
    _, seqs, (logits, ids, mask, _, _, where), kw = next(x for x in LAYOUTS if x[0] == name)
    u_logits, u_ids, u_mask, _ = unpack_batch(seqs)
    z = logits.clone().requires_grad_()
    lp = refimpl.packed_token_logprobs(z, ids, mask, temperature=tau, **kw)
    ent = refimpl.packed_token_entropy(z, mask, temperature=tau, **kw)
    exp_lp = oracle.token_logprobs(u_logits, u_ids, u_mask, temperature=tau)
    exp_ent = oracle.token_entropy(u_logits, u_mask, temperature=tau)
    g = np.random.default_rng(0).normal(size=u_mask.shape)
    g_packed = torch.zeros(mask.shape, dtype=torch.float64)
    for i, (r, c) in enumerate(where):
        n = len(seqs[i]["ids"])
        np.testing.assert_allclose(lp[r, c : c + n].detach().numpy(), exp_lp[i, :n], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(ent[r, c : c + n].detach().numpy(), exp_ent[i, :n], rtol=1e-12, atol=1e-12)
        g_packed[r, c : c + n] = torch.from_numpy(g[i, :n])
    # gradients: the packed logits' gradient, cut back into sequences, is the oracle's
    (d_lp,) = torch.autograd.grad((lp * g_packed).sum(), z, retain_graph=True)
    (d_ent,) = torch.autograd.grad((ent * g_packed).sum(), z)
    exp_d_lp = oracle.token_logprobs_grad(u_logits, u_ids, u_mask, g, temperature=tau)
    exp_d_ent = oracle.token_entropy_grad(u_logits, u_mask, g, temperature=tau)
    covered = torch.zeros(mask.shape, dtype=torch.bool)
    for i, (r, c) in enumerate(where):
        n = len(seqs[i]["ids"])
        covered[r, c : c + n] = True
        np.testing.assert_allclose(d_lp[r, c : c + n].numpy(), exp_d_lp[i, :n], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(d_ent[r, c : c + n].numpy(), exp_d_ent[i, :n], rtol=1e-12, atol=1e-12)
    assert (d_lp[~covered] == 0).all() and (d_ent[~covered] == 0).all()


@pytest.mark.parametrize("name", [n for n, *_ in LAYOUTS])
def test_no_label_crosses_a_boundary(name):
    """The logits at a sequence's last position predict nothing: poisoning them changes nothing and
    their gradient is 0; a mask that marks a sequence's first token is rejected."""
    _, seqs, (logits, ids, mask, _, _, where), kw = next(x for x in LAYOUTS if x[0] == name)
    last = [(r, c + len(s["ids"]) - 1) for s, (r, c) in zip(seqs, where)]
    poisoned = logits.clone()
    for r, t in last:
        poisoned[r, t] = float("nan")
    z = poisoned.clone().requires_grad_()
    lp = refimpl.packed_token_logprobs(z, ids, mask, **kw)
    assert torch.equal(lp, refimpl.packed_token_logprobs(logits, ids, mask, **kw))
    (d,) = torch.autograd.grad(lp.sum(), z)
    assert torch.isfinite(d).all() and all((d[r, t] == 0).all() for r, t in last)
    for r, c in where:
        bad = mask.clone()
        bad[r, c] = True
        if c == 0:
            continue  # a row start: refused by the row rule mask[:, 0] as well
        with pytest.raises(ValueError, match=r"^packed_token_logprobs: mask: expected False at the first token"):
            refimpl.packed_token_logprobs(logits, ids, bad, **kw)
    boundary = refimpl.pack_boundary_mask(mask, **kw)
    assert not (mask & boundary).any()


@pytest.mark.parametrize("name", [n for n, *_ in LAYOUTS])
@pytest.mark.parametrize("mode", AGGREGATION_MODES)
def test_aggregate_equals_unpacked_oracle(name, mode):
    _, seqs, (_, _, mask, loss, _, where), kw = next(x for x in LAYOUTS if x[0] == name)
    _, _, u_mask, u_loss = unpack_batch(seqs)
    x = loss.clone().requires_grad_()
    got = refimpl.packed_aggregate(x, mask, mode=mode, norm_length=5.0, **kw)
    expected = oracle.aggregate(u_loss, u_mask, mode=mode, norm_length=5.0)
    assert abs(float(got.detach()) - expected) <= 1e-12 * max(1.0, abs(expected))
    (d,) = torch.autograd.grad(got, x)
    exp_d = oracle.aggregate_grad(u_loss, u_mask, 1.0, mode=mode, norm_length=5.0)
    for i, (r, c) in enumerate(where):
        n = len(seqs[i]["ids"])
        np.testing.assert_allclose(d[r, c : c + n].numpy(), exp_d[i, :n], rtol=1e-12, atol=1e-15)
    # the one-token (no valid token) sequence still counts in S, like an empty row
    if mode.startswith("seq_mean"):
        S = len(seqs)
        assert abs(float(refimpl.packed_aggregate(loss, mask, mode=mode, norm_length=5.0, num_seqs=S, **kw)) - expected) < 1e-12


def test_micro_batch_loss_takes_packed_rows():
    _, seqs, (_, _, mask, loss, _, _), kw = LAYOUTS[0]
    _, _, u_mask, u_loss = unpack_batch(seqs)
    counts = refimpl.step_counts([mask], seqs_per_mask=[len(seqs)])
    assert counts == refimpl.StepCounts(num_tokens=float(u_mask.sum()), num_seqs=float(len(seqs)))
    for mode in AGGREGATION_MODES:
        got = refimpl.micro_batch_loss(loss, mask, counts, mode=mode, norm_length=3.0, **kw)
        assert abs(float(got) - oracle.aggregate(u_loss, u_mask, mode=mode, norm_length=3.0)) < 1e-12


def test_float32_within_tolerance():
    _, seqs, (logits, ids, mask, _, _, where), kw = LAYOUTS[1]
    u_logits, u_ids, u_mask, _ = unpack_batch(seqs)
    lp = refimpl.packed_token_logprobs(logits.float(), ids, mask, **kw)
    exp = oracle.token_logprobs(u_logits.astype(np.float32).astype(np.float64), u_ids, u_mask)
    for i, (r, c) in enumerate(where):
        n = len(seqs[i]["ids"])
        np.testing.assert_allclose(lp[r, c : c + n].numpy(), exp[i, :n], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs,error,message", [
    ({}, ValueError, "cu_seqlens: expected exactly one of cu_seqlens and position_ids, got neither"),
    ({"cu_seqlens": cu(LENGTHS), "position_ids": torch.zeros(1, 8, dtype=torch.long)}, ValueError, "cu_seqlens: expected exactly one of cu_seqlens and position_ids, got both"),
    ({"cu_seqlens": torch.tensor([0, 3, 3, 8])}, ValueError, "cu_seqlens: expected strictly increasing"),
    ({"cu_seqlens": torch.tensor([1, 3, 8])}, ValueError, r"cu_seqlens: expected cu_seqlens\[0\] == 0"),
    ({"cu_seqlens": torch.tensor([0, 3, 9])}, ValueError, "cu_seqlens: expected offsets <= B\\*T"),
    ({"cu_seqlens": torch.tensor([0.0, 8.0])}, TypeError, "cu_seqlens: expected an integer tensor"),
    ({"cu_seqlens": [0, 8]}, TypeError, "cu_seqlens: expected an integer torch.Tensor"),
    ({"position_ids": torch.zeros(1, 7, dtype=torch.long)}, ValueError, "position_ids: expected shape"),
    ({"position_ids": torch.zeros(1, 8)}, TypeError, "position_ids: expected an integer tensor"),
])
def test_layout_errors(kwargs, error, message):
    _, _, (logits, ids, mask, *_), _ = LAYOUTS[0]
    with pytest.raises(error, match=rf"^packed_token_logprobs: {message}"):
        refimpl.packed_token_logprobs(logits, ids, mask, **kwargs)


def test_sequence_crossing_a_row_and_masked_padding_are_rejected():
    mask = torch.zeros(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="crossing a row boundary"):
        refimpl.packed_aggregate(torch.zeros(2, 4), mask, mode="seq_mean_token_mean", cu_seqlens=torch.tensor([0, 3, 6]))
    mask[0, 3] = True  # position 3 is padding (after cu_seqlens[-1] = 3)
    with pytest.raises(ValueError, match=r"^packed_aggregate: mask: .*padding"):
        refimpl.packed_aggregate(torch.zeros(2, 4), mask, mode="token_mean", cu_seqlens=torch.tensor([0, 3]))


def test_all_padding_and_empty_sequences_give_zero():
    mask = torch.zeros(1, 4, dtype=torch.bool)
    for mode in AGGREGATION_MODES:
        x = torch.full((1, 4), float("nan"), requires_grad=True)
        out = refimpl.packed_aggregate(x, mask, mode=mode, norm_length=2.0, cu_seqlens=torch.tensor([0]))
        (d,) = torch.autograd.grad(out, x)
        assert float(out.detach()) == 0.0 and (d == 0).all()
