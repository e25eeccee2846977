"""An rlspec trace of ms-swift 4.6.0's real GRPO training step (``rlspec replay DIR/<scenario>``).

Run in ms-swift's environment, with the rlspec checkout on ``PYTHONPATH``::

    PYTHONPATH=/work/main /root/.cache/rlspec/frameworks/ms_swift/bin/python \\
        conformance/frameworks/ms_swift/recorder.py --out DIR [--scenario NAME ...] [--steps N] [--seed S]

What runs (CPU, offline). The whole ``swift rlhf --rlhf_type grpo`` pipeline, from Python:
``swift.pipelines.train.rlhf.SwiftRLHF`` (pipelines/train/rlhf.py:23, ``rlhf_main`` :258) on an
``RLHFArguments`` (arguments/rlhf_args.py:176). It loads the model through ms-swift's own loader, builds the
template and the dataset, builds ``swift.rlhf_trainers.grpo_trainer.GRPOTrainer`` (pipelines/train/sft.py:180-189)
and calls ``trainer.train()`` (sft.py:258-263). Generation is ms-swift's colocated ``TransformersEngine``
(rollout_mixin.py:390-395; ``use_vllm=False``); no vLLM or DeepSpeed is on the path. The model is a random-weight
``LlamaForCausalLM`` (2 layers, hidden 32, untied LM head) and a WordLevel tokenizer built here and saved to a
temporary folder (``model_type="llama"``, ms-swift's ``default`` template). Under ``model_type="qwen2"`` ms-swift
loads a ``Qwen2Tokenizer`` over the saved vocabulary and drops it, so Llama is used. The template's default
system prompt ("You are a helpful assistant.") is outside the vocabulary and encodes as 5 ``<unk>`` tokens.
The LM head never samples the pad token (see ``_build_model_dir``): the engine drops generated pad tokens from
the response (infer_engine/transformers_engine.py:469-471). The dataset is a local JSONL of 2-4 digit prompts. The reward is an ``ORM`` registered in ``swift.rewards.orms`` (ms-swift's plugin registry,
rewards/orm.py:16) and named in ``reward_funcs``: the sum of the digit tokens' values in the completion text,
divided by 9 x ``max_completion_length``. ``check_model=False`` keeps ``SwiftMixin.__init__`` from calling the
ModelScope hub (trainers/mixin.py:91-99).

Where the trace is taken. Every probe is an instance-level wrapper on the trainer, installed by overriding
``SwiftRLHF.train`` before ``trainer.train()`` runs. A wrapper calls the original and changes no value.
Paths below are in ``swift/`` (4.6.0), ``M`` = ``rlhf_trainers/grpo_trainer.py``; HF = transformers 5.19.0
``trainer.py``; A = accelerate 1.15.0 ``accelerator.py``.

- ``_score_completions`` (M:218-231): the samples it returns. It leaves ``self._rewards_per_func`` [N, F]
  (M:230), the rewards in that sample order. ``rewards`` = Σ_f w_f r_f, ms-swift's own weighting
  (rl_core/advantage.py:57).
- ``split_by_mini_batches`` (rollout_mixin.py:308-337): the micro-batches' samples, as ``_postprocess_batch``
  (M:233-303) splits them. Each sample gives ``response_token_ids`` (what the engine generated), ``prompt_id``
  (the group) and ``encoded`` (the template's ids and labels, encode_sample, rlhf_trainers/utils.py:708-735).
- ``_generate_and_score_completions`` (rollout_mixin.py:124-146): the per-micro-batch ``{model_inputs,
  grpo_batch}`` it returns. ``grpo_batch`` (rl_core/data.py:320-332) holds ``completion_mask`` [b, ltk]
  (labels[:, -ltk:] != -100, utils.py:1987-2060), ``old_per_token_logps`` and ``ref_per_token_logps``
  (M:761-776), ``advantages`` [b, ltk] (expand_advantage_to_per_token, M:286-297) and ``num_items_in_batch``
  (the window's completion tokens, M:798-801).
- ``compute_loss`` (M:845-862): one call per micro-batch, from HF ``training_step`` (HF:2064-2065). During it a
  forward hook on the final norm ``model.model.norm`` keeps ``hidden`` [b, T, D]. ``_get_per_token_logps_and_entropies``
  (M:1611-1633) is wrapped so that the log-probs of the loss forward (the call inside
  ``_compute_loss_and_metrics``, M:939-940, the only one there that requires grad) get a tensor hook, which
  catches d(backward scalar)/d logp.
- ``accelerator.backward`` (A:2829-2860, called at HF:2101): what it receives is the loss after HF's
  ``loss / current_gradient_accumulation_steps`` (HF:2086-2094; ms-swift sets ``model_accepts_loss_kwargs =
  False``, M:138-142). A tensor hook on that loss catches c = d(scalar .backward() ran on)/d(that loss).
  accelerate divides by its own ``gradient_accumulation_steps`` (A:2849-2851), and c is that factor. The
  trace's ``loss`` is c x that loss, the scalar backward was called on. The micro-batch is recorded after its
  backward, with ``grad_logp`` from the hook.
- ``_clip_grad_norm`` (HF:2741-2747, called at HF:1913-1914 after the last micro-batch's backward, before
  ``optimizer.step()``): the probe. It records ``lm_head.weight.grad``, the accumulated gradient before
  clipping (one process: nothing to all-reduce), and ``lm_head.weight``, the weight every micro-batch of the
  step used. This is also where the step ends. ``max_grad_norm`` must be > 0 for HF to call it (1.0 here).

How ms-swift's tensors map to the trace (columns of the full sequence, prompt then completion). The HF path keeps
[b, ltk] tensors for the last ``ltk = grpo_batch.logits_to_keep`` columns (M:1576-1583: logits[:, -(ltk+1):-1]
score input_ids[:, -ltk:]). They go to columns T - ltk .. T - 1 of [b, T] tensors, 0 / False elsewhere:
``logp``, ``old_logp``, ``ref_logp``, ``advantages`` and ``loss_mask`` (= ``grpo_batch.completion_mask``, what
the loss counts: M:1082-1133, no entropy mask, no overlong filter, no off-policy mask in these scenarios).
``completion_mask`` is not ms-swift's mask. It is the tokens the engine generated (``response_token_ids``),
placed where the template put the response (its first label), through the first EOS. ``prompt_mask`` is the
attended tokens before it. ``group_ids`` numbers the ``prompt_id`` values in sample order, and ``row_ids`` is
a row's index in that order (the generation batch the step trains on).

Manifest ``config``: ms-swift's claims, as its code and docs state them. Every loss adds ``beta`` x the k3 KL
(M:972-976, clamped to [-10, 10] of a log-ratio clamped to ±20) per token before aggregating (M:1064-1065).
Per ``loss_type`` (docs: https://swift.readthedocs.io/zh-cn/v4.0/Instruction/GRPO/DeveloperGuide/loss_types.html):

- ``grpo``: each sequence's token mean, averaged over the micro-batch (M:1082-1084); HF divides by the
  accumulation steps. agg ``seq_mean_token_mean``, agg_scope ``micro_batch``.
- ``bnpo``: the token mean of the micro-batch (M:1085-1086). agg ``token_mean``, agg_scope ``micro_batch``.
- ``dapo`` and ``cispo``: the sum over the micro-batch, divided by ``num_items_in_batch / num_processes``, the
  completion tokens of the whole accumulation window (M:79-81, M:1126-1133). ``_undo_gradient_accumulation_scaling``
  (M:1228-1241) multiplies by the accumulation steps to cancel HF's division. agg ``token_mean``, agg_scope
  ``step``. This is the claim ms-swift issue #10117 disputes (a second division by the accumulation steps),
  and the trace's ``grad_logp`` and ``loss`` show what 4.6.0 does.

PPO clip: ``eps_low`` = ``epsilon``, ``eps_high`` = ``epsilon_high`` (``epsilon`` when unset, M:2138-2139).
CISPO's weight is ``sg(min(r, epsilon_high))`` with no lower bound (M:1036-1038), an absolute cap: the manifest
says ``cispo_bound`` absolute, ``eps_high`` = ``epsilon_high`` and ``eps_low`` = None. ms-swift's own settings are
kept under ``config["ms_swift"]``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from conformance.frameworks.recorder_cli import recorder_main
from rlspec.trace import TraceRecorder

COMMON: dict[str, Any] = dict(
    num_generations=4,
    per_device_train_batch_size=2,  # 2 rows per micro-batch: each group of 4 spans two micro-batches
    gradient_accumulation_steps=4,  # 4 micro-batches per optimizer step (steps_per_generation defaults to it)
    num_iterations=2,  # every generation batch trains two steps: the second step's ratios move off 1
    max_completion_length=6,
    temperature=0.7,
    learning_rate=1e-3,
    max_grad_norm=1.0,
    epsilon=0.2,
    scale_rewards="group",
)

SCENARIOS: dict[str, dict[str, Any]] = {
    "dapo": dict(loss_type="dapo", epsilon_high=0.28, beta=0.0),
    "cispo": dict(loss_type="cispo", epsilon_high=5.0, beta=0.0),  # MiniMax-M1's cap; ms-swift's default is 0.2
    "grpo": dict(loss_type="grpo", beta=0.0),
    "bnpo": dict(loss_type="bnpo", beta=0.0),
    "dapo_kl": dict(loss_type="dapo", epsilon_high=0.28, beta=0.04),  # a reference model and the k3 KL term
}

VOCAB: dict[str, int] = {"<pad>": 0, "<eos>": 1, "<unk>": 2, "###": 3, "Human:": 4, "Assistant:": 5,
                         **{str(d): 6 + d for d in range(10)}}  # the default template's words, then the digits
PAD_ID, EOS_ID = 0, 1
EOS_BOOST = 0.7
REWARD_NAME = "rlspec_digit_sum"

AGG = {"grpo": ("seq_mean_token_mean", "micro_batch"), "bnpo": ("token_mean", "micro_batch"),
       "dapo": ("token_mean", "step"), "cispo": ("token_mean", "step")}


def digit_reward(completion: str, max_completion_length: int) -> float:
    """The reward of one completion text: its digit tokens' values summed, over 9 x max_completion_length."""
    return sum(int(w) for w in completion.split() if w.isdigit()) / (9.0 * max_completion_length)


