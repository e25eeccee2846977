"""refimpl.overlong_penalty and refimpl.shaped_rewards (spec v1.1 reward.overlong / reward.shaping): the
properties that need no oracle: hand values, output dtypes, no gradient, input tensors left alone, error
messages. (The differential tests against the oracle come from the conformance records.)
"""

from __future__ import annotations

import pytest
import torch

from refimpl import overlong_penalty, shaped_rewards
from tests.refimpl.small_batch import assert_error_names

L = torch.tensor([0, 5, 6, 7, 8, 9, 10, 11, 40])


def test_overlong_hand_values():
    # max 10, buffer 4: L_start 6, -1/4 per token up to -1 at 10 (DAPO eq. 13); the line beyond with "linear"
    out = overlong_penalty(L, max_length=10, buffer=4)
    assert out.dtype == torch.float64
    assert out.tolist() == [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]
    assert overlong_penalty(L, max_length=10, buffer=4, beyond="linear").tolist()[-2:] == [-1.25, -8.5]
    assert overlong_penalty(L, max_length=10, buffer=0, factor=2.0).tolist() == [0.0] * 7 + [-2.0, -2.0]
    zero = overlong_penalty(L, max_length=10, buffer=4, factor=0.0)
    assert zero.tolist() == [0.0] * 9 and not torch.signbit(zero).any()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_overlong_integer_dtypes(dtype):
    assert overlong_penalty(torch.tensor([7, 9], dtype=dtype), max_length=8, buffer=2).tolist() == [-0.5, -1.0]


def test_overlong_empty_and_huge_lengths():
    assert overlong_penalty(torch.zeros(0, dtype=torch.int64), max_length=4, buffer=2).shape == (0,)
    huge = torch.tensor([2**40], dtype=torch.int64)
    assert overlong_penalty(huge, max_length=2**31, buffer=2**30, beyond="linear").item() == -(2**40 - 2**30) / 2**30


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_shaped_rewards_values_and_dtype(dtype):
    r = torch.tensor([2.0, -3.0, 0.5, 12.0, -12.0], dtype=dtype)
    t = torch.tensor([True, False, True, False, True])
    out = shaped_rewards(r, t, truncated_scale=0.5, truncated_shift=-0.25, clip_low=-10.0, clip_high=10.0)
    assert out.dtype == dtype
    # truncated: 0.5 r - 0.25 (2 -> 0.75, 0.5 -> 0, -12 -> -6.25); 12 clipped to 10
    assert out.tolist() == [0.75, -3.0, 0.0, 10.0, -6.25]
    assert shaped_rewards(r, t, truncated_value=-15.0, clip_low=-10.0).tolist() == [-10.0, -3.0, -10.0, 12.0, -10.0]
    assert shaped_rewards(r, t).tolist() == r.tolist()


def test_shaped_rewards_flags_and_no_gradient():
    r = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for flags in (torch.tensor([1, 0, 1]), torch.tensor([1.0, 0.0, 1.0]), torch.tensor([True, False, True])):
        out = shaped_rewards(r, flags, truncated_value=0.0)
        assert out.tolist() == [0.0, 2.0, 0.0] and not out.requires_grad
    assert shaped_rewards(torch.zeros(0), torch.zeros(0, dtype=torch.bool), clip_high=1.0).shape == (0,)


def test_inputs_left_unchanged():
    r, t = torch.tensor([20.0, -20.0]), torch.tensor([True, False])
    lengths = torch.tensor([3, 30])
    shaped_rewards(r, t, truncated_scale=0.0, clip_low=-1.0, clip_high=1.0)
    overlong_penalty(lengths, max_length=10, buffer=5)
    assert r.tolist() == [20.0, -20.0] and t.tolist() == [True, False] and lengths.tolist() == [3, 30]


@pytest.mark.parametrize("lengths,kw,exc,arg", [
    ([1.0], {}, TypeError, "lengths"),
    ([True], {}, TypeError, "lengths"),
    ([-2], {}, ValueError, "lengths"),
    ([[1]], {}, ValueError, "lengths"),
    ([1], {"max_length": 0}, ValueError, "max_length"),
    ([1], {"buffer": 11}, ValueError, "buffer"),
    ([1], {"buffer": 0, "beyond": "linear"}, ValueError, "buffer"),
    ([1], {"factor": -1.0}, ValueError, "factor"),
    ([1], {"beyond": 1}, TypeError, "beyond"),
])
def test_overlong_errors(lengths, kw, exc, arg):
    assert_error_names(overlong_penalty, (torch.tensor(lengths),), {"max_length": 10, "buffer": 2, **kw}, exc, arg)


def test_overlong_rejects_a_list():
    assert_error_names(overlong_penalty, ([1, 2],), {"max_length": 10, "buffer": 2}, TypeError, "lengths")


@pytest.mark.parametrize("flags,kw,exc,arg", [
    (torch.tensor([True, False]), {}, ValueError, "truncated"),
    (torch.tensor([0.5, 0.0, 1.0]), {}, ValueError, "truncated"),
    (torch.tensor([2, 0, 1]), {}, ValueError, "truncated"),
    (torch.tensor([1, 0, 1]).to(torch.complex64), {}, TypeError, "truncated"),
    (torch.tensor([True, False, True]), {"truncated_value": 1.0, "truncated_scale": 0.5}, ValueError, "truncated_scale"),
    (torch.tensor([True, False, True]), {"clip_low": 2.0, "clip_high": 1.0}, ValueError, "clip_high"),
    (torch.tensor([True, False, True]), {"truncated_shift": float("nan")}, ValueError, "truncated_shift"),
])
def test_shaping_errors(flags, kw, exc, arg):
    assert_error_names(shaped_rewards, (torch.tensor([1.0, 2.0, 3.0]), flags), kw, exc, arg)


def test_shaping_rejects_bad_rewards():
    t = torch.tensor([True, False])
    assert_error_names(shaped_rewards, (torch.tensor([1, 2]), t), {}, TypeError, "rewards")
    assert_error_names(shaped_rewards, (torch.tensor([1.0, float("inf")]), t), {}, ValueError, "rewards")
