"""The torchtune adapter: torchtune's RL math, called through the installed torchtune, in spec v1 conventions.

torchtune runs in its own environment (``rlspec frameworks install torchtune``: ``torchtune==0.6.1
--no-deps`` with torch 2.13, torchao 0.15.0 and what ``import torchtune`` needs; see ``requirements.txt``)
and is driven through a worker process (``conformance/frameworks/subprocess_worker.py``; the torchtune
calls are in ``conformance/frameworks/torchtune/ops.py``; what the subprocess adapters share is
``conformance/frameworks/subprocess_adapter.py``). A NumPy adapter: values come from torchtune and each
``<function>_grad`` is torchtune's autograd gradient for the given upstream.

What is called (torchtune 0.6.1; paths relative to ``torchtune/``):

| spec function | torchtune |
|---|---|
| ``token_logprobs`` | ``rlhf/sequence_processing.py::logits_to_logprobs`` (:84-101; ``log_softmax(logits / temperature)``, it divides itself) |
| ``kl_penalty`` | ``rlhf/rewards.py::get_rewards_ppo`` (:49-94): its ``kl = logprobs - ref_logprobs`` (:79), k1 only |
| ``rlhf_token_rewards`` | ``get_rewards_ppo``: ``total_reward`` = ``-kl_coeff * kl`` plus the score scattered at ``valid_score_idxs`` (:87-90), given each row's last valid token |
| ``gae`` | ``rlhf/rewards.py::estimate_advantages`` (:164-220): ``returns``; advantages = ``returns - values`` (see below) |
| ``whiten`` | ``rlhf/rewards.py::whiten`` (:139-161) with the spec's ``shift_mean`` inverted (see below) |
| ``ppo_token_loss`` | ``rlhf/loss/ppo.py::PPOLoss`` (:14-122, ``epsilon``): the per-token matrix it averages |
| ``value_token_loss`` | ``PPOLoss`` (``value_clip_range``): ½ × the matrix it averages (the ½ is applied after ``masked_mean``, :109-113) |
| ``ppo_clipped_mask`` | ``PPOLoss``: the per-token ``clipfrac`` indicator it averages (``policy_losses_clipped > policy_losses_unclipped``, :85-87) |
| ``aggregate`` | ``rlhf/rewards.py::masked_mean`` (:97-112), the reduction of ``PPOLoss``: ``mode="token_mean"`` |

Conventions this adapter converts (the checks never do):
- torchtune's tensors are response-only ``[b, response_len]`` with bool masks (True = take part); the
  spec's ``[B, T]`` arrays are passed as the response, masked inputs sent as 0, masked outputs returned as
  0 (``spec_io``). ``logits_to_logprobs`` gets only the rows that predict a valid token.
- ``gae``: ``estimate_advantages`` runs the GAE recursion over every position of its rows (:197-206) and
  uses ``masks`` only for the whitening. A trajectory of torchtune's PPO recipe never has a masked
  position inside a response (``truncate_sequence_at_first_stop_token`` pads after the first stop token,
  and the recipe zeroes the values and the KL there, recipes/ppo_full_finetune_single_device.py:819-867),
  so each row's valid positions are sent left-justified, zeros after them, as such a trajectory holds
  them; the results go back to the positions they came from. ``estimate_advantages`` returns whitened
  advantages (``whiten(advantages, mask=masks)``, :216) and ``returns = advantages + values`` taken before
  the whitening (:213), so the spec's advantages are ``returns - values``; the whitened output is the
  framework row ``torchtune.estimate_advantages[...]``.
- ``whiten``: torchtune's ``shift_mean=True`` *adds the mean back* (``if shift_mean: whitened += mean``,
  :159-160), the reverse of the TRL function it names as its source and of the spec's keyword; the spec's
  ``shift_mean`` is passed as ``shift_mean=not shift_mean``. The variance is always unbiased
  (``masked_var`` with its default ``unbiased=True``, :155) and the eps 1e-8 (:158): other ``std_ddof`` /
  ``eps`` values are not implemented.
- ``rlhf_token_rewards``: the score goes to ``valid_score_idxs`` = the row's last valid token (the spec's
  place); where the PPO recipe puts it (``value_seq_idxs``, one past the last valid token) is the
  framework row ``torchtune.recipe.rewards``. An empty row's score is sent to position 0 and dropped.
- ``ppo_token_loss``: ``PPOLoss`` has one symmetric ``epsilon`` and no dual clip: ``eps_low != eps_high``
  and ``dual_clip`` are not implemented.
- ``value_token_loss(clip=None)`` is ``value_clip_range=inf`` (``clamp(V, old - inf, old + inf) = V``).
- ``aggregate``: ``masked_mean(x, mask)`` is the token mean; the other modes and global counts
  (``num_tokens``/``num_seqs``) have no torchtune function. ``micro_batched_loss``: the recipe's
  ``ppo_step`` divides each micro-batch's ``PPOLoss`` (a token mean over that micro-batch) by
  ``gradient_accumulation_steps`` (:1118); the single-device recipe has no data parallelism.

Not in torchtune 0.6.1 ("not implemented" rows): ``token_entropy`` (no entropy function in
``torchtune/rlhf``), ``gspo_token_loss``, ``cispo_token_loss`` and the spec v1.1 quantities (no KL
controller, no rollout correction, no other policy loss or estimator; the recipe's reward penalties are
the framework row ``torchtune.recipe.rewards``). GRPO: the release wheel does not ship ``torchtune/dev``
(``GRPOLoss``, ``GRPOSimpleLoss``, ``GRPOCompletionLoss`` live in ``torchtune/dev/grpo/loss.py`` in the
repository), see ``README.md``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.frameworks import spec_io as io
from conformance.frameworks.subprocess_adapter import SubprocessAdapter


class TorchtuneAdapter(SubprocessAdapter):
    """Spec v1 adapter for torchtune (see the module docstring for what each function calls)."""

    name = "torchtune"
    dtypes = ("float64", "float32")
    checks_module = "conformance.frameworks.torchtune.checks"

    LOGPROBS_OP = "logits_to_logprobs"
    POLICY_ARRAYS = ("pi_logprobs", "pi_old_logprobs", "padding_masks")
    VALUE_ARRAYS = ("phi_values", "phi_old_values", "returns", "value_padding_masks")

    # what torchtune 0.6.1 has no function for
    token_entropy = None
    token_entropy_grad = None
    gspo_token_loss = None
    gspo_token_loss_grad = None
    kl_controller_update = None

    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any], float]:
        # logits_to_logprobs divides by the temperature itself (its gradient carries the 1/temperature)
        return rows, {"temperature": float(temperature)}, 1.0

    # ------------------------------------------------------------------------------------------
    # kl.estimator / reward.rlhf: get_rewards_ppo
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def _last_valid(m: np.ndarray) -> np.ndarray:
        """Each row's last valid position (0 for an empty row, always a masked column)."""
        return np.where(m.any(axis=1), m.shape[1] - 1 - np.argmax(m[:, ::-1], axis=1), 0).astype(np.int64)

    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        if estimator != "k1":
            raise NotImplementedError(f"torchtune's only KL is get_rewards_ppo's kl = logprobs - ref_logprobs "
                                      f"(rlhf/rewards.py:79), k1; no {estimator}")
        arrays = {"scores": np.zeros(lp.shape[0], dtype=lp.dtype), "logprobs": io.clean(lp, m),
                  "ref_logprobs": io.clean(ref, m)}
        return self._token_op("get_rewards_ppo", arrays, {"kl_coeff": 0.0}, "kl", "logprobs", m, lp.dtype, upstream)

    def rlhf_token_rewards(self, scores: Any, logp: Any, ref_logp: Any, mask: Any, *, kl_coef: float,
                           estimator: str = "k1") -> np.ndarray:
        fn = "rlhf_token_rewards"
        lp, ref, m = self._kl_inputs(logp, ref_logp, mask, estimator)
        s = io.row_scores(fn, scores, lp.shape[0]).astype(lp.dtype)
        io.check_finite(fn, "logp", lp, m)
        io.check_finite(fn, "ref_logp", ref, m)
        kl_coef = io.number(fn, "kl_coef", kl_coef, low=None)
        if estimator != "k1":
            raise NotImplementedError(f"get_rewards_ppo's KL is logprobs - ref_logprobs (rlhf/rewards.py:79), k1; no {estimator}")
        arrays = {"scores": s, "logprobs": io.clean(lp, m), "ref_logprobs": io.clean(ref, m),
                  "valid_score_idxs": self._last_valid(m)}
        out = self._worker.call("get_rewards_ppo", arrays, {"kl_coeff": float(kl_coef)})["outputs"]["total_reward"]
        return io.masked_out(out, m, lp.dtype)

    # ------------------------------------------------------------------------------------------
    # adv.gae / adv.whiten: estimate_advantages, whiten
    # ------------------------------------------------------------------------------------------

    @staticmethod
    def left_justify(m: np.ndarray, *xs: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
        """Each row's valid positions moved to the front (a trajectory's layout): (the ``[B, L]`` validity,
        the moved arrays with 0 after each row's valid part, the ``[B, L]`` column each entry came from)."""
        n = m.sum(axis=1)
        L = max(int(n.max(initial=0)), 1)
        valid = np.arange(L)[None, :] < n[:, None]
        source = np.zeros((m.shape[0], L), dtype=np.int64)
        for b in range(m.shape[0]):
            source[b, : n[b]] = np.flatnonzero(m[b])
        moved = []
        for x in xs:
            out = np.zeros((m.shape[0], L), dtype=x.dtype)
            out[valid] = x[m]
            moved.append(out)
        return valid, moved, source

    @staticmethod
    def put_back(y: np.ndarray, valid: np.ndarray, source: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        out = np.zeros(shape, dtype=np.float64)
        rows = np.broadcast_to(np.arange(shape[0])[:, None], valid.shape)
        out[rows[valid], source[valid]] = np.asarray(y, dtype=np.float64)[valid]
        return out

    def estimate_advantages(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
        """``estimate_advantages`` as torchtune returns it, (whitened advantages, returns), on each row's valid
        positions left-justified (module docstring), in the spec's layout."""
        fn = "gae"
        r, v, m = io.token_arrays(fn, mask, finite=True, token_rewards=token_rewards, values=values)
        gamma, lam = io.unit_interval(fn, "gamma", gamma), io.unit_interval(fn, "lam", lam)
        if r.shape[0] == 0:
            return np.zeros(r.shape, dtype=r.dtype), np.zeros(r.shape, dtype=r.dtype)
        valid, (rr, vv), source = self.left_justify(m, r, v)
        out = self._worker.call("estimate_advantages", {"values": vv, "rewards": rr, "masks": valid},
                                {"gamma": float(gamma), "lmbda": float(lam)})["outputs"]
        adv = self.put_back(out["advantages"], valid, source, m.shape)
        ret = self.put_back(out["returns"], valid, source, m.shape)
        return io.masked_out(adv, m, r.dtype), io.masked_out(ret, m, r.dtype)

    def gae(self, token_rewards: Any, values: Any, mask: Any, *, gamma: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        _, returns = self.estimate_advantages(token_rewards, values, mask, gamma=gamma, lam=lam)
        m = io.check_mask("gae", mask, returns.shape)
        advantages = np.asarray(returns, dtype=np.float64) - io.clean(np.asarray(values, dtype=np.float64), m)
        return io.masked_out(advantages, m, returns.dtype), returns

    def torchtune_whiten(self, x: Any, mask: Any, *, shift_mean: bool) -> np.ndarray:
        """torchtune's ``whiten(x, mask, shift_mean)`` with its own keyword (True adds the mean back)."""
        a, m = io.token_arrays("whiten", mask, finite=True, x=x)
        out = self._worker.call("whiten", {"x": io.clean(a, m), "mask": m}, {"shift_mean": bool(shift_mean)})["outputs"]["out"]
        return io.masked_out(out, m, a.dtype)

    def whiten(self, x: Any, mask: Any, *, shift_mean: bool = True, std_ddof: int = 1, eps: float = 1e-8) -> np.ndarray:
        io.boolean("whiten", "shift_mean", shift_mean)
        if std_ddof != 1:
            raise NotImplementedError("torchtune's whiten always takes the unbiased variance (masked_var(..., unbiased=True), "
                                      "rlhf/rewards.py:155)")
        if eps != 1e-8:
            raise NotImplementedError("torchtune's whiten adds 1e-8 to the variance, fixed (rlhf/rewards.py:158)")
        return self.torchtune_whiten(x, mask, shift_mean=not shift_mean)

    # ------------------------------------------------------------------------------------------
    # loss.ppo / loss.value: PPOLoss; agg: masked_mean
    # ------------------------------------------------------------------------------------------

    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        if dual_clip is not None:
            raise NotImplementedError("PPOLoss has no dual clip (rlhf/loss/ppo.py:79-94)")
        if eps_low != eps_high:
            raise NotImplementedError("PPOLoss clips with one epsilon, clamp(ratio, 1 - epsilon, 1 + epsilon) (rlhf/loss/ppo.py:80)")
        return {"init": {"epsilon": float(eps_low)}}

    def ppo_clipped_mask(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2,
                         eps_high: float = 0.2, dual_clip: float | None = None, log_ratio_clamp: float | None = None) -> np.ndarray:
        """``PPOLoss``'s per-token clip indicator, the first array it hands ``masked_mean`` (ppo.py:85-92)."""
        fn = "ppo_clipped_mask"
        if log_ratio_clamp is not None:
            raise NotImplementedError("PPOLoss takes exp(pi_logprobs - pi_old_logprobs) unclamped (rlhf/loss/ppo.py:79)")
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        arrays = {"pi_logprobs": io.clean(lp, m), "pi_old_logprobs": io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), "padding_masks": m}
        out = self._worker.call("policy_loss", arrays, self._ppo_params(eps_low, eps_high, dual_clip))["outputs"]
        return io.masked_out(out["clipped"], m, lp.dtype)

    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        raise NotImplementedError("torchtune 0.6.1 has no GSPO loss")

    def _value_params(self, clip: float | None) -> dict[str, Any]:
        return {"init": {"value_clip_range": float("inf") if clip is None else float(clip)}}

    def _aggregate(self, token_loss: Any, mask: Any, mode: str, num_tokens: Any, num_seqs: Any, upstream: Any = None) -> Any:
        fn = "aggregate"
        x, m = io.token_arrays(fn, mask, finite=True, token_loss=token_loss)
        io.agg_mode(fn, mode)
        if mode != "token_mean":
            raise NotImplementedError(f"torchtune reduces its losses with masked_mean, the token mean (rlhf/rewards.py:97-112); no {mode}")
        if num_tokens is not None or num_seqs is not None:
            raise NotImplementedError("masked_mean counts the tokens it is given (rlhf/rewards.py:112): no global count")
        return self._scalar_loss("masked_mean", {"x": io.clean(x, m), "mask": m}, {}, "x", m, x.dtype, upstream)

    def aggregate(self, token_loss: Any, mask: Any, *, mode: str, norm_length: float | None = None,
                  num_tokens: Any = None, num_seqs: Any = None) -> Any:
        return self._aggregate(token_loss, mask, mode, num_tokens, num_seqs)

    def aggregate_grad(self, token_loss: Any, mask: Any, upstream: Any, *, mode: str, norm_length: float | None = None,
                       num_tokens: Any = None, num_seqs: Any = None) -> Any:
        return self._aggregate(token_loss, mask, mode, num_tokens, num_seqs, upstream)

    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """``ppo_step``'s loss per micro-batch: ``masked_mean`` over the micro-batch, divided by
        ``gradient_accumulation_steps`` = the number of chunks (recipes/ppo_full_finetune_single_device.py:1107-1118)."""
        fn = "micro_batched_loss"
        if dp_world_size != 1:
            raise NotImplementedError("torchtune's PPO recipe is single-device (ppo_full_finetune_single_device.py): "
                                      "no data-parallel ranks")
        if mode != "token_mean":
            raise NotImplementedError(f"PPOLoss reduces with masked_mean, the token mean; no {mode}")
        xs, ms = io.chunk_arrays(fn, chunks, masks)
        steps = len(xs)
        out = []
        for x, m in zip(xs, ms):
            up = None if upstream is None else float(upstream) / steps
            r = self._scalar_loss("masked_mean", {"x": io.clean(x, m), "mask": m}, {}, "x", m, x.dtype, up)
            out.append(r / x.dtype.type(steps) if upstream is None else r)
        return out


__all__ = ["TorchtuneAdapter"]
