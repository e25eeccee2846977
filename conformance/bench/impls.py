"""The implementations `rlspec bench` compares, and the inputs they run on.

Log-prob implementations (all compute per-token log π(x_t) of ``softmax(hidden @ weight.T)`` for N
predicting rows; the loss for forward + backward is ``Σ_t g_t·logp_t`` with a fixed random ``g``,
so gradients flow to ``hidden`` and ``weight``):

- ``refimpl``: :func:`refimpl.token_logprobs_from_hidden` on ``hidden [B, T+1, D]`` with a mask, its
  real API (row gather and [B, T] scatter included);
- ``naive``: ``log_softmax((h @ W.T).float()).gather`` (full logits, float32 softmax);
- ``trl``: TRL's ``selective_log_softmax`` on the full ``[B, T, V]`` logits (``h @ W.T``);
- ``trl_fused``: TRL's fused LM-head path (``trl.kernels.ChunkedLogProbFunction``, what
  ``add_fused_lm_head`` runs, with its chunk size);
- ``liger``: Liger-Kernel's chunked selective log-prob (``_ChunkedSelectiveLogProbFunction``, what its
  chunked GRPO/PPO losses run);
- ``cce``: Cut Cross-Entropy ``linear_cross_entropy(reduction="none")``, ``impl="torch_compile"`` on
  CPU and ``impl="cce"`` (its Triton kernels) on CUDA; ``logp = −loss``.

With ``entropy=True`` the implementations that can also return the entropy (``refimpl``, ``naive``,
``trl_fused``) compute log-probs and entropies, and the loss adds ``Σ_t g'_t·H_t``.

GAE implementations: ``refimpl`` (:func:`refimpl.gae`) and ``loop``, the reversed per-step loop of
verl's ``compute_gae_advantage_return`` (the TRL/OpenRLHF loop plus verl's mask carry, which the
spec's skipping of masked positions needs).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

LOGPROB_IMPLS = ("refimpl", "naive", "trl", "trl_fused", "liger", "cce")
ENTROPY_IMPLS = ("refimpl", "naive", "trl_fused")
GAE_IMPLS = ("refimpl", "loop")

# Scale of the logits: hidden ~ N(0, 1), weight ~ N(0, (3/√D)²), so z ~ N(0, 9) (peaked like a
# trained LM head, far from uniform). Timing does not depend on it.
LOGIT_STD = 3.0
# Tokens per row of the [B, T] layout.
ROW_TOKENS = 1024


def available(impl: str) -> tuple[bool, str]:
    """(installed, reason if not) for an implementation's package."""
    needs = {
        "trl": ("trl",),
        "trl_fused": ("trl",),
        "liger": ("liger_kernel",),
        "cce": ("cut_cross_entropy", "triton"),
    }.get(impl, ())
    for mod in needs:
        if importlib.util.find_spec(mod) is None:
            return False, f"not installed ({mod})"
    return True, ""


@dataclass
class LogprobInputs:
    hidden: torch.Tensor  # refimpl layout [B, T+1, D]
    rows: torch.Tensor  # the predicting rows, contiguous [N, D] (peers)
    weight: torch.Tensor  # [V, D]
    ids: torch.Tensor  # [B, T+1]
    targets: torch.Tensor  # [N]
    mask: torch.Tensor  # [B, T+1], True on columns 1..T
    g_lp: torch.Tensor  # [N] float32 upstream of the log-probs
    g_ent: torch.Tensor  # [N] float32 upstream of the entropies


