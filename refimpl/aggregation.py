"""Reduce a per-token loss to the scalar objective (spec ids ``agg.*``).

``num_tokens`` / ``num_seqs`` replace the local counts with global ones (micro-batches, gradient
accumulation, data-parallel ranks); with them the results of the parts of a partition of the batch
sum to the result of the whole batch, in every mode. They may be numbers or 0-d tensors (e.g. the
result of an all-reduce), which are used without a host sync.
"""

from __future__ import annotations

import torch

from refimpl.masking import masked
from refimpl.validation import (
    check_choice,
    check_finite,
    check_mask,
    check_optional_real,
    check_real,
    check_token_array,
    compute_dtypes,
)

__all__ = ["aggregate", "global_counts"]

AGGREGATION_MODES = (
    "token_mean",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "token_sum",
)


def global_counts(mask: torch.Tensor) -> tuple[int, int]:
    """Spec: agg.* (helper). (num_tokens, num_seqs) of a whole batch, to pass to :func:`aggregate` for each of its parts."""
    m = check_mask("global_counts", mask)
    return int(m.sum()), int(m.shape[0])


def _count(fn: str, name: str, value: object, device: torch.device, dtype: torch.dtype) -> torch.Tensor | float | None:
    """A global count: a number >= 0, or a tensor holding one (kept on the device, no sync)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() <= 1:
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{fn}: {name}: expected a real number, got a {value.dtype} tensor")
        return value.reshape(()).to(device=device, dtype=dtype)
    return check_optional_real(fn, name, value, ge=0.0)


def _safe_div(num: torch.Tensor, den: torch.Tensor | float) -> torch.Tensor:
    """num/den, and 0 when den == 0 (an empty batch)."""
    if isinstance(den, torch.Tensor):
        zero = den == 0
        return torch.where(zero, 0.0, num / torch.where(zero, 1.0, den))
    return num / den if den > 0 else num * 0.0


def aggregate(
    token_loss: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: str,
    norm_length: float | None = None,
    num_tokens: float | torch.Tensor | None = None,
    num_seqs: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Spec: agg.*. token_mean Σl·m/N; seq_mean_token_mean Σ_b(Σ_t l·m/n_b)/S; seq_mean_token_sum(_norm) Σl·m/S(/norm_length); token_sum Σl·m."""
    fn = "aggregate"
    m = check_mask(fn, mask)
    loss = check_token_array(fn, "token_loss", token_loss, m)
    mode = check_choice(fn, "mode", mode, AGGREGATION_MODES)
    norm_length = None if norm_length is None else check_real(fn, "norm_length", norm_length, gt=0.0)
    if mode == "seq_mean_token_sum_norm" and norm_length is None:
        raise ValueError(
            f"{fn}: norm_length: expected a number > 0 for mode='seq_mean_token_sum_norm' "
            f"(Dr. GRPO constant normaliser), got None"
        )
    out_dtype, cdt = compute_dtypes(loss)
    N = _count(fn, "num_tokens", num_tokens, m.device, cdt)
    S = _count(fn, "num_seqs", num_seqs, m.device, cdt)
    lm = masked(loss, m, cdt)
    check_finite(fn, ("token_loss", loss, m, lm))
    if mode == "token_sum":
        result = lm.sum()
    elif mode == "token_mean":
        result = _safe_div(lm.sum(), m.sum().to(cdt) if N is None else N)
    else:
        row_sums = lm.sum(dim=1)
        if mode == "seq_mean_token_mean":
            n = m.sum(dim=1).to(cdt)
            row_sums = torch.where(n > 0, row_sums / n.clamp(min=1), 0.0)
        elif mode == "seq_mean_token_sum_norm":
            row_sums = row_sums / norm_length
        result = _safe_div(row_sums.sum(), float(m.shape[0]) if S is None else S)
    return result.to(out_dtype)
