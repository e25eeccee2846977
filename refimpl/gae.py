"""Generalized advantage estimation over the valid tokens of each row (spec id ``adv.gae``), loop-free.

The spec walks the valid positions t_1 < … < t_n of a row backwards:
``δ_k = r_{t_k} + γ·V_{t_{k+1}} − V_{t_k}`` (``V_{t_{n+1}} = 0``), ``A_k = δ_k + c·A_{k+1}``, c = γλ.

**One recurrence for A and V.** With ``b = m·(r + κ·V)``, κ = 1/λ − 1, and ``a_t = c`` at valid,
``1`` at masked positions, ``Z_t = b_t + a_t·Z_{t+1}`` (Z = 0 after the row) equals ``A + V/λ`` at
every valid position (γ·V_next = c·V_next/λ, so the next valid value rides in the same carry; a
masked position passes the carry through unchanged, which is the spec's skipping). Hence
``returns = m·Z − κ·m·V`` and ``A = returns − m·V``; the V/λ term amplifies V's rounding by at most
1/λ <= 4 (λ >= 1/4 on this route).

**Blocks.** Positions are cut into blocks of L = 16. Within a block the recurrence is one GEMM of
the [·, L] rows with an [L, L] matrix, which also yields S_j, the block's own sum at its first
position; the values Z at the blocks' first positions ("heads") obey a recurrence over the T/L
blocks, solved on the small [rows, T/L] array, and each position then adds its share of the next
block's head. Two routes:

- constant coefficient (a row's valid tokens form one run, or c = 1 with any mask: positions
  before the run only affect masked outputs, those after it hold b = 0): the GEMM matrix is
  ``M[j, i] = c^(j−i)`` (j >= i; powers below the smallest normal float are 0, never c^−t), the heads obey
  ``H_j = S_j + c^L·H_{j+1}`` (one GEMM of S with an [n, n] matrix of powers of c^L for up to 64
  blocks, :func:`_next_heads`, else :func:`discounted_reverse_cumsum`) and position i of block j
  adds ``c^(L−i)·H_{j+1}``;
- masked gaps with 0 < c < 1 (c >= 0.056): with k_t the number of valid positions in [t, block end]
  (a GEMM of the mask with a 0/1 matrix), ``Z_t = c^(k_t)·(Σ_{s>=t} c^(−k_s)·b_s + H_{j+1})``: the
  exponents stay within [−L, L] (c^−L <= 1e20) and the sum over s >= t only holds terms
  c^(−k_s) <= c^(−k_t), so scaling back by c^(k_t) keeps the input's relative accuracy. The heads
  obey ``H_j = c^(K_j)·(S_j + H_{j+1})`` (K_j the block's valid count), solved in float64 by
  :func:`_scan_windows`.

**Memory.** The call is memory-bound (it must read r, V and the mask and write A and the returns;
each extra pass over a [B, T] float32 array costs as much again). On CPU the rows are processed in
chunks of :data:`_CHUNK` elements: the full arrays are read and written once and the chunk's
buffers (μ·m, −κ·m·V, b, Z; c^−k for the gaps route) are reused. Whether a chunk has gaps is two
reductions of its mask (:func:`_chunk_has_gaps`). Masked inputs are zeroed by products with the
0/1 mask (a NaN or inf there turns an output non-finite, which the per-chunk sums of A see): the
call is then redone on inputs selected by the mask (``torch.where``), where a non-finite value at a
valid position is an error and an overflow leaves exact zeros at masked positions.

**Otherwise** (λ < 1/4, or masked gaps with c < 0.056, c = 0 included), :func:`_gae_compact`: each
row's valid positions are compacted to the left of the row (a scatter index from one cumsum) unless
they already form one run, ``δ`` is formed on that layout and ``A_k = δ_k + c·A_{k+1}`` solved by
:func:`discounted_reverse_cumsum` (blocked Toeplitz, 2·B·T·L FLOPs), then gathered back.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from refimpl.masking import masked
from refimpl.validation import check_finite, check_mask, check_real, check_token_array, compute_dtypes

__all__ = ["gae"]

_BLOCK = 16
# Elements per row chunk on CPU (4 MiB per float32 buffer): bounds the buffers' memory for large
# batches; smaller chunks were slower on the 2-core machine (each makes ~15 calls, and cache-sized
# chunks gained nothing there: docs/performance.md).
_CHUNK = 1 << 20
_MAX_SCALE = 1e20  # c^-L bound of the gaps route: c >= 1e-20^(1/16) ~ 0.056
_MIN_LAM = 0.25  # A = Z − V/λ: at most a 4x amplification of V's rounding
# _scan_windows: products of the coefficients within a window stay >= e^-W, so its quotients stay
# below e^W·|heads|: W = 600 when the heads are float32 sums (< 1e40, so < 1e301), 345 for float64
_WINDOW_LOG = {torch.float32: 600.0, torch.float64: 345.0}


def _normal(x: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``x`` (float64) in ``dtype`` on ``device`` with the entries below the smallest normal number of
    ``dtype`` set to 0: a GEMM with subnormal operands runs more than 10x slower (powers c^k of a
    small c reach them), and the terms they would weigh are below the result's rounding."""
    x = x.to(dtype=dtype, device=device)
    return x.masked_fill_(x.abs() < torch.finfo(dtype).tiny, 0.0)


