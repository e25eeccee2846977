"""Rollouts: sample ``group_size`` completions per prompt with ``model.generate`` at the configured
temperature (the synchronous trainer without top-k / top-p, so the samples come from exactly the distribution its
log-probs describe; the asynchronous actors optionally truncated), score them with the task's verifiable reward,
and lay them out in spec conventions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
import torch

from refimpl.trainer.step import position_ids_from
from refimpl.trainer.task import Task


def derived_seed(*parts: int) -> int:
    """A 63-bit seed from integers (stable across processes and Python versions)."""
    h = hashlib.blake2b(repr(tuple(int(p) for p in parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


@dataclass
class Batch:
    """One rank's rollout batch (rows = prompts x group_size, each group contiguous), [B, T] with
    T = prompt_width + max_new_tokens for every step and rank."""

    input_ids: torch.Tensor  # [B, T] long: left-padded prompt, then the completion, right-padded
    attention_mask: torch.Tensor  # [B, T] long: 1 on prompt tokens and on completion tokens through EOS
    position_ids: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T] bool: the trained completion tokens (through the first EOS)
    rewards: torch.Tensor  # [B] float32
    correct: torch.Tensor  # [B] bool: exact answer
    completion_lengths: torch.Tensor  # [B] long: valid completion tokens
    truncated: torch.Tensor  # [B] bool: no EOS within max_new_tokens
    prompt_width: int
    # asynchronous mode: recorded by the rollout actor at sampling time
    behav_logp: torch.Tensor | None = None  # [B, T] float32 log pi_behav(x_t) of the sampled tokens, 0 off the mask
    behav_version: torch.Tensor | None = None  # [B] long: the weights version that sampled each row
    # engine_check: the actor's own transformers forward of the batch ([B, T, V] float32 logits, float32 and
    # bfloat16 weights), against which --verify checks behav_logp
    behav_check_logits: torch.Tensor | None = None
    behav_check_logits_half: torch.Tensor | None = None
    # keep_sampling_mask (and engine_check under truncation): the set each token was drawn from, [B, T, V] bool
    support: torch.Tensor | None = None
    # filled in by the trainer
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    old_entropy: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None  # [B] or [B, T]
    returns: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None  # [B, T] the rollout correction's constant weights (1 without one)
    keep: torch.Tensor | None = None  # [B, T] bool: tokens the rejection keeps (the mask without one)

    @property
    def loss_mask(self) -> torch.Tensor:
        """The tokens the loss counts: the mask, minus the tokens a rejection dropped."""
        return self.mask if self.keep is None else self.mask & self.keep

    def rows(self, start: int, stop: int) -> "Batch":
        """Rows [start, stop) of every per-row tensor."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v[start:stop] if isinstance(v, torch.Tensor) else v
        return replace(self, **out)

    @property
    def size(self) -> int:
        return int(self.input_ids.shape[0])


# The synchronous sampler draws from softmax(z / T) over the whole vocabulary: the distribution the log-probs
# describe. The asynchronous actors may add top-k / top-p (TrainConfig.top_k, top_p); nothing else, ever.
UNTRUNCATED = {"top_k": 0, "top_p": 1.0, "min_p": None, "repetition_penalty": 1.0}


def sample_prompts(task: Task, seed: int, step: int, n_global: int) -> list[Any]:
    """The step's prompts over all ranks (rank r takes its contiguous share)."""
    rng = np.random.default_rng(derived_seed(seed, step, 0x5EED))
    return task.sample_prompts(n_global, rng, step)


