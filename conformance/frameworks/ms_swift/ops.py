"""ms-swift operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the ms-swift environment (``rlspec frameworks install ms_swift``); imports only torch, NumPy
and ms-swift (which imports trl 0.29, transformers and accelerate itself). Every op calls the installed
ms-swift in its own conventions (GRPO tensors ``[B, T]`` with a bool ``completion_mask``, rewards
``[N, n_funcs]``); the conversion to spec conventions is in ``conformance/frameworks/ms_swift/adapter.py``.

What is called (ms-swift 4.6.0; paths relative to the package root ``swift/``):

| op | ms-swift |
|---|---|
| ``advantages`` | ``rl_core/advantage.py::compute_advantages`` (:20-99), pure; with ``per_token`` also ``expand_advantage_to_per_token`` (:263-291), the broadcast the trainer applies when it writes the advantage onto the batch |
| ``trainer_advantages`` | ``rlhf_trainers/grpo_trainer.py::GRPOTrainer._compute_advantages`` (:387-520) on the stand-in trainer (below): the KL-in-reward path (``kl_values`` = Σ_t (old − ref)·mask per row, :436-446), then ``compute_advantages`` |
| ``logprobs`` | ``GRPOTrainer._get_logps_via_local_forward`` (:1564-1609): the model's logits sliced ``[:, -(logits_to_keep + 1):-1]``, divided in place by ``self.temperature`` (:1581), ``trl.trainer.utils.selective_log_softmax`` and (``compute_entropy``) ``entropy_from_logits`` (trl 0.29.1, imported by ms-swift, :36, :64-67) |
| ``loss`` | ``GRPOTrainer._compute_loss_and_metrics`` (:934-1226) on the stand-in trainer: the returned loss and the method's own local tensors at its return (below): ``per_token_loss``, ``completion_mask``, ``entropy_mask``, ``per_token_kl``, ``rollout_is_weights``, ``off_policy_seq_mask`` |
| ``rollout_is`` | ``GRPOTrainer._get_rollout_is_correction`` (:1761-1773) -> ``_apply_rollout_importance_sampling`` (:2345-2393) -> ``_compute_sequence_level_ratios`` (:2328-2343) |
| ``soft_overlong`` | ``rewards/orm.py::SoftOverlong`` (:216-232, reward function ``"soft_overlong"``), built as ``GRPOTrainer._prepare_rewards`` builds it (``orms[name](args=args)``, :2223-2226), called with ``response_token_ids`` |

The stand-in trainer. ``GRPOTrainer.__init__`` needs a registered model (``model.model_meta``), a
template, datasets and a rollout engine; none of that is loss math. So ``standin(config)`` makes the
object with ``GRPOTrainer.__new__`` (no ``__init__``) and gives it what ``__init__`` would have set,
from ms-swift's own code wherever ms-swift computes it:

- ``args``: ms-swift's ``rlhf_trainers/arguments.py::GRPOConfig`` built from the settings asked
  (``loss_type``, ``epsilon``, ``epsilon_high``, ``delta``, ``beta``, ``top_entropy_quantile``, ``tau_pos``,
  ``tau_neg``, ``importance_sampling_level``, ``rollout_importance_sampling_mode``/``_threshold``,
  ``off_policy_sequence_mask_delta``, ``advantage_estimator``, ``scale_rewards``, ``kl_in_reward``,
  ``max_completion_length``, ``temperature``, ``num_generations``, ``reward_weights``, ...), with
  ``output_dir`` a temporary folder, ``use_cpu=True``, ``report_to=[]``, ``gradient_accumulation_steps=1``;
- the real ``_prepare_algorithm_params()`` (:2127-2189: ``loss_type``, ``epsilon_low``/``epsilon_high``
  (= ``epsilon`` when unset), ``top_entropy_quantile``, ``tau_*``, ``importance_sampling_level``, the
  rollout-IS and OPSM settings, ``advantage_estimator``, ``kl_in_reward``, ``scale_rewards``, ...) and
  ``_prepare_metrics()`` (:2098-2113: ``compute_entropy``, ``_metrics``, ``_logs``);
- as the mixins set them: ``beta = args.beta`` (``rlhf_mixin.py:30``); ``num_generations``,
  ``num_generations_eval``, ``temperature``, ``max_completion_length`` from ``args``
  (``rollout_mixin.py:342-348``); ``disable_rollout_importance_sampling = False`` (``rollout_mixin.py:370``;
  ``_prepare_vllm`` sets it to ``not vllm >= 0.10.2``, :383: the stand-in is a run with a recent vLLM,
  the only runs that have rollout log-probs); ``dynamic_num_samples = False`` (:385);
  ``_has_teacher = False`` (``_setup_teacher`` without a teacher); ``chord_sft_iterator = None``
  (``_prepare_chord_dataset`` without a CHORD dataset, :2209-2213); ``model_accepts_loss_kwargs = False``
  (:142); ``compute_loss_func = None`` (transformers ``Trainer`` default); ``reward_weights`` /
  ``reward_func_names`` as ``_prepare_rewards`` makes them (:2231-2273, one name per reward column);
- ``model``: an ``nn.Module`` in training mode that returns the given logits (a fresh tensor, as a
  real forward does); ``model_kwarg_keys = ()``; ``template``: ``padding_free=False``,
  ``sequence_parallel_size=1`` (the plain padded path);
- ``accelerator``: one rank of an ``n``-process run: ``num_processes = n`` (the ``dapo``/``cispo``
  normaliser divides ``num_items_in_batch`` by it, :1128), ``gather_for_metrics`` returns the rank's
  own tensor (metrics only), ``device`` CPU; ``current_gradient_accumulation_steps`` (read by
  ``_undo_gradient_accumulation_scaling``, :1228-1241) is the number of micro-batches of the window.

``loss`` calls ``_compute_loss_and_metrics(model, model_inputs, grpo_batch)`` with a real
``rl_core/data.py::GRPOBatch``. With ``per_token_logps`` given (the spec's ``logp``, the tensor the
gradient is taken at), the stand-in's ``_get_per_token_logps_and_entropies`` returns it and the given
``entropies`` (what the model forward would return); with ``logits`` and ``input_ids`` instead, the
real ``_get_per_token_logps_and_entropies`` (:1611-1668, the local-forward path) computes them from the
stand-in model's logits and the gradient is taken at the logits. Everything after that line is ms-swift's.
The method keeps its intermediate tensors in locals and returns only the reduced loss; the op reads
them as the method left them at its ``return`` (``sys.setprofile`` on that one code object, the way a
debugger reads a frame): nothing of ms-swift is edited, wrapped or copied.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import types
from collections.abc import Iterator
from typing import Any

# the method's locals the ``loss`` op returns (those that exist on the path taken)
LOCALS = ("per_token_loss", "completion_mask", "entropy_mask", "per_token_kl", "rollout_is_weights",
          "off_policy_seq_mask")


def load() -> dict[str, Any]:
    import swift
    import torch
    import trl
    from swift.rewards.orm import orms
    from swift.rl_core import advantage as adv
    from swift.rl_core.data import GRPOBatch
    from swift.rlhf_trainers.arguments import GRPOConfig
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer

    # GRPOConfig's output_dir (nothing is written there); removed when the worker exits
    workdir = tempfile.TemporaryDirectory(prefix="rlspec-ms-swift-")

    class _Model(torch.nn.Module):
        """Returns the logits it holds (a fresh tensor each call, like a forward pass)."""

        def __init__(self, logits: Any = None) -> None:
            super().__init__()
            self.logits = logits

        def forward(self, **inputs: Any) -> Any:
            return types.SimpleNamespace(logits=self.logits.clone())

    class _Rank:
        """Rank 0 of an ``n``-process accelerate run, for the loss method (metrics gather nothing)."""

        def __init__(self, n: int) -> None:
            self.num_processes = n
            self.device = torch.device("cpu")
            self.is_main_process = True  # rank 0 (read by profiling_context, rlhf_trainers/utils.py:578-582)

        @staticmethod
        def gather_for_metrics(x: Any) -> Any:
            return x

    def config(settings: dict[str, Any], batch_size: int = 1) -> Any:
        kwargs = {"num_generations": 1, **settings}
        return GRPOConfig(output_dir=workdir.name, use_cpu=True, report_to=[], gradient_accumulation_steps=1,
                          per_device_train_batch_size=max(1, int(batch_size)), **kwargs)

    def standin(settings: dict[str, Any], *, batch_size: int = 1, num_processes: int = 1, grad_accum: int = 1,
                logits: Any = None, n_rewards: int = 1) -> Any:
        args = config(settings, batch_size)
        t = GRPOTrainer.__new__(GRPOTrainer)
        t.args = args
        t.beta = args.beta
        t._prepare_algorithm_params()
        t._prepare_metrics()
        t.num_generations = args.num_generations
        t.num_generations_eval = args.num_generations_eval or args.num_generations
        t.temperature = args.temperature
        t.max_completion_length = args.max_completion_length
        t.disable_rollout_importance_sampling = False
        t.dynamic_num_samples = False
        t._has_teacher = False
        t.chord_sft_iterator = None
        t.model_accepts_loss_kwargs = False
        t.compute_loss_func = None
        t.model = _Model(logits).train()
        t.model_kwarg_keys = ()
        t.template = types.SimpleNamespace(padding_free=False, sequence_parallel_size=1)
        t.accelerator = _Rank(num_processes)
        t.current_gradient_accumulation_steps = grad_accum
        t.reward_func_names = [f"reward_{k}" for k in range(n_rewards)]
        weights = args.reward_weights
        t.reward_weights = torch.tensor(weights if weights is not None else [1.0] * n_rewards, dtype=torch.float32)
        return t

    @contextlib.contextmanager
    def frame_locals(code: Any) -> Iterator[dict[str, Any]]:
        """The locals of ``code``'s frame at its return (the last such frame)."""
        seen: dict[str, Any] = {}
        previous = sys.getprofile()

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "return" and frame.f_code is code:
                seen.clear()
                seen.update(frame.f_locals)

        sys.setprofile(profile)
        try:
            yield seen
        finally:
            sys.setprofile(previous)

    # ------------------------------------------------------------------------------------------
    # rl_core/advantage.py
    # ------------------------------------------------------------------------------------------

    def advantages(t: dict[str, Any], *, num_generations: int, advantage_estimator: str = "grpo",
                   scale_rewards: str = "group", kl_in_reward: bool = False, beta: float = 0.0,
                   per_token: bool = False) -> dict[str, Any]:
        a, r = adv.compute_advantages(t["rewards_per_func"], t["reward_weights"], num_generations,
                                      advantage_estimator=advantage_estimator, scale_rewards=scale_rewards,
                                      kl_in_reward=kl_in_reward, beta=beta, kl_values=t.get("kl_values"))
        out = {"advantages": a, "rewards": r}
        if per_token:
            out["per_token"] = adv.expand_advantage_to_per_token(a, t["completion_mask"])
        return out

    def trainer_advantages(t: dict[str, Any], *, settings: dict[str, Any]) -> dict[str, Any]:
        rewards = t["rewards_per_func"]
        trainer = standin(settings, batch_size=rewards.shape[0], n_rewards=rewards.shape[1])
        m = t["completion_mask"]
        batch = GRPOBatch(completion_mask=m, truncated_mask=torch.zeros(m.shape[0], dtype=torch.bool),
                          seq_lengths=m.sum(-1), old_per_token_logps=t["old_per_token_logps"],
                          ref_per_token_logps=t["ref_per_token_logps"])
        a = trainer._compute_advantages([], rewards, [{"grpo_batch": batch}])
        return {"advantages": a, "kl_in_reward": bool(trainer.kl_in_reward), "scale_rewards": trainer.scale_rewards}

    # ------------------------------------------------------------------------------------------
    # the trainer's methods on the stand-in
    # ------------------------------------------------------------------------------------------

    def logprobs(t: dict[str, Any], *, temperature: float = 1.0, compute_entropy: bool = False) -> dict[str, Any]:
        # each row of logits [N, V] is the one position the model keeps: logits [N, 2, V] whose last
        # position is dropped by the method's slice, input_ids [N, 2] whose last column is the label
        rows, labels = t["logits"], t["labels"]
        logits = torch.stack([rows, torch.zeros_like(rows)], dim=1)
        input_ids = torch.stack([torch.zeros_like(labels), labels], dim=1)
        trainer = standin({"temperature": temperature}, logits=logits)
        logp, ent = trainer._get_logps_via_local_forward(trainer.model, {"input_ids": input_ids}, 1, input_ids,
                                                         compute_entropy=compute_entropy)
        out = {"logp": logp[:, 0]}
        if compute_entropy:
            out["entropy"] = ent[:, 0]
        return out

    def loss(t: dict[str, Any], *, settings: dict[str, Any], num_processes: int = 1, grad_accum: int = 1) -> dict[str, Any]:
        m = t["completion_mask"]
        B = m.shape[0]
        logits = t.get("logits")
        trainer = standin(settings, batch_size=B, num_processes=num_processes, grad_accum=grad_accum, logits=logits)
        model_inputs: dict[str, Any] = {}
        if logits is None:
            lp, ent = t["per_token_logps"], t.get("entropies")
            trainer._get_per_token_logps_and_entropies = (
                lambda model, model_inputs, grpo_batch, compute_entropy=False, origin_data=None:
                (lp, ent if compute_entropy else None))
        else:
            model_inputs["input_ids"] = t["input_ids"]
        batch = GRPOBatch(
            completion_mask=m,
            truncated_mask=torch.zeros(B, dtype=torch.bool),  # no overlong filter
            seq_lengths=m.sum(-1),
            old_per_token_logps=t.get("old_per_token_logps"),
            ref_per_token_logps=t.get("ref_per_token_logps"),
            rollout_per_token_logps=t.get("rollout_per_token_logps"),
            advantages=t["advantages"],
            num_items_in_batch=t.get("num_items_in_batch", m.sum()),
            logits_to_keep=m.shape[1],  # with logits: the completion columns are the last m.shape[1] of input_ids
        )
        with frame_locals(GRPOTrainer._compute_loss_and_metrics.__code__) as seen:
            value, _ = trainer._compute_loss_and_metrics(trainer.model, model_inputs, batch)
        out = {"loss": value}
        for name in LOCALS:
            x = seen.get(name)
            if isinstance(x, torch.Tensor):
                out[name] = x
        return out

    def rollout_is(t: dict[str, Any], *, mode: str, threshold: float) -> dict[str, Any]:
        trainer = standin({"rollout_importance_sampling_mode": mode, "rollout_importance_sampling_threshold": threshold})
        log_ratio, weights = trainer._get_rollout_is_correction(t["old_per_token_logps"], t["rollout_per_token_logps"],
                                                                t["completion_mask"])
        return {"weights": weights, "log_ratio": log_ratio}

    def soft_overlong(t: dict[str, Any], *, soft_max_length: int, soft_cache_length: int) -> dict[str, Any]:
        args = config({"soft_max_length": soft_max_length, "soft_cache_length": soft_cache_length})
        reward = orms["soft_overlong"](args=args)
        ids = [[0] * int(n) for n in t["lengths"].tolist()]
        return {"reward": torch.tensor(reward([""] * len(ids), response_token_ids=ids), dtype=torch.float64)}

    ops = {
        "advantages": advantages,
        "trainer_advantages": trainer_advantages,
        "logprobs": logprobs,
        "loss": loss,
        "rollout_is": rollout_is,
        "soft_overlong": soft_overlong,
    }
    info = {
        "swift": swift.__file__,
        "trl": trl.__version__,
    }
    return {"version": swift.__version__, "ops": ops, "info": info}