def logprob_inputs(N: int, D: int, V: int, dtype: torch.dtype, device: str, impl: str, grad: bool, seed: int = 0) -> LogprobInputs:
    """Inputs in the layout ``impl`` needs; only that layout is allocated (the other is a view or empty)."""
    gen = torch.Generator().manual_seed(seed)
    T = min(N, ROW_TOKENS)
    if N % T:
        raise ValueError(f"N={N} must be a multiple of {T}")
    B = N // T
    weight = (torch.randn(V, D, generator=gen) * (LOGIT_STD / D**0.5)).to(dtype)
    ids = torch.randint(0, V, (B, T + 1), generator=gen)
    mask = torch.ones(B, T + 1, dtype=torch.bool)
    mask[:, 0] = False
    g_lp = torch.randn(N, generator=gen)
    g_ent = torch.randn(N, generator=gen)
    if impl == "refimpl":
        hidden = torch.randn(B, T + 1, D, generator=gen).to(dtype).to(device)
        rows = torch.empty(0)
    else:
        rows = torch.randn(N, D, generator=gen).to(dtype).to(device)
        hidden = torch.empty(0)
    weight, ids, mask = weight.to(device), ids.to(device), mask.to(device)
    targets = ids[:, 1:].reshape(N).contiguous()
    if grad:
        (hidden if impl == "refimpl" else rows).requires_grad_()
        weight.requires_grad_()
    return LogprobInputs(hidden, rows, weight, ids, targets, mask, g_lp.to(device), g_ent.to(device))


def logprob_fn(impl: str, x: LogprobInputs, entropy: bool) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None]]:
    """A callable returning (log-probs [N] or [B, T], entropies or None) for ``impl`` on ``x``."""
    if entropy and impl not in ENTROPY_IMPLS:
        raise ValueError(f"{impl} has no entropy output")
    N, D = x.targets.numel(), x.weight.shape[1]
    if impl == "refimpl":
        from refimpl import token_logprobs_and_entropy_from_hidden, token_logprobs_from_hidden

        if entropy:
            return lambda: _flat_pair(token_logprobs_and_entropy_from_hidden(x.hidden, x.weight, x.ids, x.mask))
        return lambda: (token_logprobs_from_hidden(x.hidden, x.weight, x.ids, x.mask)[:, 1:].reshape(N), None)
    if impl == "naive":

        def naive():
            logp_all = torch.log_softmax((x.rows @ x.weight.t()).float(), dim=-1)
            lp = logp_all.gather(1, x.targets.unsqueeze(1)).squeeze(1)
            ent = -(logp_all.exp() * logp_all).sum(-1) if entropy else None
            return lp, ent

        return naive
    if impl == "trl":
        from trl.trainer.utils import selective_log_softmax

        B = x.mask.shape[0]
        return lambda: (selective_log_softmax(x.rows.view(B, -1, D) @ x.weight.t(), x.targets.view(B, -1)).reshape(N), None)
    if impl == "trl_fused":
        from trl.kernels import ChunkedLogProbFunction
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

        outputs = ("log_probs", "entropy") if entropy else ("log_probs",)

        def trl_fused():
            out = ChunkedLogProbFunction.apply(
                x.rows, x.weight, None, x.targets, 1.0, _CHUNKED_LOGPROB_CHUNK_SIZE, None, 1.0, outputs
            )
            return out[0], out[1]

        return trl_fused
    if impl == "liger":
        from liger_kernel.chunked_loss.fused_linear_ppo import (
            _SELECTIVE_LOGPROB_VOCAB_CHUNK_SIZE,
            _ChunkedSelectiveLogProbFunction,
        )

        return lambda: (
            _ChunkedSelectiveLogProbFunction.apply(x.rows, x.weight, x.targets, None, 1.0, _SELECTIVE_LOGPROB_VOCAB_CHUNK_SIZE),
            None,
        )
    if impl == "cce":
        from cut_cross_entropy import linear_cross_entropy

        kind = "cce" if x.rows.device.type == "cuda" else "torch_compile"
        return lambda: (-linear_cross_entropy(x.rows, x.weight, x.targets, reduction="none", impl=kind), None)
    raise ValueError(f"unknown log-prob implementation {impl!r}")


