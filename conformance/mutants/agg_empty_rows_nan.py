"""Masked means without a guard for an empty count: 0/0 = NaN for a row (or batch) with no valid token.

verl e9bcd2b / verl#782 (2025-03-27) added the epsilon to `masked_mean`; OpenRLHF 0fdee11 / #583
(all labels ignored -> NaN); NeMo-Automodel#3796; ROLL#475. The spec: a row with n_b = 0 adds 0 (and
still counts in S); an empty batch gives 0.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant, upcast


def aggregate(token_loss, mask, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    if mode not in ("token_mean", "seq_mean_token_mean"):
        return refimpl.aggregate(token_loss, mask, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)
    m = mask.bool()
    (loss,), out_dtype = upcast(token_loss)
    lm = torch.where(m, loss, 0.0)
    if mode == "token_mean":
        n = m.sum() if num_tokens is None else num_tokens
        return (lm.sum() / n).to(out_dtype)  # 0/0 for an empty batch
    S = m.shape[0] if num_seqs is None else num_seqs
    return ((lm.sum(dim=1) / m.sum(dim=1)).sum() / S).to(out_dtype)  # 0/0 for an empty row


MUTANT = Mutant(
    name="agg_empty_rows_nan",
    bug_class="masked mean without a zero-count guard: a row or batch with no valid token gives NaN",
    catalogue=26,
    cites=("verl#782 (e9bcd2b)", "OpenRLHF#583 (0fdee11)", "NeMo-Automodel#3796", "ROLL#475"),
    signature={"aggregate": ("property", "golden")},
    replace={"aggregate": aggregate},
)
