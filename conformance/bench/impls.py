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

GAE implementations (each returns the advantages, 0 at masked positions, and computes the returns too):

- ``refimpl``: :func:`refimpl.gae`;
- ``loop``: the reversed per-step loop of verl's ``compute_gae_advantage_return`` (the TRL/OpenRLHF
  loop plus verl's mask carry, which the spec's skipping of masked positions needs);
- ``torchrl_loop``, ``torchrl_vec``: torchrl 0.14.1's ``generalized_advantage_estimate`` and
  ``vec_generalized_advantage_estimate`` (``torchrl/objectives/value/functional.py``:120 and :271; the
  first a reversed loop over time steps, :173, the second ``_fast_vec_gae``, :211: the batch is split
  into trajectories at the done flags and convolved with [1, γλ, (γλ)², …] truncated below 1e-7, the
  whole trajectory length at γλ = 1, :183-206), called on the spec's rows as a user maps them
  (:func:`torchrl_trajectories`): torchrl has no mask, so a row's valid tokens must form one run
  ending in a ``done`` (= ``terminated``) step; rows with masked gaps are compacted first
  (:func:`compact_rows`) and the results scattered back. The row's time is the user's whole code
  (mapping, call, scatter back); the worker also times the call alone. torchrl runs in its own
  environment (``rlspec frameworks install torchrl``) when it is not importable here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch

LOGPROB_IMPLS = ("refimpl", "naive", "trl", "trl_fused", "liger", "cce")
ENTROPY_IMPLS = ("refimpl", "naive", "trl_fused")
GAE_IMPLS = ("refimpl", "loop", "torchrl_loop", "torchrl_vec")
# torchrl's functions behind the torchrl GAE rows (torchrl/objectives/value/functional.py)
TORCHRL_GAE = {"torchrl_loop": "generalized_advantage_estimate", "torchrl_vec": "vec_generalized_advantage_estimate"}

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


def logprob_fn(
    impl: str, x: LogprobInputs, entropy: bool, budget_mb: float | None = None
) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None]]:
    """A callable returning (log-probs [N] or [B, T], entropies or None) for ``impl`` on ``x``;
    ``budget_mb``: refimpl's ``memory_budget`` in MiB (None: its lean default)."""
    if entropy and impl not in ENTROPY_IMPLS:
        raise ValueError(f"{impl} has no entropy output")
    N, D = x.targets.numel(), x.weight.shape[1]
    if impl == "refimpl":
        from refimpl import token_logprobs_and_entropy_from_hidden, token_logprobs_from_hidden

        budget = None if budget_mb is None else int(budget_mb * 2**20)
        if entropy:
            return lambda: _flat_pair(token_logprobs_and_entropy_from_hidden(x.hidden, x.weight, x.ids, x.mask, memory_budget=budget))
        return lambda: (token_logprobs_from_hidden(x.hidden, x.weight, x.ids, x.mask, memory_budget=budget)[:, 1:].reshape(N), None)
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


def logprob_step(
    impl: str, x: LogprobInputs, mode: str, entropy: bool, budget_mb: float | None = None
) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None]]:
    """One measured call: the forward (under no_grad) or forward + backward of ``Σ g·logp (+ Σ g'·H)``.
    Returns the (detached) outputs of the call; gradients are left in ``.grad``."""
    if budget_mb is not None and impl != "refimpl":
        raise ValueError(f"a memory budget is a refimpl option, not {impl}'s")
    fn = logprob_fn(impl, x, entropy, budget_mb)
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


