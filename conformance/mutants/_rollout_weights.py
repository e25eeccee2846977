"""A plain-torch rollout importance weight for the mutants that must change how it is computed
(`is_weight_attached`, `is_seq_stat_over_padding`): the spec's formula with two switches, `detach`
and `pad_in_sequence` (the sequence statistic also sums the masked positions). Not a mutant."""

import torch


def weights(old_logp, rollout_logp, mask, *, level="token", seq_stat="product", mode="truncate", lo=None, hi=2.0,
            log_ratio_clamp=None, batch_normalize=False, detach=True, pad_in_sequence=False):
    m = mask.bool()
    dtype = torch.promote_types(old_logp.dtype, torch.float32)
    raw = old_logp.to(dtype) - rollout_logp.to(dtype)
    delta = torch.where(m, raw, 0.0)
    if level == "token":
        s = delta
    else:
        summed = (raw if pad_in_sequence else delta).sum(dim=1, keepdim=True)
        n = m.sum(dim=1, keepdim=True).clamp(min=1)
        s = (summed if seq_stat == "product" else summed / n).expand_as(delta)
    if log_ratio_clamp is not None:
        s = s.clamp(-log_ratio_clamp, log_ratio_clamp)
    rho = torch.exp(s)
    if mode == "truncate" and (lo is not None or hi is not None):
        w = rho.clamp(min=lo, max=hi)
    elif mode == "mask":
        keep = torch.ones_like(rho, dtype=torch.bool)
        if lo is not None:
            keep &= rho >= lo
        if hi is not None:
            keep &= rho <= hi
        w = torch.where(keep, rho, 0.0)
    else:  # "none", or truncation without bounds
        w = rho
    w = torch.where(m, w, 0.0)
    if batch_normalize:
        if level == "token":
            mean = w.sum() / m.sum().clamp(min=1)
        else:
            rows = m.any(dim=1)
            mean = w.max(dim=1).values[rows].sum() / rows.sum().clamp(min=1)
        w = torch.where(mean > 1e-8, w / mean, w)
    w = w.detach() if detach else w
    return w.to(old_logp.dtype)