def claims(settings: dict[str, Any], eos_token_id: int) -> dict[str, Any]:
    """The manifest ``config``: what ms-swift says its GRPO step computes under ``settings``."""
    lt = settings["loss_type"]
    agg, scope = AGG[lt]
    high = settings.get("epsilon_high")
    high = settings["epsilon"] if high is None else high
    if lt == "cispo":
        loss, clip = "cispo", {"eps_low": None, "eps_high": float(high), "cispo_bound": "absolute"}
    else:
        loss, clip = "ppo", {"eps_low": float(settings["epsilon"]), "eps_high": float(high)}
    return {
        "algorithm": "grpo", "loss": loss, "agg": agg, "agg_scope": scope, **clip,
        "kl_coef": float(settings["beta"]), "kl_estimator": "k3", "entropy_coef": 0.0,
        "temperature": float(settings["temperature"]), "group_size": int(settings["num_generations"]),
        "grpo_scale": settings["scale_rewards"], "grpo_std_ddof": 1, "grpo_eps": 1e-4,
        "grad_reduce": "mean", "eos_token_id": eos_token_id,
        "ms_swift": {k: settings.get(k) for k in ("loss_type", "epsilon", "epsilon_high", "beta", "temperature",
                                                 "num_generations", "scale_rewards", "gradient_accumulation_steps",
                                                 "per_device_train_batch_size", "num_iterations", "max_completion_length")},
    }