@functools.lru_cache(maxsize=64)
def _block_operators(c: float, L: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """M [L, L] with M[j, i] = c^(j−i) for j >= i (else 0), and pw [L] with pw[i] = c^(L−i)."""
    idx = torch.arange(L, dtype=torch.float64)
    lag = idx.unsqueeze(1) - idx.unsqueeze(0)
    M = torch.where(lag >= 0, torch.pow(c, lag.clamp(min=0)), 0.0)
    pw = torch.pow(c, L - idx)
    return _normal(M, dtype, device), _normal(pw, dtype, device)


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
    local = (padded.reshape(B * n_blocks, L) @ M).view(B, n_blocks, L)
    heads = discounted_reverse_cumsum(local[:, :, 0], c**L)  # A at each block's first position
    carry = F.pad(heads[:, 1:], (0, 1))  # A at the first position of the next block (0 after the last)
    out = torch.addcmul(local, carry.unsqueeze(2), pw)
    return out.view(B, n_blocks * L)[:, :T]


@functools.lru_cache(maxsize=64)
def _chunk_operators(
    c: float, kappa: float, gaps: bool, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GEMM matrices of :func:`_gae_blocked`: (within-block [L, L], and for the gaps route the
    mask-count matrix [L, L], else the successor-head weights [L]). Its buffers hold ``s·b`` and
    ``μ·m`` (s = −1, μ = −κ when κ != 0, else s = μ = 1), so the within-block matrix carries s and
    the count matrix 1/μ.

    Constant coefficient: M[j, i] = c^(j−i) (j >= i) and the weights c^(L−i) of the next block's
    head at position i. Gaps: the suffix sums U[s, t] = 1 (s >= t), and −ln(c)·U (k_t·(−ln c)
    from the mask)."""
    L = _BLOCK
    s, mu = (-1.0, -kappa) if kappa else (1.0, 1.0)
    idx = torch.arange(L, dtype=torch.float64)
    lag = idx.unsqueeze(1) - idx.unsqueeze(0)
    if gaps:
        U = (lag >= 0).to(torch.float64)
        ops = (U * s, U * (-math.log(c) / mu))
    else:
        ops = (torch.where(lag >= 0, torch.pow(c, lag.clamp(min=0)), 0.0) * s, torch.pow(c, L - idx))
    return tuple(_normal(x, dtype, device) for x in ops)  # type: ignore[return-value]


@functools.lru_cache(maxsize=64)
def _next_head_matrix(C: float, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[n, n] with [i, j] = C^(i−j−1) for i > j (else 0): (S @ it)[:, j] = H_{j+1} when
    H_j = S_j + C·H_{j+1} (H_n = 0)."""
    idx = torch.arange(n, dtype=torch.float64)
    lag = idx.unsqueeze(1) - idx.unsqueeze(0) - 1
    return _normal(torch.where(lag >= 0, torch.pow(C, lag.clamp(min=0)), 0.0), dtype, device)


def _next_heads(S: torch.Tensor, C: float) -> torch.Tensor:
    """H_{j+1} for every block j (0 for the last) where H_j = S_j + C·H_{j+1}, along dim 1: one GEMM
    for up to 64 blocks, else :func:`discounted_reverse_cumsum`."""
    n = S.shape[1]
    if n <= 64:
        return S @ _next_head_matrix(C, n, S.dtype, S.device)
    return F.pad(discounted_reverse_cumsum(S.contiguous(), C)[:, 1:], (0, 1))


@functools.lru_cache(maxsize=16)
def _suffix_ones(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[n, n] with [s, t] = 1 for s >= t: (x @ it)[:, t] = Σ_{s>=t} x[:, s]."""
    return torch.ones(n, n, dtype=dtype, device=device).tril_()


def _scan_windows(alpha: torch.Tensor, beta: torch.Tensor, w: int) -> torch.Tensor:
    """x_j = alpha_j·x_{j+1} + beta_j along dim 1 (x after the end = 0), 0 < alpha <= 1, float64,
    where any w consecutive alphas multiply to at least e^−W (:data:`_WINDOW_LOG`). Within windows of
    w positions x_j = Q_j·Σ_{s>=j} beta_s/Q_s + Q_j·x_next window, Q_j = Π_{u=j}^{window end} alpha_u
    (so the quotients stay below e^W·|beta|; log Q and the sums are GEMMs with a 0/1 matrix); the
    windows' heads are carried by a loop over the windows."""
    B, n = beta.shape
    w = min(w, n)
    nw = -(-n // w)
    if nw * w != n:
        alpha = F.pad(alpha, (0, nw * w - n), value=1.0)
        beta = F.pad(beta, (0, nw * w - n))
    U = _suffix_ones(w, beta.dtype, beta.device)
    Q = torch.mm(alpha.log().view(-1, w), U).exp_().view(B, nw, w)
    x = torch.mm((beta.view(B, nw, w) / Q).view(-1, w), U).view(B, nw, w).mul_(Q)
    if nw > 1:
        head = x[:, :, 0].clone()  # x at each window's first position, once the later windows are added
        q0 = Q[:, :, 0]
        for k in range(nw - 2, -1, -1):
            head[:, k].addcmul_(q0[:, k], head[:, k + 1])
        x.addcmul_(Q, F.pad(head[:, 1:], (0, 1)).unsqueeze(2))
    return x.view(B, nw * w)[:, :n]


def _gae_blocked(
    r: torch.Tensor, V: torch.Tensor, u: torch.Tensor, gamma: float, lam: float, carry: bool, cdt: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(A, returns, all finite) in ``cdt`` by the block scan of the module docstring, for λ > 0.
    ``carry``: a chunk whose rows have masked gaps takes the mask-carry route (needs 0 < c < 1); else
    every chunk takes the constant-coefficient route (right for c = 1, or for masks without gaps).
    ``u`` is the mask as uint8; r and V may hold anything finite at masked positions (a non-finite
    one makes the result non-finite)."""
    B, T = u.shape
    if B == 0 or T == 0:
        return torch.zeros(B, T, dtype=cdt, device=u.device), torch.zeros(B, T, dtype=cdt, device=u.device), True
    L = _BLOCK
    c = gamma * lam
    kappa = 1.0 / lam - 1.0
    nb = -(-T // L)
    Tp = nb * L
    rows = max(1, min(B, _CHUNK // Tp)) if u.device.type == "cpu" else B
    dev = u.device
    A = torch.empty(B, T, dtype=cdt, device=dev)
    ret = torch.empty(B, T, dtype=cdt, device=dev)
    # chunk buffers: μ·m, −κ·m·V, s·b (gaps: s·b·c^−k), Z, and c^−k; a padded row's columns T.. stay 0
    work = [torch.empty(rows, Tp, dtype=cdt, device=dev) for _ in range(4 + carry)]
    if Tp != T:
        for w in work:
            w[:, T:].zero_()
    sums = torch.empty(-(-B // rows), dtype=cdt, device=dev)
    window = max(1, int(_WINDOW_LOG[cdt] / (L * -math.log(c)))) if carry else 0
    chunks = zip(r.split(rows), V.split(rows), u.split(rows), A.split(rows), ret.split(rows))
    for i, (rc, vc, uc, Ac, Rc) in enumerate(chunks):
        n = uc.shape[0]
        mk, q, b, z = (w[:n] for w in work[:4])
        mkT, qT, bT, zT = (x[:, :T] for x in (mk, q, b, z)) if Tp != T else (mk, q, b, z)
        mkT.copy_(uc)
        gaps = carry and _chunk_has_gaps(mk, uc)
        if kappa:
            mk.mul_(-kappa)  # μ·m
            torch.mul(vc, mkT, out=qT)  # −κ·m·V
            torch.addcmul(qT, rc, mkT, value=1.0 / kappa, out=bT)  # −κ·m·V − m·r = −b
        else:
            torch.mul(rc, mkT, out=bT)
        inner, extra = _chunk_operators(c, kappa, gaps, cdt, dev)
        z3 = z.view(n, nb, L)
        if gaps:
            scale = work[4][:n]
            torch.mm(mk.view(-1, L), extra, out=scale.view(-1, L)).exp_()  # c^−k
            alpha = scale.view(n, nb, L)[:, :, 0].reciprocal().double()  # c^K_j
            b.mul_(scale)
        torch.mm(b.view(-1, L), inner, out=z.view(-1, L))  # within-block sums; at i = 0 the block's S_j
        if gaps:
            H = _scan_windows(alpha, alpha * z3[:, :, 0].double(), window)
            z3.add_(F.pad(H[:, 1:], (0, 1)).to(cdt).unsqueeze(2))  # + H_next, then × c^k
            z.div_(scale)
        else:
            z3.addcmul_(_next_heads(z3[:, :, 0], c**L).unsqueeze(2), extra)  # + c^(L−i)·H_next
        if kappa:
            torch.addcmul(qT, zT, mkT, value=-1.0 / kappa, out=Rc)  # m·Z − κ·m·V
            torch.add(Rc, qT, alpha=1.0 / kappa, out=Ac)  # m·Z − m·V/λ
        else:
            torch.mul(zT, mkT, out=Rc)
            torch.addcmul(Rc, vc, mkT, value=-1.0, out=Ac)
        torch.sum(Ac, dim=(0, 1), out=sums[i])
    return A, ret, bool(torch.isfinite(sums.sum()))


def _chunk_has_gaps(m: torch.Tensor, u: torch.Tensor) -> bool:
    """Whether some row of a chunk has a masked gap, from ``m`` (the mask as 0./1., rows contiguous,
    padded columns 0) and ``u`` (the mask as uint8). Every run of valid tokens starts with a rising
    edge (mask[:, 0] is False), and rising edges = Σ_t m_t − Σ_t m_t·m_{t−1}: the second sum is one
    dot product of the flattened buffer with itself shifted by one (a row's first position is
    masked, so no product spans two rows); sums of 0/1 are exact. Gaps: more edges than non-empty
    rows."""
    flat = m.reshape(-1)
    return bool(flat.sum() - torch.dot(flat[1:], flat[:-1]) > torch.count_nonzero(u.amax(dim=1)))


def _has_gaps(u: torch.Tensor) -> bool:
    """Whether some row's valid positions (``u``: the mask as uint8) form more than one run: every run
    starts with a rising edge (mask[:, 0] is False), so more edges than non-empty rows."""
    edges = torch.count_nonzero(u[:, 1:] > u[:, :-1])
    return bool(edges > torch.count_nonzero(u.amax(dim=1)))


def _gae_compact(r0: torch.Tensor, v0: torch.Tensor, m: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """A (0 at masked positions) by compaction + δ + :func:`discounted_reverse_cumsum`, for any γ, λ;
    r0 and v0 are 0 at masked positions (r0 is overwritten)."""
    not_m = ~m
    gaps = _has_gaps(m.view(torch.uint8))
    if gaps:  # compact each row's valid tokens to the left; masked positions all go to T−1, always in the
        # zero tail (mask[:, 0] is False, so a row has at most T−1 valid tokens), where gathering reads 0
        dest = torch.cumsum(m, dim=1).sub_(1).masked_fill_(not_m, m.shape[1] - 1)
        r0 = torch.zeros_like(r0).scatter_(1, dest, r0)
        v0 = torch.zeros_like(v0).scatter_(1, dest, v0)
    # δ_t = r_t + γ·V_{t+1} − V_t, in place. The layout has each row's valid tokens in one run followed
    # by exact zeros, so V_{t+1} after the run's last token is 0 and δ is 0 after the run; δ before the
    # run (the prompt) is read by no valid position.
    delta = r0.sub_(v0)
    delta[:, :-1].add_(v0[:, 1:], alpha=gamma)
    A = discounted_reverse_cumsum(delta, gamma * lam)
    return A.gather(1, dest) if gaps else A.masked_fill_(not_m, 0.0)


@torch.no_grad()
def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Spec: adv.gae. (advantages, returns = A + V) over each row's valid tokens: chunked block scan
    (constant coefficient, or the mask carry for gaps), compaction + blocked Toeplitz for λ < 1/4."""
    fn = "gae"
    m = check_mask(fn, mask)
    r = check_token_array(fn, "token_rewards", token_rewards, m)
    V = check_token_array(fn, "values", values, m)
    gamma = check_real(fn, "gamma", gamma, ge=0.0, le=1.0)
    lam = check_real(fn, "lam", lam, ge=0.0, le=1.0)
    out_dtype, cdt = compute_dtypes(r, V)
    c = gamma * lam
    u = m.view(torch.uint8)
    carry = 0.0 < c < 1.0 and c**-_BLOCK <= _MAX_SCALE  # gaps can take the mask-carry route
    if lam >= _MIN_LAM and (carry or c == 1.0 or not _has_gaps(u)):
        A, ret, finite = _gae_blocked(r, V, u, gamma, lam, carry, cdt)
        if not finite:  # a NaN/inf somewhere (masked ones included), or an overflow: select the inputs
            r0, v0 = masked(r, m, cdt), masked(V, m, cdt)
            check_finite(fn, ("token_rewards", r, m, r0), ("values", V, m, v0))
            A, ret, finite = _gae_blocked(r0, v0, u, gamma, lam, carry, cdt)
            if not finite:  # overflow: keep masked positions exactly 0
                A.masked_fill_(~m, 0.0)
                ret.masked_fill_(~m, 0.0)
        return A.to(out_dtype), ret.to(out_dtype)
    r0, v0 = masked(r, m, cdt), masked(V, m, cdt)
    check_finite(fn, ("token_rewards", r, m, r0), ("values", V, m, v0))
    A = _gae_compact(r0, v0, m, gamma, lam)
    if not bool(torch.isfinite(A.sum())):  # overflow: keep masked positions exactly 0
        A.masked_fill_(~m, 0.0)
    return A.to(out_dtype), v0.add_(A).to(out_dtype)
