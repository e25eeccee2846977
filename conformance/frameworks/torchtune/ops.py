"""torchtune operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the torchtune environment (``rlspec frameworks install torchtune``); imports only torch, NumPy
and torchtune (the PPO recipe is torchtune's own file, loaded by path as ``tune run`` loads it). Every op
calls the installed torchtune and returns what it returns, in torchtune's conventions (response tensors
``[b, response_len]``, bool masks where True means "take part", scalar losses). The conversion to spec
conventions happens in ``conformance/frameworks/torchtune/adapter.py``.

What is called (torchtune 0.6.1, paths relative to the wheel's site-packages):

| op | torchtune |
|---|---|
| ``logits_to_logprobs`` | ``torchtune/rlhf/sequence_processing.py::logits_to_logprobs`` (:84-101; it divides by ``temperature`` itself) |
| ``get_rewards_ppo`` | ``torchtune/rlhf/rewards.py::get_rewards_ppo`` (:49-94): ``(total_reward, kl, kl_reward)`` |
| ``estimate_advantages`` | ``torchtune/rlhf/rewards.py::estimate_advantages`` (:164-220): ``(advantages, returns)`` |
| ``whiten`` | ``torchtune/rlhf/rewards.py::whiten`` (:139-161) |
| ``masked_mean`` | ``torchtune/rlhf/rewards.py::masked_mean`` (:97-112) |
| ``ppo_loss`` / ``policy_loss`` / ``value_loss`` | ``torchtune/rlhf/loss/ppo.py::PPOLoss`` (:14-122) |
| ``reward_penalty_mask`` | the recipe's ``truncate_sequence_at_first_stop_token`` -> ``training/pooling.py::get_unmasked_sequence_lengths`` -> ``get_reward_penalty_mask`` (``rlhf/rewards.py:12-46``) chain (recipe :820-849) |
| ``load_recipe`` | imports a recipe file of the wheel by path (``recipes/dev/grpo_full_finetune_distributed.py`` fails: no ``torchtune.dev``) |
| ``ppo_recipe`` | ``recipes/ppo_full_finetune_single_device.py::PPOFullFinetuneRecipeSingleDevice`` (see below) |

The per-token matrices of ``PPOLoss``. ``PPOLoss.forward`` reduces its policy and value matrices with
``rlhf.masked_mean`` (ppo.py:88-113), looked up on the ``torchtune.rlhf`` package at call time. The
``policy_loss`` and ``value_loss`` ops record the arguments of those calls by wrapping
``torchtune.rlhf.masked_mean`` for the duration of one ``forward`` (the real function is called and
restored afterwards; nothing of torchtune is edited or copied): the calls come in the order clipfrac
(:88-92), policy loss (:95-99), value loss (:109-113), so the first argument of the first call is the
per-token clip indicator, that of the second the per-token policy loss and that of the third the value
matrix before the ``0.5``.
Masks are passed as bool tensors, as the recipe passes them (``~trajectory.response_padding_masks``).

The PPO recipe (``ppo_recipe``). ``PPOFullFinetuneRecipeSingleDevice`` is built with its own ``__init__``
from a config (device cpu, fp32) and its own ``_setup_training_hyperparameters``; what ``setup`` would load
from checkpoints is put in place instead: tiny random-weight models from torchtune's builders
(``torchtune.models.llama2.llama2`` for the policy and the reference policy, ``llama2_classifier(1)`` for the
value and reward models, as the recipe's configs use ``*_classifier`` builders), a tokenizer namespace
with ``pad_id`` / ``eos_id`` / ``stop_tokens``, ``_loss_fn = PPOLoss(...)`` wrapped by a recorder (below),
and ``cache_ctx_manager`` = a null context (what ``setup`` sets when ``enable_kv_cache`` is False,
:237-247). Then, as ``train`` does (:937-1000) for one batch: ``generate_trajectory_batched`` (:881,
the real generation, reference, value and reward forward passes, truncation at the first stop token,
the reward penalties and the recipe's masking, :751-879), ``rlhf.get_rewards_ppo(..., trajectory.value_seq_idxs)``
(:945-951), ``rlhf.estimate_advantages(..., masks=~trajectory.response_padding_masks)`` (:954-960) and
``ppo_step`` (:1054-1133) on the whole batch once, which calls ``loss.backward()``. The recorder around
``PPOLoss`` calls ``retain_grad()`` on the ``pi_logprobs`` and ``phi_values`` that ``ppo_step`` hands it
and returns them with their gradients after the backward pass: the trainer's own d loss / d logp and
d loss / d values.
"""

from __future__ import annotations

import contextlib
import importlib.util
import types
from pathlib import Path
from typing import Any