def _offline() -> None:
    for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "MODELSCOPE_OFFLINE"):
        os.environ.setdefault(k, "1")


def _build_model_dir(folder: Path, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(dict(VOCAB), unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # joins tokens with single spaces (a continuation prefix no token has: "###" stays a word of its own)
    tok.decoder = decoders.WordPiece(prefix="<cont>", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         initializer_range=0.2,  # peaked next-token distributions: completions of varied lengths
                         tie_word_embeddings=False, pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    with torch.no_grad():
        # The engine drops every generated pad token from the response (infer_engine/transformers_engine.py:469-471),
        # so the trained sequence would differ from the sampled one. A large constant in embedding dimension 0 keeps
        # the final hidden state's dimension 0 positive; the pad row of the LM head is very negative there (pad is
        # never sampled) and the EOS row positive (some completions stop before max_completion_length).
        model.model.embed_tokens.weight[:, 0] = 10.0
        model.lm_head.weight[:, 0] = 0.0  # dimension 0 only moves the pad and EOS logits
        model.lm_head.weight[PAD_ID] = 0.0
        model.lm_head.weight[PAD_ID, 0] = -20.0
        model.lm_head.weight[EOS_ID, 0] = EOS_BOOST
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.eos_token_id = EOS_ID
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _write_dataset(path: Path, n: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with path.open("w") as f:
        for _ in range(n):
            k = int(torch.randint(2, 5, (), generator=g))  # prompts of 2-4 digits: rows of different lengths
            digits = torch.randint(0, 10, (k,), generator=g).tolist()
            f.write(json.dumps({"messages": [{"role": "user", "content": " ".join(map(str, digits))}]}) + "\n")


def _full(x: torch.Tensor | None, T: int, fill: Any = 0) -> torch.Tensor | None:
    """[b, ltk] (the last ltk columns) -> [b, T], ``fill`` in the other columns."""
    if x is None:
        return None
    out = torch.full((x.shape[0], T), fill, dtype=x.dtype)
    out[:, T - x.shape[1]:] = x.detach().cpu()
    return out


class _Capture:
    """The wrappers on one GRPOTrainer and the trace they write (see the module docstring)."""

    def __init__(self, trainer: Any, rec: TraceRecorder) -> None:
        self.trainer, self.rec = trainer, rec
        self.batches: dict[int, dict[str, Any]] = {}  # id(grpo_batch) -> the micro-batch's static tensors
        self.samples: list[Any] = []
        self.chunks: list[list[Any]] = []
        self.current: dict[str, Any] | None = None  # the micro-batch inside compute_loss / backward
        self.step_extra: dict[str, list[Any]] = {}
        self.in_step = False
        self.steps: list[int] = []
        model = trainer.model
        self.norm = model.model.norm
        self.weight = model.get_output_embeddings().weight
        for name in ("_score_completions", "split_by_mini_batches", "_generate_and_score_completions", "compute_loss",
                     "_get_per_token_logps_and_entropies", "_clip_grad_norm"):
            setattr(trainer, name, self._wrap(name, getattr(trainer, name)))
        trainer.accelerator.backward = self._wrap("backward", trainer.accelerator.backward)

    def _wrap(self, name: str, original: Any) -> Any:
        handler = getattr(self, f"_on_{name.lstrip('_')}")

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return handler(original, *args, **kwargs)

        return wrapper

    # -- rollout -------------------------------------------------------------------------------------
    def _on_score_completions(self, original: Any, samples: Any) -> Any:
        self.samples = original(samples)
        return self.samples

    def _on_split_by_mini_batches(self, original: Any, samples: Any) -> Any:
        self.chunks = original(samples)
        return self.chunks

    def _on_generate_and_score_completions(self, original: Any, inputs: Any) -> Any:
        out = original(inputs)
        t = self.trainer
        rewards = (t._rewards_per_func * t.reward_weights.unsqueeze(0)).nansum(dim=1).cpu()
        index = {id(s): i for i, s in enumerate(self.samples)}
        groups: dict[Any, int] = {}
        for s in self.samples:
            groups.setdefault(s.prompt_id, len(groups))
        assert len(self.chunks) == len(out), f"{len(self.chunks)} sample chunks for {len(out)} micro-batches"
        for chunk, batch in zip(self.chunks, out):
            self.batches[id(batch["grpo_batch"])] = self._static(chunk, batch, rewards, index, groups)
        return out

    def _static(self, chunk: list[Any], batch: dict[str, Any], rewards: torch.Tensor, index: dict[int, int],
                groups: dict[Any, int]) -> dict[str, Any]:
        mi, gb = batch["model_inputs"], batch["grpo_batch"]
        ids = mi["input_ids"].detach().cpu()
        att = mi["attention_mask"].detach().cpu().bool()
        b, T = ids.shape
        prompt = torch.zeros(b, T, dtype=torch.bool)
        completion = torch.zeros(b, T, dtype=torch.bool)
        for i, s in enumerate(chunk):
            first = int(att[i].nonzero()[0])  # where the row's tokens begin (left or right padding)
            start = first + next(j for j, lab in enumerate(s.encoded["labels"]) if lab != -100)
            gen = list(s.response_token_ids)
            if EOS_ID in gen:
                gen = gen[:gen.index(EOS_ID) + 1]
            elif not s.is_truncated:
                raise RuntimeError(f"row {i}: a completion {gen} stopped short of max_completion_length without EOS: the "
                                   "engine dropped generated pad tokens")
            if ids[i, start:start + len(gen)].tolist() != gen:
                raise RuntimeError(f"row {i}: the encoded response {ids[i, start:start + len(gen)].tolist()} is not the "
                                   f"generated tokens {gen}")
            prompt[i, first:start] = True
            completion[i, start:start + len(gen)] = True
        rows = torch.tensor([index[id(s)] for s in chunk])
        return dict(
            input_ids=ids, attention_mask=att, prompt_mask=prompt, completion_mask=completion,
            loss_mask=_full(gb.completion_mask.bool(), T, False),
            old_logp=_full(gb.old_per_token_logps, T), ref_logp=_full(gb.ref_per_token_logps, T),
            advantages=_full(gb.advantages, T), rewards=rewards[rows], row_ids=rows,
            group_ids=torch.tensor([groups[s.prompt_id] for s in chunk]),
            num_items_in_batch=float(gb.num_items_in_batch),
        )

    # -- one micro-batch -----------------------------------------------------------------------------
    def _on_compute_loss(self, original: Any, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.in_step:
            self.rec.begin_step(int(self.trainer.state.global_step))
            self.in_step, self.step_extra = True, {}
        batch = inputs[0] if isinstance(inputs, list) else inputs
        self.current = {"static": self.batches[id(batch["grpo_batch"])]}

        def keep_hidden(module: Any, args_: Any, output: torch.Tensor) -> None:
            self.current["hidden"] = output.detach().cpu()

        hook = self.norm.register_forward_hook(keep_hidden)
        try:
            loss = original(model, inputs, *args, **kwargs)
        finally:
            hook.remove()
        self.current["compute_loss"] = float(loss.detach())
        return loss

    def _on_get_per_token_logps_and_entropies(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        logps, entropies = original(*args, **kwargs)
        cur = self.current
        if cur is not None and logps.requires_grad and "logp" not in cur:
            cur["logp"] = logps.detach().cpu()

            def keep_grad(g: torch.Tensor) -> None:
                cur["grad_logp"] = g.detach().cpu() + cur.get("grad_logp", 0)

            logps.register_hook(keep_grad)
        return logps, entropies

    def _on_backward(self, original: Any, loss: torch.Tensor, **kwargs: Any) -> Any:
        cur = self.current
        if cur is None:  # not a GRPO micro-batch (no other backward runs in these scenarios)
            return original(loss, **kwargs)
        scale: list[torch.Tensor] = []
        loss.register_hook(lambda g: scale.append(g.detach().cpu()))
        result = original(loss, **kwargs)
        st = cur["static"]
        T = st["input_ids"].shape[1]
        c = float(scale[0])
        self.rec.micro_batch(
            input_ids=st["input_ids"], attention_mask=st["attention_mask"], prompt_mask=st["prompt_mask"],
            completion_mask=st["completion_mask"], loss_mask=st["loss_mask"], logp=_full(cur["logp"], T),
            grad_logp=_full(cur["grad_logp"], T), old_logp=st["old_logp"], ref_logp=st["ref_logp"],
            rewards=st["rewards"], group_ids=st["group_ids"], row_ids=st["row_ids"], advantages=st["advantages"],
            hidden=cur["hidden"], loss=loss.detach().cpu() * c,
        )
        for key, value in (("compute_loss", cur["compute_loss"]), ("training_step_loss", float(loss.detach())),
                           ("accelerate_backward_scale", c), ("num_items_in_batch", st["num_items_in_batch"])):
            self.step_extra.setdefault(key, []).append(value)
        self.current = None
        return result

    # -- the step's end ------------------------------------------------------------------------------
    def _on_clip_grad_norm(self, original: Any, model: Any) -> Any:
        t = self.trainer
        self.rec.probe("lm_head.weight", self.weight.grad, lm_head_weight=self.weight)
        self.rec.end_step(current_gradient_accumulation_steps=int(t.current_gradient_accumulation_steps),
                          args_gradient_accumulation_steps=int(t.args.gradient_accumulation_steps),
                          accelerator_gradient_accumulation_steps=int(t.accelerator.gradient_accumulation_steps),
                          num_processes=int(t.accelerator.num_processes), **self.step_extra)
        self.steps.append(int(t.state.global_step))
        self.in_step = False
        return original(model)


def record(out_dir: str | os.PathLike[str], scenario: str, steps: int = 4, seed: int = 0) -> Path:
    """Train ms-swift's GRPOTrainer ``steps`` optimizer steps under ``SCENARIOS[scenario]`` and write the trace
    to ``out_dir/scenario``; returns that folder."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario: {scenario!r} not one of {', '.join(SCENARIOS)}")
    _offline()
    import swift
    from swift.arguments import RLHFArguments
    from swift.pipelines.train.rlhf import SwiftRLHF
    from swift.rewards import orms
    from swift.rewards.orm import ORM

    settings = {**COMMON, **SCENARIOS[scenario]}
    trace_dir = Path(out_dir) / scenario
    L = int(settings["max_completion_length"])

    class DigitSum(ORM):
        def __call__(self, completions: list[str], **kwargs: Any) -> list[float]:
            return [digit_reward(c, L) for c in completions]

    orms[REWARD_NAME] = DigitSum
    rec = TraceRecorder(trace_dir, config=claims(settings, EOS_ID),
                        trainer={"name": "ms-swift", "version": swift.__version__, "scenario": scenario,
                                 "entry": "swift.pipelines.train.rlhf.SwiftRLHF (swift rlhf --rlhf_type grpo)",
                                 "trainer": "swift.rlhf_trainers.grpo_trainer.GRPOTrainer", "seed": seed,
                                 "model": "random LlamaForCausalLM (2 layers, hidden 32, vocab 16, untied head)"})
    holder: dict[str, _Capture] = {}

    class Recorded(SwiftRLHF):
        def train(self, trainer: Any) -> Any:
            holder["capture"] = _Capture(trainer, rec)
            return super().train(trainer)

    with tempfile.TemporaryDirectory(prefix="rlspec-ms-swift-") as tmp:
        tmp_path = Path(tmp)
        _build_model_dir(tmp_path / "model", seed)
        prompts_per_step = settings["per_device_train_batch_size"] * settings["gradient_accumulation_steps"] // settings["num_generations"]
        _write_dataset(tmp_path / "prompts.jsonl", max(prompts_per_step * steps, 8), seed)
        args = RLHFArguments(
            rlhf_type="grpo", model=str(tmp_path / "model"), model_type="llama", template="default",
            dataset=[str(tmp_path / "prompts.jsonl")], reward_funcs=[REWARD_NAME], use_vllm=False,
            tuner_type="full", torch_dtype="float32", max_steps=steps, output_dir=str(tmp_path / "run"),
            report_to=[], save_strategy="no", logging_steps=1, dataloader_num_workers=0, dataset_num_proc=1,
            split_dataset_ratio=0.0, seed=seed, check_model=False, **settings,
        )
        Recorded(args).main()
    written = holder["capture"].steps if "capture" in holder else []
    if written != list(range(steps)):
        raise RuntimeError(f"{scenario}: recorded steps {written}, expected 0..{steps - 1}")
    return trace_dir


def main(argv: list[str] | None = None) -> int:
    return recorder_main(argv, description=__doc__.splitlines()[0], scenarios=SCENARIOS, record=record,
                         default_steps=4)


if __name__ == "__main__":
    sys.exit(main())