def _flat_pair(pair: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lp, ent = pair
    return lp[:, 1:].reshape(-1), ent[:, 1:].reshape(-1)


def logprob_step(impl: str, x: LogprobInputs, mode: str, entropy: bool) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None]]:
    """One measured call: the forward (under no_grad) or forward + backward of ``Σ g·logp (+ Σ g'·H)``.
    Returns the (detached) outputs of the call; gradients are left in ``.grad``."""
    fn = logprob_fn(impl, x, entropy)
    if mode == "fwd":

        def fwd():
            with torch.no_grad():
                return fn()

        return fwd
    if mode != "fwd+bwd":
        raise ValueError(f"mode must be 'fwd' or 'fwd+bwd', not {mode!r}")

    def fwd_bwd():
        lp, ent = fn()
        loss = (lp.float() * x.g_lp).sum()
        if ent is not None:
            loss = loss + (ent.float() * x.g_ent).sum()
        loss.backward()
        return lp.detach(), None if ent is None else ent.detach()

    return fwd_bwd


def clear_grads(x: LogprobInputs) -> None:
    for t in (x.hidden, x.rows, x.weight):
        t.grad = None


def logprob_reference(x: LogprobInputs, rows: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 log-probs and entropies of the first ``rows`` predicting rows (on the rounded inputs)."""
    D = x.weight.shape[1]
    h = x.hidden[:, :-1].reshape(-1, D) if x.hidden.numel() else x.rows
    z = h[:rows].detach().double().cpu() @ x.weight.detach().double().cpu().t()
    logp_all = torch.log_softmax(z, dim=-1)
    lp = logp_all.gather(1, x.targets[:rows].cpu().unsqueeze(1)).squeeze(1)
    return lp, -(logp_all.exp() * logp_all).sum(-1)


# ----------------------------------------------------------------------------------------------
# GAE
# ----------------------------------------------------------------------------------------------


GAE_MASKS = ("gaps", "runs")


def gae_inputs(
    B: int, T: int, dtype: torch.dtype, device: str, seed: int = 0, mask_kind: str = "gaps"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rewards, values and a mask [B, T]: per row a prompt (1 to T/4 positions), a completion of
    T/2 to 3T/4 positions, then padding; ``mask_kind="gaps"`` masks ~10% of the completion's
    positions too (internal gaps, e.g. tool outputs), ``"runs"`` leaves the completion whole."""
    if mask_kind not in GAE_MASKS:
        raise ValueError(f"mask_kind must be one of {GAE_MASKS}, not {mask_kind!r}")
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(1, max(2, T // 4), (B, 1), generator=gen)
    length = torch.randint(T // 2, max(T // 2 + 1, T - T // 4), (B, 1), generator=gen)
    t = torch.arange(T)
    mask = (t >= start) & (t < start + length)
    holes = torch.rand(B, T, generator=gen) < 0.1
    if mask_kind == "gaps":
        mask &= ~holes
    rewards = torch.randn(B, T, generator=gen).to(dtype)
    values = torch.randn(B, T, generator=gen).to(dtype)
    return rewards.to(device), values.to(device), mask.to(device)


def gae_loop(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """verl ``compute_gae_advantage_return``: the reversed per-step loop with mask carry."""
    B, T = rewards.shape
    m = mask.to(rewards.dtype)
    nextvalues = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    lastgaelam = torch.zeros(B, dtype=rewards.dtype, device=rewards.device)
    reversed_adv = []
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * m[:, t] + (1 - m[:, t]) * lastgaelam
        reversed_adv.append(lastgaelam)
    return torch.stack(reversed_adv[::-1], dim=1) * m


def gae_fn(impl: str, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float) -> Callable[[], torch.Tensor]:
    if impl == "refimpl":
        from refimpl import gae

        return lambda: gae(rewards, values, mask, gamma=gamma, lam=lam)[0]
    if impl == "loop":
        return lambda: gae_loop(rewards, values, mask, gamma, lam)
    raise ValueError(f"unknown GAE implementation {impl!r}")


def gae_max_rel_err(adv: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> float:
    """max over rows of max_t |A − A_ref| / max_t |A_ref| (row-normwise, valid positions; rows whose
    reference is all 0 are compared absolutely)."""
    a, r = adv.detach().double().cpu(), ref.double().cpu()
    m = mask.cpu()
    err = ((a - r).abs() * m).amax(dim=1)
    scale = (r.abs() * m).amax(dim=1).clamp(min=1.0e-30)
    return float(torch.where(scale > 1.0e-30, err / scale, err).max())
