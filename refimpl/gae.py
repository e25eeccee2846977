"""Generalized advantage estimation over the valid tokens of each row (spec id ``adv.gae``), loop-free.

The spec walks the valid positions t_1 < … < t_n of a row backwards:
``δ_k = r_{t_k} + γ·V_{t_{k+1}} − V_{t_k}`` (``V_{t_{n+1}} = 0``), ``A_k = δ_k + c·A_{k+1}``, c = γλ.

1. Layout. Each row's valid positions are made contiguous, so that "the next valid token" is "the
   next position" and the token after the last valid one holds V = 0. Rows whose valid tokens form a
   single run (prompt, completion, padding) already are; otherwise the valid positions are
   compacted to the left of the row with a scatter index built from one cumsum, and the results
   are gathered back through it (masked positions map to the zero tail).
2. ``δ`` in one elementwise pass on that layout (masked inputs replaced by exact zeros first).
3. The linear recurrence ``A_k = δ_k + c·A_{k+1}`` is a discounted reverse cumsum:
   - c = 1: a reverse cumsum (flip, cumsum, flip), accumulated in float64;
   - c < 1: blocked Toeplitz. In blocks of L positions, ``A_local = δ_block @ M`` with
     ``M[j, i] = c^(j−i)`` for j >= i (entries underflow to 0 harmlessly; never c^−t); the block heads
     then satisfy the same recurrence with coefficient c^L across the T/L blocks, solved by the same
     routine (recursively), and ``A = A_local + c^(L−i)·A_head(next block)``. Cost 2·B·T·L FLOPs.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from refimpl.masking import masked
from refimpl.validation import check_finite, check_mask, check_real, check_token_array, compute_dtypes

__all__ = ["gae", "discounted_reverse_cumsum"]

_BLOCK = 16


@functools.lru_cache(maxsize=64)
def _block_operators(c: float, L: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """M [L, L] with M[j, i] = c^(j−i) for j >= i (else 0), and pw [L] with pw[i] = c^(L−i)."""
    idx = torch.arange(L, dtype=torch.float64)
    lag = idx.unsqueeze(1) - idx.unsqueeze(0)
    M = torch.where(lag >= 0, torch.pow(c, lag.clamp(min=0)), 0.0)
    pw = torch.pow(c, L - idx)
    return M.to(dtype=dtype, device=device), pw.to(dtype=dtype, device=device)


def discounted_reverse_cumsum(x: torch.Tensor, c: float) -> torch.Tensor:
    """``A[:, t] = Σ_{j>=t} c^(j−t)·x[:, j]`` for x [B, T] and 0 <= c <= 1, without a loop over T."""
    B, T = x.shape
    if T == 0 or c == 0.0:
        return x.clone()
    if c == 1.0:  # reverse cumsum; the CPU kernel accumulates float32 in float64, elsewhere ask for it
        acc = None if x.device.type == "cpu" or x.dtype == torch.float64 else torch.float64
        return torch.cumsum(x.flip(1), dim=1, dtype=acc).flip(1).to(x.dtype)
    L = min(_BLOCK, T)
    M, pw = _block_operators(c, L, x.dtype, x.device)
    if T <= L:
        return x @ M
    n_blocks = -(-T // L)
    padded = F.pad(x, (0, n_blocks * L - T)) if n_blocks * L != T else x
    local = (padded.view(B * n_blocks, L) @ M).view(B, n_blocks, L)
    heads = discounted_reverse_cumsum(local[:, :, 0], c**L)  # A at each block's first position
    carry = F.pad(heads[:, 1:], (0, 1))  # A at the first position of the next block (0 after the last)
    out = torch.addcmul(local, carry.unsqueeze(2), pw)
    return out.view(B, n_blocks * L)[:, :T]


def _compaction_index(mask: torch.Tensor, not_mask: torch.Tensor) -> torch.Tensor:
    """index[b, t]: where position t goes when row b's valid positions are moved, in order, to the
    front of the row. Masked positions all go to T−1, which is always in the zero tail (mask[:, 0]
    is False, so a row has at most T−1 valid tokens): scattering the masked copies (zeros there)
    writes only zeros to it, and gathering back reads the tail's zeros."""
    index = torch.cumsum(mask, dim=1).sub_(1)
    return index.masked_fill_(not_mask, mask.shape[1] - 1)


@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: adv.gae. (advantages, returns = A + V) over each row's valid tokens; compaction + blocked Toeplitz / float64 reverse cumsum."""
    fn = "gae"
    m = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, m)
    V = check_token_array(fn, "values", values, m)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    lam = check_real(fn, "lam", lam, ge=0.0, le=1.0)
    out_dtype, cdt = compute_dtypes(r, V)
    r0, v0 = masked(r, m, cdt), masked(V, m, cdt)
    check_finite(fn, ("token_rewards", r, m, r0), ("values", V, m, v0))
    T = m.shape[1]
    not_m = ~m
    # every run of valid tokens starts with a rising edge (mask[:, 0] is False): more edges than
    # non-empty rows means some row has a masked gap
    edges = torch.count_nonzero(m[:, 1:] & not_m[:, :-1])
    non_empty_rows = torch.count_nonzero(m.view(torch.uint8).amax(dim=1))
    dest = _compaction_index(m, not_m) if bool(edges > non_empty_rows) else None
    if dest is None:
        r_lay, v_lay = r0, v0
    else:  # a masked gap inside a row: compact the valid tokens to the left
        r_lay = torch.zeros_like(r0).scatter_(1, dest, r0)
        v_lay = torch.zeros_like(v0).scatter_(1, dest, v0)
    # δ_t = r_t + γ·V_{t+1} − V_t, in place on a fresh copy. The layout has each row's valid tokens in
    # one run followed by exact zeros, so V_{t+1} after the run's last token is 0 and δ is 0 after
    # the run; δ before the run (the prompt) is read by no valid position.
    delta = r_lay.sub_(v_lay)
    delta[:, :-1].add_(v_lay[:, 1:], alpha=gamma)
    A = discounted_reverse_cumsum(delta, gamma * lam)
    if dest is None:
        A.masked_fill_(not_m, 0.0)
    else:  # masked positions read the zero tail
        A = A.gather(1, dest)
    return A.to(out_dtype), v0.add_(A).to(out_dtype)
