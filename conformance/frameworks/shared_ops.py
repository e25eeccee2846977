"""What the worker ops modules (``conformance/frameworks/<name>/ops.py``) of more than one framework share.

Runs inside a framework's environment, where rlspec itself is not installed: the worker
(``subprocess_worker.py``) loads this file by path before a framework's ``ops.py`` and registers it as
the module ``rlspec_shared_ops``, which that ``ops.py`` imports inside its ``load()``. Only the standard
library at module level; torch is imported where it is used.
"""

from __future__ import annotations

import contextlib
from typing import Any


@contextlib.contextmanager
def clip_cov_draws(draws: Any):
    """Clip-Cov's random cut decided by ``draws`` ``[B, R]`` (None: nothing is wrapped, ``seen`` stays
    empty). verl (``core_algos.py:1743-1845``) and SkyRL (``ppo_utils.py:881-941``) cut
    ``top_k_idx[perm[:n]]`` with ``top_k_idx = torch.nonzero(candidates)`` (row-major) and ``perm =
    torch.randperm(len(top_k_idx))``. For the duration of the call ``torch.nonzero`` remembers the last
    ``[K, 2]`` index list it returned (the candidate list), ``torch.randperm(K)`` returns the stable argsort
    of the draws at those K positions (refusing any other K), so ``perm[:n]`` are the candidates of
    smallest draw, ties to the earlier one, and ``torch.ones_like`` remembers its first result, the
    framework's ``corr``, whose zeros after the call are the tokens cut: ``seen["corr"]``. The three
    functions are restored after the call."""
    if draws is None:
        yield {}
        return
    import torch

    seen: dict[str, Any] = {}
    real = (torch.nonzero, torch.randperm, torch.ones_like)

    def nonzero(*args: Any, **kwargs: Any) -> Any:
        out = real[0](*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[1] == 2:
            seen["candidates"] = out
        return out

    def randperm(n: int, *args: Any, **kwargs: Any) -> Any:
        idx = seen.get("candidates")
        if idx is None or len(idx) != n:
            raise RuntimeError(f"torch.randperm({n}) called without a candidate list of {n} from torch.nonzero")
        return torch.sort(draws[idx[:, 0], idx[:, 1]], stable=True).indices

    def ones_like(*args: Any, **kwargs: Any) -> Any:
        out = real[2](*args, **kwargs)
        seen.setdefault("corr", out)
        return out

    torch.nonzero, torch.randperm, torch.ones_like = nonzero, randperm, ones_like
    try:
        yield seen
    finally:
        torch.nonzero, torch.randperm, torch.ones_like = real


__all__ = ["clip_cov_draws"]
