"""torchtune rows that are not single core-API calls: ``PPOLoss`` as the scalar it returns (policy term plus
``value_coeff`` × value term, value and gradients), ``estimate_advantages`` as it returns its advantages
(whitened), ``whiten`` at its own default, the recipe's per-micro-batch loss under gradient
accumulation, and the trainer-level rows of the PPO recipe driven on tiny random-weight models.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]`` (``adapter`` is a
``conformance.frameworks.torchtune.adapter.TorchtuneAdapter``). Row ids look like
``torchtune.PPOLoss[epsilon=0.1,value_clip_range=0.2,value_coeff=0.1]``, ``torchtune.recipe.ppo_step``.

How a loss row is checked: the seeded float32 batch of ``conformance/frameworks/loss_batch.py``
(``loss_batch``: ragged rows, a masked tool token, an empty completion, finite garbage at every masked
position) goes to torchtune unchanged, with ``mask`` as the bool ``padding_masks`` and
``value_padding_masks``; torchtune returns the scalar loss and, by autograd, its gradients w.r.t.
``pi_logprobs`` and ``phi_values``. The oracle composes the spec pieces on the same float32-rounded inputs,
e.g. ``aggregate(ppo_token_loss(...), token_mean) + value_coeff · aggregate(value_token_loss(...),
token_mean)``; the first candidate that matches value and gradients decides the row.

The recipe rows (``ops.py``, "The PPO recipe") compare what ``recipes/ppo_full_finetune_single_device.py``
computes for one batch with the spec composition on the trajectory the recipe generated (its log-probs,
values, scores and masks, in the spec layout: a prompt column, then the response):

- ``torchtune.recipe.rewards``: ``get_rewards_ppo(..., trajectory.value_seq_idxs)`` (:945-951) against
  ``rlhf_token_rewards`` on the response mask (canonical) and on the mask extended by the position
  ``value_seq_idxs`` (where the recipe puts the score, ``generate_trajectory`` :856-865);
- ``torchtune.recipe.estimate_advantages``: the recipe's (advantages, returns) (:954-960) against
  ``whiten(gae(rlhf_token_rewards(...)))`` with each of those placements and each whitening;
- ``torchtune.recipe.ppo_step``: the loss ``ppo_step`` (:1054-1133) backpropagates and its gradients
  w.r.t. the ``pi_logprobs`` and ``phi_values`` it computed, against the composition on the recipe's own
  advantages and returns with the value term over the response mask (canonical) or over
  ``~value_padding_masks`` (what the recipe passes, :1115).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records.presets import preset_kwargs
from conformance.runner.composite import Candidate, composition_row, loss_tolerances
from conformance.records.pieces import aggregate_eval, broadcast_advantages, compose, fmt, policy_piece, value_piece
from conformance.frameworks.loss_batch import loss_batch, round_batch
from conformance.runner.rows import RowResult
from conformance.tolerances import tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.torchtune.adapter import TorchtuneAdapter

DTYPE = "float32"  # the rows run in float32, the recipe's training dtype ("fp32" in its configs, bf16 the other)
KINKS = tuple(math.log(x) for x in (0.8, 0.9, 1.1, 1.2))  # 1 -+ 0.1 (PPOLoss default) and 1 -+ 0.2
TOKEN_MEAN = {"mode": "token_mean"}

# the PPO recipe's one batch (ops.ppo_recipe): 6 prompts of 3 tokens, up to 8 generated tokens from a
# vocabulary of 12 with stop tokens 2 and 5 (so that rows stop early, late and never), the config's
# gamma 1 / lmbda 0.95 replaced by 0.9 / 0.8 so that the score's position shows, the reward penalties on
RECIPE = {"seed": 3, "batch_size": 6, "prompt_len": 3, "max_generated_tokens": 8, "vocab_size": 12,
          "stop_token_ids": [2, 5], "kl_coeff": 0.05, "gamma": 0.9, "lmbda": 0.8,
          "loss": {"epsilon": 0.2, "value_clip_range": 0.2, "value_coeff": 0.1}, "temperature": 1.0,
          "penalise_no_eos": True, "min_response_length": 2, "reward_penalty": -3.0}


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# PPOLoss: policy term + value_coeff × value term
# ---------------------------------------------------------------------------------------------


def ppo_loss_value(batch: dict[str, np.ndarray], ppo: dict[str, Any], value: dict[str, Any], coeff: float,
                   value_mask: np.ndarray | None = None) -> dict[str, Any]:
    """``aggregate(ppo_token_loss(**ppo), token_mean) + coeff · aggregate(value_token_loss(**value), token_mean)``
    on ``batch`` (the value term over ``value_mask``, default the batch's mask), with both gradients."""
    m = batch["mask"]
    vm = m if value_mask is None else value_mask
    policy = compose(policy_piece("ppo_token_loss", batch["logp"], batch, **ppo), m, TOKEN_MEAN, "grad[logp]")
    vb = {**batch, "mask": vm}
    val = compose(value_piece(batch["values"], vb, **value), vm, TOKEN_MEAN, "grad[values]")
    return {"value": policy["value"] + coeff * val["value"], "grad[logp]": policy["grad[logp]"],
            "grad[values]": coeff * val["grad[values]"]}


def ppo_loss_row(adapter: TorchtuneAdapter, seed: int, init: dict[str, Any], asked: dict[str, Any], *, per_token_advantages: bool = False,
                 label: str = "") -> RowResult:
    """``PPOLoss(**init)`` on the loss batch. ``asked``: the spec keywords ``init`` asks for (``eps_low``,
    ``eps_high``, ``clip``); the canonical candidate uses them, the torchtune preset fills the rest."""
    batch = round_batch(loss_batch(seed, per_token_advantages=per_token_advantages, kinks=KINKS), DTYPE)
    m = batch["mask"]
    coeff = float(init.get("value_coeff", 0.1))

    def got() -> dict[str, Any]:
        arrays = {"pi_old_logprobs": _f32(batch["old_logp"]), "pi_logprobs": _f32(batch["logp"]),
                  "advantages": _f32(broadcast_advantages(batch)) if per_token_advantages else _f32(batch["advantages"])[:, None],
                  "phi_old_values": _f32(batch["old_values"]), "phi_values": _f32(batch["values"]),
                  "returns": _f32(batch["returns"]), "padding_masks": m, "value_padding_masks": m}
        r = adapter.call("ppo_loss", arrays, {"init": init}, wrt=["pi_logprobs", "phi_values"], upstream={"loss": 1.0})
        return {"value": r["outputs"]["loss"], "grad[logp]": r["grads"]["pi_logprobs"], "grad[values]": r["grads"]["phi_values"]}

    def split(kw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return {k: v for k, v in kw.items() if k != "clip"}, {k: v for k, v in kw.items() if k == "clip"}

    def ev(kw: dict[str, Any]) -> Any:
        ppo, value = split(kw)
        return lambda: ppo_loss_value(batch, ppo, value, coeff)

    preset = {**preset_kwargs("torchtune", "ppo_token_loss"),
              **preset_kwargs("torchtune", "value_token_loss"), **asked}
    formula = "aggregate(ppo_token_loss({}), token_mean) + {} * aggregate(value_token_loss({}), token_mean)"
    cands = [Candidate("canonical", formula.format(fmt(split(asked)[0]), coeff, fmt(split(asked)[1])), ev(asked))]
    if preset != asked:
        extra = {k: v for k, v in preset.items() if asked.get(k, object()) != v}
        cands.append(Candidate(fmt(extra), formula.format(fmt(split(preset)[0]), coeff, fmt(split(preset)[1])), ev(preset),
                               preset="torchtune", kwargs=extra))
    parts = [fmt(init).replace(" ", "").replace("'", "")] + (["A=[B,T]"] if per_token_advantages else []) + ([label] if label else [])
    return composition_row(f"torchtune.PPOLoss[{','.join(parts)}]", "loss.ppo+loss.value+agg", "torchtune.rlhf.loss.PPOLoss",
                           adapter, got, cands, loss_tolerances(DTYPE, "loss.ppo"), seed=seed)


# ---------------------------------------------------------------------------------------------
# estimate_advantages / whiten as torchtune returns them
# ---------------------------------------------------------------------------------------------


def estimate_advantages_row(adapter: TorchtuneAdapter, seed: int, gamma: float, lam: float) -> RowResult:
    """``estimate_advantages`` on the loss batch's rows (valid positions left-justified, the recipe's
    layout): (whitened advantages, returns) against ``(whiten(gae(...).advantages), gae(...).returns)``
    with the spec's whitening (canonical) and torchtune's (the mean added back: preset torchtune)."""
    b = round_batch(loss_batch(seed), DTYPE)
    r, v, m = b["token_rewards"], b["values"], b["mask"]
    kw = {"gamma": gamma, "lam": lam}

    def got() -> dict[str, Any]:
        A, R = adapter.estimate_advantages(_f32(r), _f32(v), m, **kw)
        return {"advantages": A, "returns": R}

    def ev(whiten_kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            A, R = oracle.gae(r, v, m, **kw)
            return {"advantages": oracle.whiten(A, m, **whiten_kw), "returns": R}
        return run

    preset = preset_kwargs("torchtune", "whiten")
    cands = [Candidate("canonical", f"(whiten(gae({fmt(kw)}).advantages, mask), gae(...).returns)", ev({})),
             Candidate(fmt(preset), f"(whiten(gae({fmt(kw)}).advantages, mask, {fmt(preset)}), gae(...).returns)", ev(preset),
                       preset="torchtune", kwargs=preset)]
    tol = {"value": tolerance("adv.whiten", DTYPE), "advantages": tolerance("adv.whiten", DTYPE),
           "returns": tolerance("adv.gae", DTYPE)}
    return composition_row(f"torchtune.estimate_advantages[gamma={gamma:g},lmbda={lam:g}]", "adv.gae+adv.whiten",
                           "torchtune.rlhf.estimate_advantages", adapter, got, cands, tol, seed=seed)


def whiten_default_row(adapter: TorchtuneAdapter, seed: int) -> RowResult:
    """``whiten(x, mask)`` at torchtune's default ``shift_mean=True`` (rlhf/rewards.py:139-161), on the loss
    batch's token rewards sent as they are (garbage at masked positions)."""
    b = round_batch(loss_batch(seed), DTYPE)
    x, m = b["token_rewards"], b["mask"]

    def got() -> dict[str, Any]:
        out = adapter.call("whiten", {"x": _f32(x), "mask": m}, {"shift_mean": True})["outputs"]["out"]
        return {"value": np.where(m, out, 0.0)}

    preset = preset_kwargs("torchtune", "whiten")
    cands = [Candidate("canonical", "whiten(x, mask)", lambda: {"value": oracle.whiten(x, m)}),
             Candidate(fmt(preset), f"whiten(x, mask, {fmt(preset)})", lambda: {"value": oracle.whiten(x, m, **preset)},
                       preset="torchtune", kwargs=preset)]
    return composition_row("torchtune.whiten[shift_mean=True]", "adv.whiten", "torchtune.rlhf.whiten", adapter, got, cands,
                           {"value": tolerance("adv.whiten", DTYPE)}, seed=seed)


# ---------------------------------------------------------------------------------------------
# gradient accumulation: ppo_step's per-micro-batch loss
# ---------------------------------------------------------------------------------------------


def grad_accumulation_row(adapter: TorchtuneAdapter, seed: int, steps: int = 2) -> RowResult:
    """``ppo_step`` with ``gradient_accumulation_steps = steps``: each micro-batch's ``PPOLoss`` reduction
    (``masked_mean`` over that micro-batch) divided by ``steps`` (recipes/ppo_full_finetune_single_device.py:
    1107-1118), summed over the micro-batches, against the token mean of the whole PPO batch."""
    b = round_batch(loss_batch(seed), DTYPE)
    x, m = b["token_loss"], b["mask"]
    rows = np.array_split(np.arange(m.shape[0]), steps)

    def got() -> dict[str, Any]:
        chunks, masks = [_f32(x[r]) for r in rows], [m[r] for r in rows]
        value = float(sum(adapter.micro_batched_loss(chunks, masks, mode="token_mean")))
        grads = adapter.micro_batched_loss_grad(chunks, masks, 1.0, mode="token_mean")
        return {"value": value, "grad[token_loss]": np.concatenate([np.asarray(g) for g in grads])}

    def per_micro_batch() -> dict[str, Any]:
        value, grad = 0.0, np.zeros(m.shape)
        for r in rows:
            value += oracle.aggregate(x[r], m[r], mode="token_mean") / steps
            grad[r] = oracle.aggregate_grad(x[r], m[r], 1.0 / steps, mode="token_mean")
        return {"value": value, "grad[token_loss]": grad}

    cands = [Candidate("canonical", "aggregate(whole batch, token_mean)", aggregate_eval(x, m, TOKEN_MEAN)),
             Candidate("each micro-batch's own token mean / steps",
                       f"sum_i aggregate(micro-batch i, token_mean) / {steps} (local counts, bug-catalogue #1)", per_micro_batch)]
    return composition_row(f"torchtune.ppo_step[gradient_accumulation_steps={steps}]", "agg.token_mean",
                           "torchtune.ppo_step", adapter, got, cands, loss_tolerances(DTYPE, "agg"), seed=seed)


# ---------------------------------------------------------------------------------------------
# the PPO recipe on tiny random-weight models (trainer level)
# ---------------------------------------------------------------------------------------------


def recipe_batch(adapter: TorchtuneAdapter) -> dict[str, np.ndarray]:
    """One batch of the PPO recipe (``ops.ppo_recipe`` with ``RECIPE``) in the spec layout: a prompt column
    (masked) before the response; ``mask`` = ``~response_padding_masks``, ``mask_ext`` = ``mask`` plus the
    position ``value_seq_idxs`` (``~value_padding_masks``), float64 copies of the recipe's float32 arrays."""
    out = adapter.call("ppo_recipe", {}, RECIPE)["outputs"]

    def spec(x: Any, fill: Any = 0.0) -> np.ndarray:
        x = np.asarray(x)
        pad = np.full((x.shape[0], 1), fill, dtype=x.dtype)
        return np.concatenate([pad, x], axis=1)

    batch = {name: spec(out[name]).astype(np.float64) for name in
             ("logprobs", "ref_logprobs", "values", "rewards", "kl", "advantages", "returns", "pi_logprobs", "phi_values",
              "grad_pi_logprobs", "grad_phi_values")}
    batch["mask"] = spec(~np.asarray(out["response_padding_masks"]), False)
    batch["mask_ext"] = spec(~np.asarray(out["value_padding_masks"]), False)
    batch["scores"] = np.asarray(out["scores"], dtype=np.float64)
    for name in ("value_seq_idxs", "seq_lens", "responses"):
        batch[name] = np.asarray(out[name])
    for name in ("loss", "policy_loss", "value_loss"):
        batch[name] = float(out[name])
    return batch


def _recipe_rewards(b: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
    return oracle.rlhf_token_rewards(b["scores"], b["logprobs"], b["ref_logprobs"], mask, kl_coef=RECIPE["kl_coeff"])


def recipe_rows(adapter: TorchtuneAdapter, seed: int) -> list[RowResult]:
    t0 = time.perf_counter()
    try:
        b = recipe_batch(adapter)
    except Exception as exc:  # noqa: BLE001 - the recipe failing is a row, not a crash
        row = RowResult(id="torchtune.recipe", spec_id="reward.rlhf+adv.gae+loss.ppo", function="torchtune.recipe",
                        adapter=adapter.name, status="error", message=f"{type(exc).__name__}: {exc}")
        row.seconds = time.perf_counter() - t0
        return [row]
    m, ext = b["mask"], b["mask_ext"]
    gl = {"gamma": RECIPE["gamma"], "lam": RECIPE["lmbda"]}
    shift = preset_kwargs("torchtune", "whiten")
    note = "(score at value_seq_idxs: the position after the last valid token unless the row has one token or fills max_generated_tokens)"
    rows = [composition_row(
        "torchtune.recipe.rewards", "reward.rlhf", "torchtune.rlhf.get_rewards_ppo", adapter,
        lambda: {"value": b["rewards"]},
        [Candidate("canonical", f"rlhf_token_rewards(scores, logprobs, ref_logprobs, mask, kl_coef={RECIPE['kl_coeff']})",
                   lambda: {"value": _recipe_rewards(b, m)}),
         Candidate("score one past the last valid token", "rlhf_token_rewards(..., mask | value_seq_idxs) " + note,
                   lambda: {"value": _recipe_rewards(b, ext)})],
        {"value": tolerance("reward.rlhf", DTYPE)}, seed=RECIPE["seed"])]

    def advantages(mask: np.ndarray, whiten_kw: dict[str, Any]) -> Any:
        def run() -> dict[str, Any]:
            A, R = oracle.gae(_recipe_rewards(b, mask), b["values"], mask, **gl)
            return {"advantages": oracle.whiten(A, m, **whiten_kw), "returns[mask | value_seq_idxs]": np.where(ext, R, 0.0)}
        return run

    formula = "(whiten(gae(rlhf_token_rewards(..., {0}), values, {0}, gamma={1}, lam={2}).advantages, mask{3}), returns)"
    cands = [Candidate("canonical", formula.format("mask", gl["gamma"], gl["lam"], ""), advantages(m, {}))]
    for label, mask, kw, preset in (("torchtune's whitening", m, shift, "torchtune"),
                                    ("score one past the last valid token", ext, {}, None),
                                    ("score one past the last valid token, torchtune's whitening", ext, shift, "torchtune")):
        name = "mask | value_seq_idxs" if mask is ext else "mask"
        cands.append(Candidate(label, formula.format(name, gl["gamma"], gl["lam"], f", {fmt(kw)}" if kw else ""),
                               advantages(mask, kw), preset=preset, kwargs=dict(kw)))
    rows.append(composition_row(
        "torchtune.recipe.estimate_advantages", "reward.rlhf+adv.gae+adv.whiten", "torchtune.rlhf.estimate_advantages", adapter,
        lambda: {"advantages": b["advantages"], "returns[mask | value_seq_idxs]": np.where(ext, b["returns"], 0.0)}, cands,
        {"value": tolerance("adv.whiten", DTYPE), "advantages": tolerance("adv.whiten", DTYPE),
         "returns": tolerance("adv.gae", DTYPE)}, seed=RECIPE["seed"], note=note))

    loss = RECIPE["loss"]
    step = {"logp": b["pi_logprobs"], "old_logp": b["logprobs"], "advantages": b["advantages"], "values": b["phi_values"],
            "old_values": b["values"], "returns": b["returns"], "mask": m}
    asked_ppo = {"eps_low": loss["epsilon"], "eps_high": loss["epsilon"]}
    asked_value = {"clip": loss["value_clip_range"]}
    formula = (f"aggregate(ppo_token_loss({fmt(asked_ppo)}), token_mean) + {loss['value_coeff']} * "
               f"aggregate(value_token_loss({fmt(asked_value)}), {{}}, token_mean)")
    rows.append(composition_row(
        "torchtune.recipe.ppo_step", "loss.ppo+loss.value+agg", "torchtune.ppo_step", adapter,
        lambda: {"value": b["loss"], "grad[logp]": b["grad_pi_logprobs"], "grad[values]": b["grad_phi_values"]},
        [Candidate("canonical", formula.format("mask"),
                   lambda: ppo_loss_value(step, asked_ppo, asked_value, loss["value_coeff"])),
         Candidate("value term over ~value_padding_masks (one position past the last valid token)",
                   formula.format("mask | value_seq_idxs"),
                   lambda: ppo_loss_value(step, asked_ppo, asked_value, loss["value_coeff"], value_mask=ext))],
        loss_tolerances(DTYPE, "loss.ppo"), seed=RECIPE["seed"]))
    return rows


def extra_rows(adapter: TorchtuneAdapter, seed: int) -> list[RowResult]:
    rows = [
        # PPOLoss's defaults (rlhf/loss/ppo.py:32-37): epsilon 0.1, value_clip_range 0.2, value_coeff 0.1
        ppo_loss_row(adapter, seed, {"epsilon": 0.1, "value_clip_range": 0.2, "value_coeff": 0.1}, {}),
        # the shipped config recipes/configs/mistral/7B_full_ppo_low_memory.yaml: epsilon 0.2, 0.2, 0.1
        ppo_loss_row(adapter, seed, {"epsilon": 0.2, "value_clip_range": 0.2, "value_coeff": 0.1}, {"clip": 0.2}),
        ppo_loss_row(adapter, seed, {"epsilon": 0.2, "value_clip_range": 0.2, "value_coeff": 0.1}, {"clip": 0.2},
                     per_token_advantages=True),
        estimate_advantages_row(adapter, seed, 1.0, 0.95),  # the shipped config's gamma / lmbda
        estimate_advantages_row(adapter, seed, 0.9, 0.8),
        whiten_default_row(adapter, seed),
        grad_accumulation_row(adapter, seed),
    ]
    return rows + recipe_rows(adapter, seed)


__all__ = ["RECIPE", "extra_rows", "ppo_loss_value", "recipe_batch"]
