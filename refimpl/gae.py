"""Generalized advantage estimation over the valid tokens of each row (spec id ``adv.gae``), loop-free.

The spec walks the valid positions t_1 < … < t_n of a row backwards:
``δ_k = r_{t_k} + γ·V_{t_{k+1}} − V_{t_k}`` (``V_{t_{n+1}} = 0``), ``A_k = δ_k + c·A_{k+1}``, c = γλ.

Masked inputs are zeroed by a product with the 0/1 mask (one fast pass); if that leaves a
non-finite sum (NaN/inf anywhere, masked positions included) they are selected instead, and a
non-finite value at a valid position is an error.

Mask carry (no compaction), for c = 1 with any mask and for masks with gaps when 0 < c < 1, λ >= 1/4:
carrying A and V through masked positions (verl's loop) is the recurrence
``Z_t = b_t + a_t·Z_{t+1}`` with ``a_t = c`` at valid and ``1`` at masked positions, where
``Z = A + V/λ`` at valid positions and ``b = m·(r + (1/λ − 1)·V)`` (γ·V_next = c·V_next/λ, so the
next valid value rides in the same carry). So ``A = Z − V/λ`` (a rounding of V amplified at most 4×):

- c = 1: ``Z`` is a reverse cumsum of ``m·r`` (accumulated in float64): ``A_t = Σ_{valid s>=t} r_s − V_t``;
- c < 1: in blocks of L = 16 positions, ``Z_t = c^(k_t)·(Σ_{s>=t} c^(−k_s)·b_s + Z_next block)``
  with ``k_t`` the valid positions in [t, block end]. Both sums over a block are one [·, L] @ [L, L]
  GEMM with a 0/1 matrix; the exponents stay within [−L, L] (c^−L <= 1e20, so c >= 0.056), and
  the sum over s >= t only holds terms c^(−k_s) <= c^(−k_t), so scaling back by c^(k_t) keeps the
  input's relative accuracy: no global c^−t. The block heads obey ``H_j = c^(K_j)·(S_j + H_{j+1})``,
  solved in float64 by the same blocking with per-step coefficients (reverse cumprods) and a loop
  over at most 32 steps.

Otherwise (rows whose valid tokens form one run; with gaps: c = 0, λ < 1/4 or c < 0.056):

1. Layout. Each row's valid positions are made contiguous, so that "the next valid token" is "the
   next position" and the token after the last valid one holds V = 0. Rows whose valid tokens form a
   single run (prompt, completion, padding) already are; otherwise the valid positions are
   compacted to the left of the row with a scatter index built from one cumsum, and the results
   are gathered back through it (masked positions map to the zero tail).
2. ``δ`` in one elementwise pass on that layout.
3. ``A_k = δ_k + c·A_{k+1}`` by blocked Toeplitz. In blocks of L positions, ``A_local = δ_block @ M``
   with ``M[j, i] = c^(j−i)`` for j >= i (entries underflow to 0 harmlessly; never c^−t); the block
   heads then satisfy the same recurrence with coefficient c^L across the T/L blocks, solved by the
   same routine (recursively), and ``A = A_local + c^(L−i)·A_head(next block)``. Cost 2·B·T·L FLOPs.
"""

from __future__ import annotations

import functools
import math

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


# The masked recurrence without compaction (used when the mask has gaps, or always for c = 1).
# With a_t = c at valid and 1 at masked positions, Z_t = b_t + a_t·Z_{t+1}, b = m·(r + (1/λ − 1)·V):
# at a valid t, Z_t = A_t + V_t/λ (the next valid value V enters A through γ·V_next = c·V_next/λ, so
# A + V/λ obeys one recurrence), hence A = Z − V/λ. Within blocks of L positions
# Z_t = c^(k_t)·(Σ_{s>=t} c^(−k_s)·b_s + Z_next block), k_t = valid positions in [t, block end]:
# the exponents stay within [−L, L] (c^−L <= _MAX_SCALE), the sum over s >= t only holds terms
# c^(−k_s) <= c^(−k_t), so scaling back by c^(k_t) keeps float32 accuracy (no global c^−t). The
# block heads obey H_j = c^(K_j)·(S_j + H_{j+1}), solved in float64.
_ZBLOCK = 16
_MAX_SCALE = 1e20  # c^-L bound: c >= 1e-20^(1/16) ~ 0.056
_MIN_LAM = 0.25  # A = Z − V/λ: at most a 4x amplification of V's rounding