def compact_rows(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each row's valid tokens moved, in order, to the front of the row: (rewards, values, mask of the
    compacted rows, the gather index to scatter results back with)."""
    index = torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)  # valid positions first, in order
    compact = torch.arange(mask.shape[1], device=mask.device) < mask.sum(dim=1, keepdim=True)
    return rewards.gather(1, index), values.gather(1, index), compact, index


def torchrl_trajectories(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The spec's rows, each row's valid tokens one run, as torchrl's value functions take them, all
    ``[B, T, 1]`` (time at dim −2): (state_value, next_state_value, reward, done); ``done`` (also
    passed as ``terminated``, so no value is bootstrapped after it) is True at each row's last valid
    token, ``next_state_value`` is the values shifted by one (0 after the row). The positions before
    and after the run are read by no valid advantage."""
    nxt = torch.zeros_like(values)
    nxt[:, :-1] = values[:, 1:]
    done = mask.clone()
    done[:, :-1] &= ~mask[:, 1:]
    return values.unsqueeze(-1), nxt.unsqueeze(-1), rewards.unsqueeze(-1), done.unsqueeze(-1)


def _torchrl_gae(
    impl: str, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float, mask_kind: str
) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """(the user's whole code: mapping, torchrl's call, advantages and returns scattered back; the
    call alone on inputs mapped once)."""
    from torchrl.objectives.value import functional

    fn = getattr(functional, TORCHRL_GAE[impl])

    def call(v, nxt, r, done):
        return fn(gamma, lam, v, nxt, r, done, done)

    def user() -> torch.Tensor:
        if mask_kind == "runs":
            adv, target = call(*torchrl_trajectories(rewards, values, mask))
            return torch.where(mask, adv[..., 0], 0.0), torch.where(mask, target[..., 0], 0.0)
        r_c, v_c, m_c, index = compact_rows(rewards, values, mask)
        adv, target = call(*torchrl_trajectories(r_c, v_c, m_c))
        A = torch.zeros_like(rewards).scatter_(1, index, torch.where(m_c, adv[..., 0], 0.0))
        R = torch.zeros_like(rewards).scatter_(1, index, torch.where(m_c, target[..., 0], 0.0))
        return A, R

    if mask_kind == "runs":
        mapped = torchrl_trajectories(rewards, values, mask)
    else:
        r_c, v_c, m_c, _ = compact_rows(rewards, values, mask)
        mapped = torchrl_trajectories(r_c, v_c, m_c)
    return (lambda: user()[0]), (lambda: call(*mapped)[0])


def gae_fn(
    impl: str, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float,
    mask_kind: str = "gaps",
) -> Callable[[], torch.Tensor]:
    """A callable returning the advantages [B, T] (0 at masked positions) of ``impl``; ``mask_kind``
    (see :func:`gae_inputs`) is the layout a user of torchrl knows: "runs" is mapped directly, "gaps"
    through :func:`compact_rows` (right for any mask)."""
    if impl == "refimpl":
        from refimpl import gae

        return lambda: gae(rewards, values, mask, gamma=gamma, lam=lam)[0]
    if impl == "loop":
        return lambda: gae_loop(rewards, values, mask, gamma, lam)
    if impl in TORCHRL_GAE:
        return _torchrl_gae(impl, rewards, values, mask, gamma, lam, mask_kind)[0]
    raise ValueError(f"unknown GAE implementation {impl!r}")


def gae_call_fn(
    impl: str, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float, mask_kind: str
) -> Callable[[], torch.Tensor] | None:
    """For a torchrl row: its function alone on the inputs mapped once (None for the other rows)."""
    return _torchrl_gae(impl, rewards, values, mask, gamma, lam, mask_kind)[1] if impl in TORCHRL_GAE else None


def gae_bytes(B: int, T: int, dtype: torch.dtype = torch.float32) -> int:
    """Bytes a GAE call must move at least: read the rewards, values (``dtype``) and the bool mask,
    write the advantages and returns (``dtype``)."""
    size = torch.empty((), dtype=dtype).element_size()
    return B * T * (4 * size + 1)


def gae_max_rel_err(adv: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor) -> float:
    """max over rows of max_t |A − A_ref| / max_t |A_ref| (row-normwise, valid positions; rows whose
    reference is all 0 are compared absolutely)."""
    a, r = adv.detach().double().cpu(), ref.double().cpu()
    m = mask.cpu()
    err = ((a - r).abs() * m).amax(dim=1)
    scale = (r.abs() * m).amax(dim=1).clamp(min=1.0e-30)
    return float(torch.where(scale > 1.0e-30, err / scale, err).max())
