"""The loss denominator counts padding: every position from the first completion token to the end
of the row, while the numerator is masked.

The response mask of the denominator comes from the response *span* (pads after EOS and masked tool
tokens included): verl#3805 (`get_response_mask` all-ones without EOS, so padding is trained on),
trl#6439 (the numerator masked truncated completions but `num_items_in_batch` still counted them).
The loss is diluted by the pads; long-padded rows weigh less.
"""

import torch

import refimpl
from conformance.mutants.base import Mutant


def aggregate(token_loss, mask, *, mode, norm_length=None, num_tokens=None, num_seqs=None):
    m = mask.bool()
    span = (torch.cumsum(m.int(), dim=1) > 0).sum(dim=1)  # from the first valid token to the row end
    if mode == "token_mean" and num_tokens is None:
        num_tokens = span.sum()
    if mode == "seq_mean_token_mean":  # each row divided by its padded length
        loss = torch.where(m, token_loss / span.clamp(min=1).unsqueeze(1).to(token_loss.dtype), 0.0)
        return refimpl.aggregate(loss, m, mode="seq_mean_token_sum", num_seqs=num_seqs)
    return refimpl.aggregate(token_loss, m, mode=mode, norm_length=norm_length, num_tokens=num_tokens, num_seqs=num_seqs)


MUTANT = Mutant(
    name="agg_padding_counted",
    bug_class="padding counted in the loss denominator (the numerator is masked, the count is not)",
    catalogue=3,
    cites=("verl#3805", "trl#6439"),
    signature={"aggregate": ("property", "golden")},
    replace={"aggregate": aggregate},
)