def prompt_tensors(task: Task, prompts: list[Any], group_size: int,
                   device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt left-padded to the task's prompt width and repeated ``group_size`` times: the ids and the
    attention mask, [len(prompts) * group_size, prompt_width] long."""
    P = task.prompt_width
    prompt = torch.full((len(prompts), P), task.pad_id, dtype=torch.long)
    prompt_att = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids = task.prompt_ids(p)
        prompt[i, P - len(ids):] = torch.tensor(ids)
        prompt_att[i, P - len(ids):] = 1
    return prompt.repeat_interleave(group_size, dim=0).to(device), prompt_att.repeat_interleave(group_size, dim=0).to(device)


@torch.no_grad()
def generate(lm: torch.nn.Module, task: Task, prompts: list[Any], *, group_size: int,
             temperature: float, max_new_tokens: int, seed: int, device: torch.device,
             behaviour_logp: bool = False, top_k: int = 0, top_p: float = 1.0, behav_form: str = "sampling",
             support: bool = False) -> Batch:
    """Sample ``group_size`` completions per prompt (seeded: the same seed gives the same batch), from the
    tempered distribution truncated by ``top_k`` / ``top_p`` (transformers' warpers: temperature, top-k, top-p).

    ``behaviour_logp``: also record, at sampling time, the log-probability of every sampled token in
    ``Batch.behav_logp``, from the decoding step's float32 logits at the temperature: ``behav_form`` "sampling"
    renormalised over the set the token was drawn from (the warpers' finite scores: logprob.sampling, what vLLM's
    processed_logprobs return), "full" over the whole vocabulary (logprob.token). ``support``: also record that set
    ([B, T, V] bool) in ``Batch.support``."""
    from transformers import GenerationConfig

    P = task.prompt_width
    n = len(prompts) * group_size
    prompt, prompt_att = prompt_tensors(task, prompts, group_size, device)
    gen_config = GenerationConfig(
        do_sample=True, temperature=float(temperature), **{**UNTRUNCATED, "top_k": int(top_k), "top_p": float(top_p)},
        typical_p=1.0,
        max_new_tokens=int(max_new_tokens), min_new_tokens=0,
        pad_token_id=task.pad_id, eos_token_id=task.eos_id, use_cache=True,
        return_dict_in_generate=behaviour_logp or support, output_logits=behaviour_logp or support,
        output_scores=behaviour_logp or support,
    )
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        out = lm.generate(input_ids=prompt, attention_mask=prompt_att, generation_config=gen_config)
    recorded = behaviour_logp or support
    step_logits, step_scores = (out.logits, out.scores) if recorded else (None, None)
    out = out.sequences if recorded else out
    completion = torch.full((n, max_new_tokens), task.pad_id, dtype=torch.long, device=device)
    gen = out[:, P:]
    completion[:, : gen.shape[1]] = gen
    behav = kept = None
    if step_logits is not None:  # decoding step j predicted completion token j
        behav = torch.zeros((n, max_new_tokens), dtype=torch.float32, device=device)
        kept = torch.zeros((n, max_new_tokens, step_logits[0].shape[-1]), dtype=torch.bool, device=device)
        for j, (logits, scores) in enumerate(zip(step_logits, step_scores)):
            a = logits.float() / float(temperature)
            kept[:, j] = torch.isfinite(scores)  # the warpers set every token they cut to -inf
            if behav_form == "sampling":
                a = a.masked_fill(~kept[:, j], float("-inf"))
            behav[:, j] = torch.log_softmax(a, dim=-1).gather(1, completion[:, j:j + 1]).squeeze(1)
    return layout_batch(task, prompts, group_size, completion, behav if behaviour_logp else None, device=device,
                        support=kept if support else None)


def layout_batch(task: Task, prompts: list[Any], group_size: int, completion: torch.Tensor,
                 behav: torch.Tensor | None, *, device: torch.device, support: torch.Tensor | None = None) -> Batch:
    """The :class:`Batch` of ``group_size`` completions per prompt: ``completion`` [n, max_new_tokens] holds
    each row's sampled tokens (rows ``i*group_size ...`` belong to prompt ``i``; anything after the first EOS is
    ignored and becomes padding), ``behav`` [n, max_new_tokens] the behaviour log-prob of each sampled token (or
    None), ``support`` [n, max_new_tokens, V] the set each was drawn from (or None). Prompts are left-padded to
    the task's prompt width; the loss mask covers the completion through its first EOS; rewards come from the
    task's verifier."""
    P = task.prompt_width
    n, max_new_tokens = completion.shape
    prompt, prompt_att = prompt_tensors(task, prompts, group_size, device)
    # valid = through the first EOS; whatever follows it is padding
    is_eos = completion == task.eos_id
    has_eos = is_eos.any(dim=1)
    first_eos = torch.where(has_eos, is_eos.int().argmax(dim=1), torch.full_like(has_eos, max_new_tokens - 1, dtype=torch.long))
    cols = torch.arange(max_new_tokens, device=device).unsqueeze(0)
    comp_valid = cols <= first_eos.unsqueeze(1)
    completion = torch.where(comp_valid, completion, torch.full_like(completion, task.pad_id))
    input_ids = torch.cat([prompt, completion], dim=1)
    attention_mask = torch.cat([prompt_att, comp_valid.long()], dim=1)
    mask = torch.cat([torch.zeros_like(prompt, dtype=torch.bool), comp_valid], dim=1)
    behav_logp = None
    if behav is not None:
        behav_logp = torch.cat([torch.zeros((n, P), dtype=torch.float32, device=device), behav.float()], dim=1)
        behav_logp = torch.where(mask, behav_logp, torch.zeros_like(behav_logp))
    comp_cpu, valid_cpu = completion.cpu(), comp_valid.cpu()
    rewards, correct = task.score_batch([prompts[i // group_size] for i in range(n)],
                                        [comp_cpu[i][valid_cpu[i]].tolist() for i in range(n)])
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from(attention_mask),
        mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float32, device=device),
        correct=torch.tensor(correct, dtype=torch.bool, device=device),
        completion_lengths=comp_valid.sum(dim=1),
        truncated=~has_eos,
        prompt_width=P,
        behav_logp=behav_logp,
        support=None if support is None else torch.cat(
            [torch.zeros((n, P, support.shape[2]), dtype=torch.bool, device=device), support.to(device)], dim=1),
    )


__all__ = ["Batch", "generate", "layout_batch", "sample_prompts", "derived_seed"]
