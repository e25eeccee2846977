"""refimpl.context_parallel on one process: the shard layouts worked by hand, the sharded log-probs against the
float64 oracle's unsharded ones, and a clear error naming the function and the argument for every bad input
(these functions are outside the bad-input fuzzer: tests/robustness/surface.py EXCLUDED). The multi-process
proof (loss and gradients equal to the unsharded step) is tests/distributed/test_context_parallel.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import oracle
import refimpl
from refimpl.distributed import StepCounts


def test_contiguous_and_zigzag_columns_by_hand() -> None:
    assert refimpl.cp_columns(10, 2, 0).tolist() == [0, 1, 2, 3, 4]
    assert refimpl.cp_columns(10, 2, 1).tolist() == [5, 6, 7, 8, 9]
    # zigzag: 4 chunks of [0..9] as tensor_split gives them: [0,1,2] [3,4,5] [6,7] [8,9]; rank 0: chunks 0 and 3
    assert refimpl.cp_columns(10, 2, 0, zigzag=True).tolist() == [0, 1, 2, 8, 9]
    assert refimpl.cp_columns(10, 2, 1, zigzag=True).tolist() == [3, 4, 5, 6, 7]
    # packed: each sequence [0,4) [4,10) split on its own; the padding [10,12) is a span of its own
    cu = torch.tensor([0, 4, 10])
    assert refimpl.cp_columns(12, 2, 0, cu_seqlens=cu).tolist() == [0, 1, 4, 5, 6, 10]
    assert refimpl.cp_columns(12, 2, 1, cu_seqlens=cu).tolist() == [2, 3, 7, 8, 9, 11]


def test_token_columns_shift_by_one_and_wrap_at_the_sequence_end() -> None:
    assert refimpl.cp_token_columns(torch.tensor([0, 1, 2, 8, 9]), 10).tolist() == [1, 2, 3, 9, 0]
    cu = torch.tensor([0, 4, 10])
    assert refimpl.cp_token_columns(torch.tensor([2, 3, 7, 8, 9, 11]), 12, cu_seqlens=cu).tolist() == [3, 0, 8, 9, 4, 10]


@pytest.mark.parametrize("cp", [1, 2, 3, 5])
@pytest.mark.parametrize("zigzag", [False, True])
@pytest.mark.parametrize("packed", [False, True])
def test_the_ranks_token_columns_partition_the_columns(cp: int, zigzag: bool, packed: bool) -> None:
    T = 17
    cu = torch.tensor([0, 3, 4, 11, 15]) if packed else None
    cols = [refimpl.cp_columns(T, cp, r, zigzag=zigzag, cu_seqlens=cu) for r in range(cp)]
    toks = [refimpl.cp_token_columns(c, T, cu_seqlens=cu) for c in cols]
    assert sorted(torch.cat(cols).tolist()) == list(range(T))
    assert sorted(torch.cat(toks).tolist()) == list(range(T))


@pytest.mark.parametrize("tau", [1.0, 0.7])
@pytest.mark.parametrize("zigzag", [False, True])
def test_sharded_logprobs_equal_the_oracles_unsharded(tau: float, zigzag: bool) -> None:
    rng = np.random.default_rng(3)
    B, T, V = 3, 11, 6
    z = rng.normal(size=(B, T, V))
    ids = rng.integers(0, V, size=(B, T))
    mask = rng.random((B, T)) > 0.2
    mask[:, 0] = False
    want = oracle.token_logprobs(z, ids, mask, temperature=tau)
    for r in range(3):
        cols = refimpl.cp_columns(T, 3, r, zigzag=zigzag)
        tok = refimpl.cp_token_columns(cols, T)
        got = refimpl.cp_token_logprobs(torch.from_numpy(z)[:, cols], torch.from_numpy(ids),
                                        torch.from_numpy(mask)[:, tok], cols, temperature=tau)
        np.testing.assert_allclose(got.numpy(), want[:, tok.numpy()], rtol=1e-12, atol=1e-12)


def test_counts_sequences_once_and_sequence_counts_per_packed_sequence() -> None:
    masks = [torch.tensor([[True, False, True]]), torch.tensor([[True, True, True], [False, False, False]])]
    assert refimpl.cp_step_counts(masks, cp_rank=0) == StepCounts(num_tokens=5.0, num_seqs=3.0)
    assert refimpl.cp_step_counts(masks, cp_rank=1) == StepCounts(num_tokens=5.0, num_seqs=0.0)
    cu = torch.tensor([0, 4, 10])  # token columns 3 and 5..7 held here: 1 token of sequence 0, 3 of sequence 1
    m = torch.tensor([[True, True, True, False, True]])
    assert refimpl.cp_sequence_counts(m, torch.tensor([3, 5, 6, 7, 11]), cu_seqlens=cu).tolist() == [1.0, 2.0]


def test_micro_batch_loss_by_hand() -> None:
    ell = torch.tensor([[1.0, 2.0, 4.0]])
    m = torch.tensor([[True, True, False]])
    c = StepCounts(num_tokens=6.0, num_seqs=2.0)
    assert float(refimpl.cp_micro_batch_loss(ell, m, c, mode="token_mean", world_size=4)) == pytest.approx(4 * 3 / 6)
    assert float(refimpl.cp_micro_batch_loss(ell, m, c, mode="seq_mean_token_sum_norm", norm_length=3.0,
                                             world_size=1)) == pytest.approx(3 / 6)
    n_s = torch.tensor([5.0])  # the row's 5 tokens over the CP group, 2 of them here
    got = refimpl.cp_micro_batch_loss(ell, m, c, mode="seq_mean_token_mean", token_columns=torch.tensor([1, 2, 3]),
                                      sequence_counts=n_s, world_size=2)
    assert float(got) == pytest.approx(2 * (3 / 5) / 2)


def _call(fn: str, **change: Any) -> Any:
    ids = torch.tensor([[1, 2, 3, 0, 1, 2]])
    base: dict[str, dict[str, Any]] = {
        "cp_columns": dict(length=6, cp_size=2, cp_rank=0),
        "cp_token_columns": dict(columns=torch.tensor([0, 1, 2]), length=6),
        "cp_token_logprobs": dict(logits=torch.zeros(1, 3, 4), input_ids=ids, mask=torch.tensor([[True, True, False]]),
                                  columns=torch.tensor([0, 1, 2])),
        "cp_step_counts": dict(masks=[torch.tensor([[True, False]])], cp_rank=0),
        "cp_sequence_counts": dict(mask=torch.tensor([[True, False]]), token_columns=torch.tensor([1, 2])),
        "cp_micro_batch_loss": dict(token_loss=torch.ones(1, 2), mask=torch.tensor([[True, False]]),
                                    counts=StepCounts(2.0, 1.0), mode="token_mean"),
    }
    return getattr(refimpl, fn)(**{**base[fn], **change})


BAD: list[tuple[str, str, Any, type[Exception]]] = [
    ("cp_columns", "length", -1, ValueError), ("cp_columns", "length", 6.0, TypeError),
    ("cp_columns", "cp_size", 0, ValueError), ("cp_columns", "cp_size", "2", TypeError),
    ("cp_columns", "cp_rank", 2, ValueError), ("cp_columns", "cp_rank", -1, ValueError),
    ("cp_columns", "zigzag", 1, TypeError),
    ("cp_columns", "cu_seqlens", torch.tensor([0.0, 6.0]), TypeError),
    ("cp_columns", "cu_seqlens", torch.tensor([1, 6]), ValueError),
    ("cp_columns", "cu_seqlens", torch.tensor([0, 4, 4]), ValueError),
    ("cp_columns", "cu_seqlens", torch.tensor([0, 7]), ValueError),
    ("cp_token_columns", "columns", torch.tensor([0.0, 1.0]), TypeError),
    ("cp_token_columns", "columns", torch.tensor([[0, 1]]), ValueError),
    ("cp_token_columns", "columns", torch.tensor([0, 6]), ValueError),
    ("cp_token_columns", "columns", [0, 1], TypeError),
    ("cp_token_logprobs", "logits", torch.zeros(1, 3), TypeError),
    ("cp_token_logprobs", "logits", torch.zeros(1, 2, 4), ValueError),
    ("cp_token_logprobs", "input_ids", torch.zeros(1, 6), TypeError),
    ("cp_token_logprobs", "mask", torch.tensor([[2, 0, 0]]), ValueError),
    ("cp_token_logprobs", "mask", torch.tensor([[True, True, True]]), ValueError),  # True at the wrapped column 0
    ("cp_token_logprobs", "columns", torch.tensor([0, 1, 9]), ValueError),
    ("cp_token_logprobs", "temperature", 0.0, ValueError), ("cp_token_logprobs", "temperature", float("nan"), ValueError),
    ("cp_step_counts", "masks", torch.ones(1, 2, dtype=torch.bool), TypeError),
    ("cp_step_counts", "cp_rank", -1, ValueError),
    ("cp_step_counts", "seqs_per_mask", [1, 2], ValueError), ("cp_step_counts", "seqs_per_mask", [-1], ValueError),
    ("cp_sequence_counts", "mask", torch.tensor([[True, False, True]]), ValueError),
    ("cp_sequence_counts", "token_columns", torch.tensor([1.0, 2.0]), TypeError),
    ("cp_micro_batch_loss", "counts", (2.0, 1.0), TypeError),
    ("cp_micro_batch_loss", "mode", "mean", ValueError),
    ("cp_micro_batch_loss", "token_loss", torch.ones(1, 3), ValueError),
    ("cp_micro_batch_loss", "world_size", 0, ValueError),
    ("cp_micro_batch_loss", "norm_length", None, TypeError),
    ("cp_micro_batch_loss", "sequence_counts", None, ValueError),
]


@pytest.mark.parametrize("fn,arg,value,exc", BAD, ids=[f"{f}-{a}-{i}" for i, (f, a, _, _) in enumerate(BAD)])
def test_bad_input_names_the_function_and_argument(fn: str, arg: str, value: Any, exc: type[Exception]) -> None:
    change = {arg: value}
    if (fn, arg) == ("cp_micro_batch_loss", "norm_length"):
        change["mode"] = "seq_mean_token_sum_norm"
    if (fn, arg) == ("cp_token_logprobs", "mask"):
        change["columns"] = torch.tensor([3, 4, 5])  # column 5's logits predict nothing: its token column wraps to 0
    if (fn, arg) == ("cp_micro_batch_loss", "sequence_counts"):
        change.update(mode="seq_mean_token_mean", token_columns=torch.tensor([1, 2]))
    with pytest.raises(exc, match=rf"^{fn}: {arg}"):
        _call(fn, **change)