def load() -> dict[str, Any]:
    import torch
    import torchtune
    from torchtune import rlhf
    from torchtune.rlhf.loss import PPOLoss

    @contextlib.contextmanager
    def record_masked_mean():
        calls: list[tuple[Any, Any]] = []
        real = rlhf.masked_mean

        def spy(x: Any, mask: Any, dim: Any = None) -> Any:
            calls.append((x, mask))
            return real(x, mask, dim)

        rlhf.masked_mean = spy
        try:
            yield calls
        finally:
            rlhf.masked_mean = real

    def _mask(t: dict[str, Any], name: str) -> Any:
        m = t.get(name)
        return None if m is None else m.bool()

    def logits_to_logprobs(t: dict[str, Any], *, temperature: float = 1.0) -> dict[str, Any]:
        # rows [N, V] as one sequence [1, N, V] against labels [1, N]
        logp = rlhf.logits_to_logprobs(t["logits"][None], t["labels"][None], temperature=temperature)
        return {"logp": logp[0]}

    def get_rewards_ppo(t: dict[str, Any], *, kl_coeff: float) -> dict[str, Any]:
        idx = t.get("valid_score_idxs")
        total, kl, kl_reward = rlhf.get_rewards_ppo(t["scores"], t["logprobs"], t["ref_logprobs"], kl_coeff,
                                                    None if idx is None else idx.long())
        return {"total_reward": total, "kl": kl, "kl_reward": kl_reward}

    def estimate_advantages(t: dict[str, Any], *, gamma: float, lmbda: float) -> dict[str, Any]:
        adv, ret = rlhf.estimate_advantages(t["values"], t["rewards"], gamma, lmbda, masks=_mask(t, "masks"))
        return {"advantages": adv, "returns": ret}

    def whiten(t: dict[str, Any], *, shift_mean: bool = True) -> dict[str, Any]:
        return {"out": rlhf.whiten(t["x"], mask=_mask(t, "mask"), shift_mean=shift_mean)}

    def masked_mean(t: dict[str, Any], *, dim: int | None = None) -> dict[str, Any]:
        return {"loss": rlhf.masked_mean(t["x"], t["mask"].bool(), dim=dim)}

    def ppo_loss(t: dict[str, Any], *, init: dict[str, Any]) -> dict[str, Any]:
        loss_fn = PPOLoss(**init)
        with record_masked_mean() as calls:
            loss, policy_loss, value_loss, ratios, clipfrac = loss_fn(
                t["pi_old_logprobs"], t["pi_logprobs"], t["advantages"], t["phi_old_values"], t["phi_values"],
                t["returns"], padding_masks=_mask(t, "padding_masks"), value_padding_masks=_mask(t, "value_padding_masks"))
        out = {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "ratios": ratios, "clipfrac": clipfrac}
        if len(calls) == 3:  # clipfrac, policy, value (ppo.py:88-113), all masked
            out["clipped"], out["per_token"], out["loss_mat"] = calls[0][0], calls[1][0], calls[2][0]
        return out

    def policy_loss(t: dict[str, Any], *, init: dict[str, Any]) -> dict[str, Any]:
        """``PPOLoss`` with the value inputs at 0: its per-token policy loss (``per_token``)."""
        z = torch.zeros_like(t["pi_logprobs"])
        arrays = {**t, "phi_old_values": z, "phi_values": z.clone(), "returns": z.clone(),
                  "value_padding_masks": t["padding_masks"]}
        return ppo_loss(arrays, init=init)

    def value_loss(t: dict[str, Any], *, init: dict[str, Any]) -> dict[str, Any]:
        """``PPOLoss`` with the policy inputs at 0: its value matrix before the 0.5 (``loss_mat``)."""
        z = torch.zeros_like(t["phi_values"])
        arrays = {**t, "pi_old_logprobs": z, "pi_logprobs": z.clone(), "advantages": z.clone(),
                  "padding_masks": t["value_padding_masks"]}
        return ppo_loss(arrays, init=init)

    def reward_penalty_mask(t: dict[str, Any], *, stop_token_ids: list[int], penalise_no_eos: bool,
                            min_response_length: int | None) -> dict[str, Any]:
        """The recipe's chain from generated responses to the penalised scores (ppo_full_finetune_single_device.py:
        820-849): ``truncate_sequence_at_first_stop_token``, ``training.get_unmasked_sequence_lengths``,
        ``rlhf.get_reward_penalty_mask``."""
        from torchtune import training

        padding, _ = rlhf.truncate_sequence_at_first_stop_token(t["responses"].clone(), torch.tensor(stop_token_ids), 0)
        seq_lens = training.get_unmasked_sequence_lengths(padding)
        penalised = rlhf.get_reward_penalty_mask(padding, seq_lens, penalise_no_eos, min_response_length)
        return {"response_padding_masks": padding, "seq_lens": seq_lens, "penalised": penalised}

    def _recipe(relative: str) -> tuple[Any, str]:
        """The recipe module ``recipes/<relative>`` of the installed wheel, loaded by path (as ``tune run`` does)."""
        path = Path(torchtune.__file__).resolve().parent.parent / "recipes" / relative
        spec = importlib.util.spec_from_file_location("rlspec_torchtune_recipe", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module, str(path)

    def load_recipe(t: dict[str, Any], *, relative: str) -> dict[str, Any]:
        """Import a shipped recipe (its import errors propagate): e.g. ``dev/grpo_full_finetune_distributed.py``."""
        module, path = _recipe(relative)
        return {"path": path, "names": sorted(n for n in vars(module) if n.endswith("Recipe") or "Recipe" in n)}

    def ppo_recipe(t: dict[str, Any], *, seed: int, batch_size: int, prompt_len: int, max_generated_tokens: int,
                   vocab_size: int, stop_token_ids: list[int], kl_coeff: float, gamma: float, lmbda: float,
                   loss: dict[str, Any], temperature: float = 1.0, penalise_no_eos: bool = False,
                   min_response_length: int | None = None, reward_penalty: float = -3.0) -> dict[str, Any]:
        from omegaconf import OmegaConf
        from torchtune.models.llama2 import llama2, llama2_classifier

        module, path = _recipe("ppo_full_finetune_single_device.py")
        Recipe = module.PPOFullFinetuneRecipeSingleDevice
        cfg = OmegaConf.create({
            "device": "cpu", "dtype": "fp32", "output_dir": "/tmp", "seed": seed, "resume_from_checkpoint": False,
            "gradient_accumulation_steps": 1, "kl_coeff": kl_coeff, "gamma": gamma, "lmbda": lmbda,
            "whiten_rewards": False, "temperature": temperature, "top_k": None,
            "max_generated_tokens": max_generated_tokens, "min_response_length": min_response_length,
            "penalise_no_eos": penalise_no_eos, "reward_penalty": reward_penalty, "stop_token_ids": list(stop_token_ids),
        })
        recipe = Recipe(cfg)
        recipe._tokenizer = types.SimpleNamespace(pad_id=0, eos_id=int(stop_token_ids[0]), stop_tokens=list(stop_token_ids))
        recipe._setup_training_hyperparameters(cfg)
        dims = {"vocab_size": vocab_size, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "embed_dim": 16,
                "max_seq_len": prompt_len + max_generated_tokens}
        models = []
        for k, build in enumerate((lambda: llama2(**dims), lambda: llama2(**dims), lambda: llama2_classifier(1, **dims),
                                   lambda: llama2_classifier(1, **dims))):
            torch.manual_seed(seed * 10 + k)
            models.append(build())
        recipe._policy_model, recipe._ref_policy_model, recipe._value_model, recipe._reward_model = models
        recipe.batch_size = recipe._forward_batch_size = batch_size
        recipe.enable_kv_cache = False
        recipe.cache_ctx_manager = lambda enable_kv_cache, decoder_max_seq_len: contextlib.nullcontext()
        seen: dict[str, Any] = {}
        real_loss = PPOLoss(**loss)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            pi_logprobs, phi_values = args[1], args[4]
            pi_logprobs.retain_grad()
            phi_values.retain_grad()
            seen.update(pi_logprobs=pi_logprobs, phi_values=phi_values, padding_masks=kwargs["padding_masks"],
                        value_padding_masks=kwargs["value_padding_masks"], advantages=args[2], returns=args[5],
                        pi_old_logprobs=args[0], phi_old_values=args[3])
            return real_loss(*args, **kwargs)

        recipe._loss_fn = recorded
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(1, vocab_size, (batch_size, prompt_len), generator=g)
        trajectory = recipe.generate_trajectory_batched(input_ids)
        # train(), recipes/ppo_full_finetune_single_device.py:945-960, for this batch
        rewards, kl, _ = rlhf.get_rewards_ppo(trajectory.scores, trajectory.logprobs, trajectory.ref_logprobs,
                                                       recipe._kl_coeff, trajectory.value_seq_idxs)
        advantages, returns = rlhf.estimate_advantages(trajectory.values, rewards, recipe._gamma, recipe._lmbda,
                                                       masks=~trajectory.response_padding_masks)
        stats = recipe.ppo_step(trajectory, advantages, returns, prompt_len)
        out = {name: getattr(trajectory, name) for name in ("logprobs", "ref_logprobs", "values", "response_padding_masks",
                                                            "value_padding_masks", "value_seq_idxs", "scores", "seq_lens")}
        out.update(rewards=rewards, kl=kl, advantages=advantages, returns=returns,
                   responses=trajectory.query_responses[:, prompt_len:],
                   pi_logprobs=seen["pi_logprobs"].detach(), phi_values=seen["phi_values"].detach(),
                   grad_pi_logprobs=seen["pi_logprobs"].grad, grad_phi_values=seen["phi_values"].grad,
                   loss=stats.loss.detach(), policy_loss=stats.policy_loss, value_loss=stats.value_loss, recipe=path)
        return out

    ops = {
        "logits_to_logprobs": logits_to_logprobs,
        "get_rewards_ppo": get_rewards_ppo,
        "estimate_advantages": estimate_advantages,
        "whiten": whiten,
        "masked_mean": masked_mean,
        "ppo_loss": ppo_loss,
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "reward_penalty_mask": reward_penalty_mask,
        "load_recipe": load_recipe,
        "ppo_recipe": ppo_recipe,
    }
    import torchao

    has_dev = importlib.util.find_spec("torchtune.dev") is not None
    info = {"rlhf": rlhf.__file__, "torchao": torchao.__version__, "torchtune_dev_installed": has_dev}
    return {"version": torchtune.__version__.split("+")[0], "ops": ops, "info": info}
