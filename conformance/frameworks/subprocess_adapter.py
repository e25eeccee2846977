"""What the worker adapters (every framework run in its own environment) share: a spec v1 NumPy adapter
whose values come from a framework run in its own environment, through a worker process
(``conformance/frameworks/subprocess_worker.py``), and whose ``<function>_grad`` is the framework's
autograd gradient for the given upstream.

:class:`SubprocessAdapter` starts the worker (a missing environment is the ``AdapterLoadError`` of a
"not installed" row), applies the masked-position policy of ``conformance/frameworks/spec_io.py`` on
the way in and out, and shapes the calls the two frameworks have in common: log-probs and entropies
on the rows that predict a valid token, the per-token policy and value losses, the KL estimators and
the per-micro-batch loss. A subclass (``verl_adapter.py``, ``openrlhf_adapter.py``) names its
framework, its ops and their argument names, and converts the spec's settings to the framework's.

Importing this module never starts a framework; constructing an adapter does.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from conformance.runner.loading import AdapterLoadError
from conformance.frameworks.subprocess_worker import FrameworkUnavailable, get_worker
from conformance.frameworks import spec_io as io


class SubprocessAdapter(ABC):
    """A spec v1 adapter backed by the worker of the framework ``name``.

    A subclass sets ``name``, ``dtypes``, ``checks_module`` (its ``extra_rows(adapter, seed)``), the ops
    ``LOGPROBS_OP`` / ``ENTROPY_OP`` (on rows of logits, outputs ``logp`` / ``entropy``), the argument
    names ``POLICY_ARRAYS`` (logp, old_logp, mask) and ``VALUE_ARRAYS`` (values, old_values, returns,
    mask) of its ``policy_loss`` / ``value_loss`` ops, and implements ``_logprob_request``,
    ``_ppo_params``, ``_gspo_params``, ``_value_params``, ``_kl`` and ``_micro_batched`` (and
    ``_entropy_request`` where ``ENTROPY_OP`` is not given ``logits / temperature``)."""

    name: str
    dtypes: tuple[str, ...]
    checks_module: str
    spec_version = "v1"
    array_api = "numpy"
    supports_grad = True
    accepts_variants = False

    LOGPROBS_OP: str
    ENTROPY_OP: str
    POLICY_ARRAYS: tuple[str, str, str]
    VALUE_ARRAYS: tuple[str, str, str, str]

    def __init__(self) -> None:
        try:
            self._worker = get_worker(self.name)
        except FrameworkUnavailable as exc:  # the "not installed" row of `rlspec check`
            hint = "" if "rlspec frameworks install" in str(exc) else f" (run `rlspec frameworks install {self.name}`)"
            raise AdapterLoadError(f"adapter '{self.name}': cannot import '{self.name}': {exc}{hint}") from exc
        self.version = self._worker.version
        self.environment = self._worker.origin

    def call(self, op: str, arrays: dict[str, Any], params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """One raw framework call (the framework's conventions), for the framework checks."""
        return self._worker.call(op, arrays, params, **kw)

    def extra_rows(self, seed: int) -> list[Any]:
        return importlib.import_module(self.checks_module).extra_rows(self, seed)

    # ------------------------------------------------------------------------------------------
    # ctrl.kl: the framework's AdaptiveKLController (verl core_algos.py:153, OpenRLHF kl_controller.py:4)
    # ------------------------------------------------------------------------------------------

    def kl_controller_update(self, kl_coef: float, current_kl: float, n_steps: int, *, target: float,
                             horizon: float) -> float:
        """A fresh ``AdaptiveKLController(kl_coef, target, horizon)`` of the framework, one
        ``update(current_kl, n_steps)``, its ``value`` (the worker's ``kl_controller`` op)."""
        fn = "kl_controller_update"
        params: dict[str, Any] = {}
        for name, value in (("kl_coef", kl_coef), ("current_kl", current_kl), ("target", target), ("horizon", horizon)):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise io.fail(fn, name, f"expected a real number, got {value!r}", TypeError)
            params[name] = float(value)
        if isinstance(n_steps, (bool, np.bool_)) or not isinstance(n_steps, (int, np.integer)):
            raise io.fail(fn, "n_steps", f"expected an int, got {n_steps!r}", TypeError)
        params["n_steps"] = int(n_steps)
        return float(self._worker.call("kl_controller", {}, params)["outputs"]["value"])

    # ------------------------------------------------------------------------------------------
    # the two shapes of a worker call: per-token [B, T] arrays, a scalar loss
    # ------------------------------------------------------------------------------------------

    def _token_op(self, op: str, arrays: dict[str, Any], params: dict[str, Any] | None, output: str, wrt: str,
                  m: np.ndarray, dtype: Any, upstream: Any) -> np.ndarray:
        """``op``'s ``[B, T]`` ``output`` (0 where masked) in ``dtype``, or with ``upstream`` (sent with 0
        where masked) the gradient w.r.t. ``arrays[wrt]``."""
        if upstream is None:
            return io.masked_out(self._worker.call(op, arrays, params)["outputs"][output], m, dtype)
        up = io.clean(np.asarray(upstream, dtype=dtype), m)
        g = self._worker.call(op, arrays, params, wrt=[wrt], upstream={output: up})["grads"][wrt]
        return io.masked_out(g, m, dtype)

    def _scalar_loss(self, op: str, arrays: dict[str, Any], params: dict[str, Any], wrt: str, m: np.ndarray, dtype: Any,
                     upstream: Any, value_type: Any = None) -> Any:
        """``op``'s scalar ``loss`` as ``value_type`` (default: ``dtype``'s scalar type), or with ``upstream``
        (a number) the gradient w.r.t. ``arrays[wrt]``, 0 where masked, in ``dtype``."""
        if upstream is None:
            return (value_type or dtype.type)(self._worker.call(op, arrays, params)["outputs"]["loss"])
        g = self._worker.call(op, arrays, params, wrt=[wrt], upstream={"loss": float(upstream)})["grads"][wrt]
        return io.masked_out(g, m, dtype)

    # ------------------------------------------------------------------------------------------
    # logprob.token / logprob.entropy: only the rows that predict a valid token are sent
    # ------------------------------------------------------------------------------------------

    def _logit_rows(self, fn: str, logits: Any, mask: Any, temperature: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validated ``logits`` [B, T, V], the rows ``logits[:, :-1][mask[:, 1:]]`` [N, V] and that selector."""
        logits = io.float_array(fn, "logits", logits, 3)
        mask = io.check_mask(fn, mask, logits.shape[:2])
        if not temperature > 0:
            raise io.fail(fn, "temperature", f"expected > 0, got {temperature!r}")
        rows, valid = io.compact_rows(logits, mask)
        return logits, rows, valid

    def _row_op(self, op: str, arrays: dict[str, Any], params: dict[str, Any] | None, output: str, logits: np.ndarray,
                valid: np.ndarray, upstream: Any, grad_scale: float) -> np.ndarray:
        """``op`` on the rows ``arrays["logits"]``: its ``[N]`` ``output`` at the token-aligned ``[B, T]``
        positions, or with ``upstream`` ``[B, T]`` the gradient w.r.t. the rows, divided by ``grad_scale``,
        as ``[B, T, V]``."""
        B, T, _ = logits.shape
        if upstream is None:
            out = self._worker.call(op, arrays, params)["outputs"][output]
            return io.scatter_rows(out, valid, B, T, logits.dtype)
        up = np.asarray(upstream, dtype=logits.dtype)[:, 1:][valid]
        g = self._worker.call(op, arrays, params, wrt=["logits"], upstream={output: up})["grads"]["logits"]
        return io.scatter_row_grads(g / grad_scale, valid, logits.shape, logits.dtype)

    @abstractmethod
    def _logprob_request(self, rows: np.ndarray, temperature: float) -> tuple[np.ndarray, dict[str, Any] | None, float]:
        """(the rows ``LOGPROBS_OP`` is given, its params, what its gradient is divided by)."""

    def _logprobs(self, logits: Any, input_ids: Any, mask: Any, temperature: float, upstream: Any = None) -> np.ndarray:
        fn = "token_logprobs"
        logits, rows, valid = self._logit_rows(fn, logits, mask, temperature)
        ids = np.asarray(input_ids)
        if ids.dtype.kind not in "iu":
            raise io.fail(fn, "input_ids", f"expected an integer array, got {ids.dtype}", TypeError)
        if rows.shape[0] == 0:
            return np.zeros(logits.shape[:2] if upstream is None else logits.shape, dtype=logits.dtype)
        sent, params, grad_scale = self._logprob_request(rows, temperature)
        arrays = {"logits": sent, "labels": ids[:, 1:][valid].astype(np.int64)}
        return self._row_op(self.LOGPROBS_OP, arrays, params, "logp", logits, valid, upstream, grad_scale)

    def token_logprobs(self, logits: Any, input_ids: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._logprobs(logits, input_ids, mask, temperature)

    def token_logprobs_grad(self, logits: Any, input_ids: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._logprobs(logits, input_ids, mask, temperature, upstream)

    def _entropy_request(self, rows: np.ndarray, temperature: float) -> tuple[dict[str, np.ndarray], dict[str, Any] | None, float]:
        """(``ENTROPY_OP``'s arrays, its params, what its gradient is divided by): by default the op is the
        entropy of its argument, given ``logits / temperature``."""
        return {"logits": rows / np.asarray(temperature, dtype=rows.dtype)}, None, temperature

    def _entropy(self, logits: Any, mask: Any, temperature: float, upstream: Any = None) -> np.ndarray:
        """``ENTROPY_OP`` on the rows, as ``_entropy_request`` asks for it."""
        fn = "token_entropy"
        logits, rows, valid = self._logit_rows(fn, logits, mask, temperature)
        if rows.shape[0] == 0:
            return np.zeros(logits.shape[:2] if upstream is None else logits.shape, dtype=logits.dtype)
        arrays, params, grad_scale = self._entropy_request(rows, temperature)
        return self._row_op(self.ENTROPY_OP, arrays, params, "entropy", logits, valid, upstream, grad_scale)

    def token_entropy(self, logits: Any, mask: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._entropy(logits, mask, temperature)

    def token_entropy_grad(self, logits: Any, mask: Any, upstream: Any, *, temperature: float = 1.0) -> np.ndarray:
        return self._entropy(logits, mask, temperature, upstream)

    # ------------------------------------------------------------------------------------------
    # kl.estimator
    # ------------------------------------------------------------------------------------------

    def _kl_inputs(self, logp: Any, ref_logp: Any, mask: Any, estimator: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Validated (logp, ref_logp in logp's dtype, mask); ``estimator`` is checked unless None."""
        fn = "kl_penalty"
        lp, ref, m = io.token_arrays(fn, mask, logp=logp, ref_logp=ref_logp)
        if estimator is not None:
            io.choice(fn, "estimator", estimator)
        return lp, ref, m

    @abstractmethod
    def _kl(self, logp: Any, ref_logp: Any, mask: Any, estimator: str, upstream: Any = None) -> np.ndarray:
        """The framework's estimator ``estimator``: the value, or with ``upstream`` the gradient w.r.t. ``logp``."""

    def kl_penalty(self, logp: Any, ref_logp: Any, mask: Any, *, estimator: str = "k1") -> np.ndarray:
        return self._kl(logp, ref_logp, mask, estimator)

    def kl_penalty_grad(self, logp: Any, ref_logp: Any, mask: Any, upstream: Any, *, estimator: str = "k1") -> np.ndarray:
        return self._kl(logp, ref_logp, mask, estimator, upstream)

    # ------------------------------------------------------------------------------------------
    # policy and value losses (the per-token matrix the framework aggregates)
    # ------------------------------------------------------------------------------------------

    def _policy(self, fn: str, params: dict[str, Any], logp: Any, old_logp: Any, advantages: Any, mask: Any,
                upstream: Any = None) -> np.ndarray:
        """The framework's ``policy_loss`` op with ``params``: its per-token matrix, or with ``upstream``
        the gradient w.r.t. ``logp`` (``[B]`` advantages are broadcast over the tokens)."""
        lp, old, m = io.token_arrays(fn, mask, logp=logp, old_logp=old_logp)
        logp_name, old_name, mask_name = self.POLICY_ARRAYS
        arrays = {logp_name: io.clean(lp, m), old_name: io.clean(old, m),
                  "advantages": io.per_token(advantages, m, fn, lp.dtype), mask_name: io.as_mask_of(m, lp.dtype)}
        return self._token_op("policy_loss", arrays, params, "per_token", logp_name, m, lp.dtype, upstream)

    @abstractmethod
    def _ppo_params(self, eps_low: float, eps_high: float, dual_clip: float | None) -> dict[str, Any]:
        """The ``policy_loss`` params of the PPO clipped loss."""

    @abstractmethod
    def _gspo_params(self, eps_low: float, eps_high: float) -> dict[str, Any]:
        """The ``policy_loss`` params of the GSPO loss."""

    def ppo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None) -> np.ndarray:
        return self._policy("ppo_token_loss", self._ppo_params(eps_low, eps_high, dual_clip), logp, old_logp, advantages, mask)

    def ppo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 0.2, eps_high: float = 0.2, dual_clip: float | None = None) -> np.ndarray:
        return self._policy("ppo_token_loss", self._ppo_params(eps_low, eps_high, dual_clip), logp, old_logp, advantages, mask, upstream)

    def gspo_token_loss(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> np.ndarray:
        return self._policy("gspo_token_loss", self._gspo_params(eps_low, eps_high), logp, old_logp, advantages, mask)

    def gspo_token_loss_grad(self, logp: Any, old_logp: Any, advantages: Any, mask: Any, upstream: Any, *, eps_low: float = 3e-4, eps_high: float = 4e-4) -> np.ndarray:
        return self._policy("gspo_token_loss", self._gspo_params(eps_low, eps_high), logp, old_logp, advantages, mask, upstream)

    @abstractmethod
    def _value_params(self, clip: float | None) -> dict[str, Any]:
        """The ``value_loss`` params for the spec's value clip ``clip`` (None: no clip)."""

    @staticmethod
    def _value_inputs(values: Any, old_values: Any, returns: Any, mask: Any) -> tuple[np.ndarray, ...]:
        """``value_token_loss``'s validated (values, old_values, returns in values' dtype, mask)."""
        return io.token_arrays("value_token_loss", mask, values=values, old_values=old_values, returns=returns)

    def _value(self, values: Any, old_values: Any, returns: Any, mask: Any, clip: float | None, upstream: Any = None) -> np.ndarray:
        """½ × the framework's ``value_loss`` matrix (verl and OpenRLHF apply the ½ after aggregating), or
        with ``upstream`` its gradient w.r.t. ``values``."""
        v, old, ret, m = self._value_inputs(values, old_values, returns, mask)
        values_name, old_name, returns_name, mask_name = self.VALUE_ARRAYS
        arrays = {values_name: io.clean(v, m), old_name: io.clean(old, m), returns_name: io.clean(ret, m),
                  mask_name: io.as_mask_of(m, v.dtype)}
        params = self._value_params(clip)
        if upstream is None:
            out = self._worker.call("value_loss", arrays, params)["outputs"]["loss_mat"]
            return io.masked_out(0.5 * np.asarray(out, dtype=np.float64), m, v.dtype)
        up = io.clean(np.asarray(upstream, dtype=v.dtype), m) * v.dtype.type(0.5)
        g = self._worker.call("value_loss", arrays, params, wrt=[values_name], upstream={"loss_mat": up})["grads"][values_name]
        return io.masked_out(g, m, v.dtype)

    def value_token_loss(self, values: Any, old_values: Any, returns: Any, mask: Any, *, clip: float | None = None) -> np.ndarray:
        return self._value(values, old_values, returns, mask, clip)

    def value_token_loss_grad(self, values: Any, old_values: Any, returns: Any, mask: Any, upstream: Any, *, clip: float | None = None) -> np.ndarray:
        return self._value(values, old_values, returns, mask, clip, upstream)

    # ------------------------------------------------------------------------------------------
    # agg.partition (conformance/runner/partition.py): the trainer's per-micro-batch loss
    # ------------------------------------------------------------------------------------------

    @abstractmethod
    def _micro_batched(self, chunks: Any, masks: Any, mode: str, norm_length: float | None, dp_world_size: int,
                       upstream: Any = None) -> list[Any]:
        """The loss of each micro-batch as the trainer computes it, or with ``upstream`` their gradients."""

    def micro_batched_loss(self, token_loss_chunks: Any, mask_chunks: Any, *, mode: str, norm_length: float | None = None,
                           dp_world_size: int = 1) -> list[Any]:
        return self._micro_batched(token_loss_chunks, mask_chunks, mode, norm_length, dp_world_size)

    def micro_batched_loss_grad(self, token_loss_chunks: Any, mask_chunks: Any, upstream: Any, *, mode: str,
                                norm_length: float | None = None, dp_world_size: int = 1) -> list[Any]:
        return self._micro_batched(token_loss_chunks, mask_chunks, mode, norm_length, dp_world_size, upstream)


__all__ = ["SubprocessAdapter"]