@functools.lru_cache(maxsize=16)
def _suffix_ones(L: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """U [L, L] with U[s, t] = 1 for s >= t: (x @ U)[t] = Σ_{s>=t} x[s]."""
    return torch.ones(L, L, dtype=dtype, device=device).tril_()


def _scan_varying(alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """x_j = alpha_j·x_{j+1} + beta_j along dim 1 (x after the end = 0), 0 < alpha <= 1, float64.
    Blocks of 8: within a block x_j = Σ_{s>=j} (Q_j/Q_s)·beta_s, Q_j = Π_{u=j}^{end} alpha_u, plus
    Q_j times the next block's head; the heads recurse."""
    B, n = beta.shape
    if n <= 32:
        out = torch.empty_like(beta)
        x = torch.zeros(B, dtype=beta.dtype, device=beta.device)
        for j in range(n - 1, -1, -1):
            x = torch.addcmul(beta[:, j], alpha[:, j], x)
            out[:, j] = x
        return out
    L = 8
    nb = -(-n // L)
    if nb * L != n:
        alpha = F.pad(alpha, (0, nb * L - n), value=1.0)
        beta = F.pad(beta, (0, nb * L - n))
    Q = alpha.view(B, nb, L).flip(2).cumprod(2).flip(2)
    local = (beta.view(B, nb, L) / Q).flip(2).cumsum(2).flip(2).mul_(Q)
    heads = _scan_varying(Q[:, :, 0], local[:, :, 0])
    out = torch.addcmul(local, Q, F.pad(heads[:, 1:], (0, 1)).unsqueeze(2))
    return out.view(B, nb * L)[:, :n]


def _gae_carry(r0: torch.Tensor, v0: torch.Tensor, mf: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """A (0 at masked positions) for any mask (``mf``: the mask as 0./1. in the compute dtype),
    0 < c = γλ <= 1, without compaction; r0, v0 are 0 at masked positions, r0 is overwritten."""
    B, T = r0.shape
    c = gamma * lam
    if c == 1.0:  # γ = λ = 1: A_t = Σ_{valid s>=t} r_s − V_t (the V terms telescope)
        acc = None if r0.device.type == "cpu" or r0.dtype == torch.float64 else torch.float64
        z = torch.cumsum(r0.flip(1), dim=1, dtype=acc).flip(1).to(r0.dtype)
        return z.sub_(v0).mul_(mf)
    L = _ZBLOCK
    nb = -(-T // L)
    pad = nb * L - T
    b = r0.add_(v0, alpha=1.0 / lam - 1.0)  # m·(r + (1/λ − 1)·V)
    m_pad = mf
    if pad:
        b, m_pad = F.pad(b, (0, pad)), F.pad(mf, (0, pad))
    U = _suffix_ones(L, r0.dtype, r0.device)
    scale = torch.mm(m_pad.view(-1, L), U * -math.log(c)).exp_()  # c^−k, k_t: valid positions in [t, block end]
    b.view(-1, L).mul_(scale)
    z = torch.mm(b.view(-1, L), U).view(B, nb, L)  # Σ_{s>=t} c^−k_s b_s
    scale = scale.view(B, nb, L)
    head_coef = torch.reciprocal(scale[:, :, 0]).double()  # c^K_j (a copy)
    heads = _scan_varying(head_coef, head_coef * z[:, :, 0].double())
    z.add_(F.pad(heads[:, 1:], (0, 1)).to(z.dtype).unsqueeze(2)).div_(scale)
    z = z.view(B, nb * L)[:, :T]
    return z.sub_(v0, alpha=1.0 / lam).mul_(mf)


@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: adv.gae. (advantages, returns = A + V) over each row's valid tokens; mask-carry block scan (float64 reverse cumsum for γλ = 1), compaction + blocked Toeplitz otherwise."""
    fn = "gae"
    m = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, m)
    V = check_token_array(fn, "values", values, m)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    lam = check_real(fn, "lam", lam, ge=0.0, le=1.0)
    out_dtype, cdt = compute_dtypes(r, V)
    # Zero the masked positions by a product with the 0/1 mask (fast); when that leaves a non-finite
    # sum (a NaN/inf anywhere, masked ones included), select instead and locate a bad valid value.
    mf = m.to(cdt)
    r0, v0 = torch.mul(r.to(cdt), mf), torch.mul(V.to(cdt), mf)
    if not bool(torch.isfinite(r0.sum() + v0.sum())):
        r0, v0 = masked(r, m, cdt), masked(V, m, cdt)
        check_finite(fn, ("token_rewards", r, m, r0), ("values", V, m, v0))
    c = gamma * lam
    not_m = ~m
    # every run of valid tokens starts with a rising edge (mask[:, 0] is False): more edges than
    # non-empty rows means some row has a masked gap
    edges = torch.count_nonzero(m[:, 1:] & not_m[:, :-1])
    gaps = bool(edges > torch.count_nonzero(m.view(torch.uint8).amax(dim=1)))
    if c == 1.0 or (gaps and c > 0.0 and lam >= _MIN_LAM and c ** -_ZBLOCK <= _MAX_SCALE):
        A = _gae_carry(r0, v0, mf, gamma, lam)
        if not bool(torch.isfinite(A.sum())):  # overflow: keep masked positions exactly 0
            A.masked_fill_(not_m, 0.0)
        return A.to(out_dtype), v0.add_(A).to(out_dtype)
    dest = _compaction_index(m, not_m) if gaps else None
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
    if dest is None:  # zero the prompt and padding (a product: A is finite unless it overflowed)
        A.mul_(mf)
        if not bool(torch.isfinite(A.sum())):
            A.masked_fill_(not_m, 0.0)
    else:  # masked positions read the zero tail
        A = A.gather(1, dest)
    return A.to(out_dtype), v0.add_(A).to(out_dtype)
