"""The memory budget of the fused log-probs (``memory_budget=`` of :mod:`refimpl.fused_head`).

A call needs a working set it cannot do without (the gradients it returns, a few tiles and a few
[N, D] buffers: :func:`working_bytes`, a conservative upper bound). What a budget allows beyond that
keeps the softmax tiles of the first tokens from the forward for the backward (their logits GEMM and
``exp`` are not redone): ``V`` values per kept token, in float32 (float32 and bfloat16 inputs;
float64 for float64): the scaled logits ``z/τ`` of the forward; the bfloat16 log-prob path keeps
``exp((z − c)/τ)`` in bfloat16 instead, see :mod:`refimpl.fused_half`. A budget below the working set keeps nothing: the call then uses its
working set, as without a budget.
"""

from __future__ import annotations

import math

import torch

from refimpl.validation import check_int

# "auto": this fraction of the memory free on the device when the call starts
AUTO_FRACTION = 0.5


def resolve(fn: str, memory_budget: object, device: torch.device) -> int | None:
    """The budget in bytes (None: no budget, the lean default)."""
    if memory_budget is None:
        return None
    if isinstance(memory_budget, str):
        if memory_budget != "auto":
            raise TypeError(f"{fn}: memory_budget: expected a number of bytes, 'auto' or None, got {memory_budget!r}")
        return int(AUTO_FRACTION * free_bytes(device))
    if isinstance(memory_budget, float) and math.isfinite(memory_budget) and memory_budget == int(memory_budget):
        memory_budget = int(memory_budget)
    return check_int(fn, "memory_budget", memory_budget, ge=0)


def free_bytes(device: torch.device) -> int:
    """Free memory of ``device``: CUDA's free memory, or the host's MemAvailable (0 if unknown)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def working_bytes(
    n_tok: int, n_rows: int, D: int, V: int, dtype: torch.dtype, half_path: bool, rows: int, vchunk: int, entropy: bool
) -> int:
    """An upper bound of the memory one forward + backward uses without kept tiles: ``n_rows`` = B·T
    (the shape of d hidden), ``n_tok`` the predicting rows, ``rows`` × ``vchunk`` the tile."""
    size = torch.empty((), dtype=dtype).element_size()
    width = min(vchunk, V)
    if half_path:  # refimpl.fused_half, backward (the larger half): d weight, d hidden; per [n_tok, D]
        # element the rows, rhs, the float32 d hidden accumulator and its final cast; the q buffer, a
        # GEMM output, the float32 d weight tile and its GEMM output, chunk temporaries
        from refimpl.fused_half import _Q_BYTES

        q_rows = max(rows, min(n_tok, _Q_BYTES // (size * width)))
        temps = q_rows * width * size + q_rows * D * size + 2 * width * D * 4 + 2 * rows * D * 4
        total = V * D * size + n_rows * D * size + n_tok * D * (3 * size + 4) + temps + 64 * n_tok
        return int(1.05 * total) + (2 << 20)
    cdt_size = max(4, size)
    grads = V * D * cdt_size + n_rows * D * size + (V * D * size if size != cdt_size else 0)
    if size < 4:  # the half backward: rows, rhs and a float32 d hidden accumulator over all tokens
        grads += n_tok * D * (2 * size + cdt_size)
    tiles = (3 if entropy else 2) * rows * width * cdt_size + (2 * rows * width * size if size < 4 else 0)
    return grads + tiles + 4 * rows * D * cdt_size + width * D * cdt_size + 64 * n_tok


def kept_tokens(budget: int | None, working: int, n_tok: int, V: int, kept_size: int) -> int:
    """How many tokens' tiles fit in ``budget`` beyond the working set."""
    if budget is None or budget <= working:
        return 0
    return min(n_tok, (budget - working) // (V * kept_size + 8))
