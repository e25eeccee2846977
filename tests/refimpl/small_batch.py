"""The small ragged batch shared by the refimpl tests that need no oracle (spec v1.1 quantities and
losses): right and left padding, a gap inside a completion, an empty row, and seeded token arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

B, T = 4, 6
POISON = (float("nan"), float("inf"), float("-inf"), 1e30)


def make_mask() -> torch.Tensor:
    m = torch.zeros(B, T, dtype=torch.bool)
    m[0, 1:5] = True
    m[1, 2:] = True
    m[2, 1:4] = True
    m[2, 2] = False  # a gap
    # row 3: no valid token
    return m


MASK = make_mask()


def tok(seed: int, dtype: torch.dtype = torch.float32, scale: float = 0.5, offset: float = -1.0) -> torch.Tensor:
    """A seeded [B, T] float array, offset + scale·N(0, 1), in `dtype`."""
    g = torch.Generator().manual_seed(seed)
    return (offset + scale * torch.randn(B, T, generator=g, dtype=torch.float64)).to(dtype)


def assert_error_names(fn: Callable[..., Any], args: tuple, kwargs: dict, exc: type[Exception], arg: str) -> None:
    """`fn(*args, **kwargs)` raises `exc` with a message that starts with `<function>: <arg>:`."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert str(info.value).startswith(f"{fn.__name__}: {arg}:"), str(info.value)
