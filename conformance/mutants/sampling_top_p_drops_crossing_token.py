"""The top-p (nucleus) cut keeps the tokens whose *inclusive* cumulative probability is at most p, so the
token that crosses p is dropped and the kept mass is below p: the trainer-side support (and so the
log-probs and log S of `logprob.sampling`) is smaller than the engine's.

rasbt/reasoning-from-scratch#164, fishaudio/fish-speech#1171, Biohub/esm#360, thu-nics/C2C#21; the
definition it misses: arXiv:1904.09751 eq. 2 (the smallest set whose mass reaches p), as vLLM's
apply_top_k_top_p_pytorch and transformers' TopPLogitsWarper keep it.
"""

import torch

from conformance.mutants.base import Mutant
from refimpl.logprobs import scatter_rows
from refimpl.sampling import _prepare


def _support(fn, logits, mask, temperature, top_k, top_p, min_p):
    m, z, out_pos, a, keep = _prepare(fn, logits, mask, temperature, top_k, 1.0, min_p)
    if top_p < 1.0:
        with torch.no_grad():
            q = torch.softmax(a.masked_fill(~keep, float("-inf")), dim=1)
            q_desc, order = q.sort(dim=1, descending=True)
            kept_sorted = torch.cumsum(q_desc, dim=1) <= top_p  # the bug: inclusive sum, crossing token out
            kept_sorted[:, 0] = True
            keep = keep & torch.zeros_like(keep).scatter_(1, order, kept_sorted)
    return m, z, out_pos, a, keep


def sampling_logprobs(logits, input_ids, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    m, z, out_pos, a, keep = _support("sampling_logprobs", logits, mask, temperature, top_k, top_p, min_p)
    targets = input_ids.reshape(-1).index_select(0, out_pos).long().unsqueeze(1)
    lp = a.gather(1, targets).squeeze(1) - a.masked_fill(~keep, float("-inf")).logsumexp(dim=1)
    lp = torch.where(keep.gather(1, targets).squeeze(1), lp, torch.full_like(lp, float("-inf")))
    return scatter_rows(lp, out_pos, m.shape, z.dtype)


def sampling_log_mass(logits, mask, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    m, z, out_pos, a, keep = _support("sampling_log_mass", logits, mask, temperature, top_k, top_p, min_p)
    log_s = a.masked_fill(~keep, float("-inf")).logsumexp(dim=1) - a.logsumexp(dim=1)
    return scatter_rows(log_s, out_pos, m.shape, z.dtype)


MUTANT = Mutant(
    name="sampling_top_p_drops_crossing_token",
    bug_class="top-p cut on the inclusive cumulative probability: the token that crosses p is dropped",
    catalogue=5,
    cites=("reasoning-from-scratch#164", "fish-speech#1171", "esm#360", "arXiv:1904.09751"),
    signature={"sampling_logprobs": ("property", "golden"), "sampling_log_mass": ("property", "golden")},
    replace={"sampling_logprobs": sampling_logprobs, "sampling_log_mass": sampling_log_mass},
)
