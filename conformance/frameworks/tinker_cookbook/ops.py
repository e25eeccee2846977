"""The tinker-cookbook calls the subprocess worker runs inside tinker-cookbook's environment (loaded by file
path by ``conformance/frameworks/subprocess_worker.py``; imports only torch, NumPy, tinker and tinker_cookbook).

tinker-cookbook 0.6.1 trains on the Tinker service: the policy losses (``importance_sampling``, ``ppo``,
``cispo``, ``dro``, ``gspo``, ``stable_reinforce``) run there, behind ``TrainingClient.forward_backward``, and
cannot be called. What the cookbook computes locally, on CPU, before it sends a batch is called here (paths relative to
``tinker_cookbook/``):

| op | tinker-cookbook |
|---|---|
| ``compute_advantages`` | ``rl/data_processing.py::compute_advantages`` (:24-43) on one ``TrajectoryGroup`` per group |
| ``remove_constant_reward_groups`` | ``rl/data_processing.py::remove_constant_reward_groups`` (:305-332) |
| ``prepare_minibatch`` | ``rl/train.py::prepare_minibatch`` (:1787-1854), what the synchronous trainer calls on a batch (:2200, the streaming one per minibatch at :2062): ``compute_advantages``, ``assemble_training_data`` (:266-302, ``trajectory_to_data`` :117-263) and, with ``kl_penalty_coef > 0``, ``rl/metrics.py::incorporate_kl_penalty`` (:165-225); optionally after ``remove_constant_reward_groups``, as the synchronous loop applies it (``rl/train.py:2383-2384``) |

How a spec ``[B, T]`` batch becomes trajectories (``_trajectories``): row ``b`` is one trajectory whose tokens
are positions ``0 .. L_b - 1`` (``L_b`` = one past the row's last action position; a row without an action
keeps its whole width as the prompt). Each maximal run of ``action`` positions is one turn: its
``Transition.ob`` is every earlier position (the prompt, then the previous turns and the observation tokens
between them, so each observation extends the last one and the trajectory is one ``Datum``) and its
``Transition.ac`` holds the run's tokens with the sampled log-probs ``logp``. A run whose positions are not in
``mask`` is a parse-error turn flagged ``parse_error_masked`` (``rl/types.py:78``; the cookbook gives its
tokens mask 0 and advantage 0, ``data_processing.py:245-247``). ``step_rewards[b]`` is the first transition's
``reward`` and ``final_rewards[b]`` the group reward, so ``get_total_rewards`` (``rl/types.py:429-442``) is
their sum. Token ids are distinct per row (``1 + b*T + t``), so the reference model's stand-in can answer
by sequence. Contiguous blocks of ``group_size`` rows are one ``TrajectoryGroup`` each.

Back to the spec layout: a ``Datum`` of a row has the positions ``1 .. L_b - 1`` (its targets; position 0 is
never a target, ``data_processing.py:177-179``): ``advantages[b, t]`` and ``datum_mask[b, t]`` are the datum's
entries ``t - 1``, ``covered[b, t]`` says which positions a datum has, and ``kept[b]`` whether the row's
group survived ``remove_constant_reward_groups``.

Two stand-ins, and nothing else:
- ``incorporate_kl_penalty`` scores each sequence with the reference model through
  ``base_sampling_client.sample(...)`` (``rl/metrics.py:27-62``, ``score_sequences``), a Tinker service call.
  ``_ReferenceLogprobs`` answers it locally with the spec's ``ref_logp`` of that row (``prompt_logprobs`` =
  ``[None]`` + ``ref_logp[b, 1:L_b]``, as the service gives ``None`` for the first position); everything
  after that call is the cookbook's own code.
- ``prepare_minibatch`` logs two groups with ``print_group`` (``rl/train.py:214-271``), which decodes tokens
  with the tokenizer; ``_Tokenizer.decode`` writes the ids as text. The env group builders are asked only
  ``logging_tags()`` (``_Builder`` returns none).
"""

from __future__ import annotations

import asyncio
import types
from typing import Any


def load() -> dict[str, Any]:
    import numpy as np
    import tinker
    import torch
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl import data_processing, train
    from tinker_cookbook.rl.types import (
        PARSE_ERROR_MASKED_METRIC_KEY,
        Trajectory,
        TrajectoryGroup,
        Transition,
    )

    class _ReferenceLogprobs:
        """Stand-in for the reference model's ``tinker.SamplingClient`` (module docstring)."""

        def __init__(self, table: dict[tuple[int, ...], list[float | None]]) -> None:
            self.table = table

        def sample(self, prompt: Any, num_samples: int, sampling_params: Any, include_prompt_logprobs: bool) -> Any:
            response = types.SimpleNamespace(prompt_logprobs=self.table[tuple(prompt.to_ints())], prompt_cache_hit_tokens=0,
                                             sequences=[types.SimpleNamespace(tokens=[0] * sampling_params.max_tokens)])

            async def coroutine() -> Any:
                return response

            return types.SimpleNamespace(coroutine=coroutine)

    class _Tokenizer:
        def decode(self, ids: Any) -> str:
            return " ".join(str(i) for i in ids)

    class _Builder:
        def logging_tags(self) -> list[str]:
            return []

    def _groups_of(rewards: list[float], group_size: int) -> list[Any]:
        """One TrajectoryGroup per contiguous block of rewards (trajectories without transitions: the total
        reward is the group reward)."""
        empty = tinker.ModelInput.from_ints([])
        return [TrajectoryGroup(trajectories_G=[Trajectory(transitions=[], final_ob=empty) for _ in range(group_size)],
                                final_rewards_G=rewards[i:i + group_size], metrics_G=[{} for _ in range(group_size)])
                for i in range(0, len(rewards), group_size)]

    def compute_advantages(t: dict[str, Any], *, group_size: int) -> dict[str, Any]:
        groups = _groups_of(t["rewards"].tolist(), group_size)
        return {"advantages": torch.cat(data_processing.compute_advantages(groups))}

    def remove_constant_reward_groups(t: dict[str, Any], *, group_size: int) -> dict[str, Any]:
        groups = _groups_of(t["rewards"].tolist(), group_size)
        kept = data_processing.remove_constant_reward_groups(groups)
        return {"kept": np.array([i for i, g in enumerate(groups) if any(g is k for k in kept)], dtype=np.int64)}

    def _runs(row: Any) -> list[tuple[int, int]]:
        """Maximal runs [start, stop) of True in a 1-D bool array."""
        runs, start = [], None
        for i, v in enumerate(list(row) + [False]):
            if v and start is None:
                start = i
            elif not v and start is not None:
                runs.append((start, i))
                start = None
        return runs

    def _trajectories(t: dict[str, Any], T: int) -> tuple[list[Any], list[int]]:
        mask, action = t["mask"].numpy().astype(bool), t["action"].numpy().astype(bool)
        logp = t["logp"].tolist()
        step = t["step_rewards"].tolist()
        trajectories, lengths = [], []
        for b in range(mask.shape[0]):
            tokens = [1 + b * T + i for i in range(T)]
            runs = _runs(action[b])
            length = runs[-1][1] if runs else T
            transitions = []
            for k, (s, e) in enumerate(runs or [(length, length)]):
                if mask[b, s:e].any() and not mask[b, s:e].all():
                    raise ValueError(f"row {b}: the action run [{s}, {e}) is partly masked (a turn is masked whole)")
                masked = bool(e > s and not mask[b, s])
                transitions.append(Transition(
                    ob=tinker.ModelInput.from_ints(tokens[:s]),
                    ac=TokensWithLogprobs(tokens=tokens[s:e], maybe_logprobs=logp[b][s:e]),
                    reward=step[b] if k == 0 else 0.0, episode_done=k == len(runs or [0]) - 1,
                    metrics={PARSE_ERROR_MASKED_METRIC_KEY: 1.0} if masked else {}))
            trajectories.append(Trajectory(transitions=transitions, final_ob=tinker.ModelInput.from_ints(tokens[:length])))
            lengths.append(length)
        return trajectories, lengths

    def prepare_minibatch(t: dict[str, Any], *, group_size: int, kl_penalty_coef: float = 0.0,
                          kl_discount_factor: float = 0.0, remove_constant_reward_groups: bool = False) -> dict[str, Any]:
        B, T = t["mask"].shape
        trajectories, lengths = _trajectories(t, T)
        final = t["final_rewards"].tolist()
        groups = [TrajectoryGroup(trajectories_G=trajectories[i:i + group_size], final_rewards_G=final[i:i + group_size],
                                  metrics_G=[{} for _ in range(group_size)]) for i in range(0, B, group_size)]
        rows = [list(range(i, i + group_size)) for i in range(0, B, group_size)]
        if remove_constant_reward_groups:  # rl/train.py:2383-2384
            kept = data_processing.remove_constant_reward_groups(groups)
            rows = [r for g, r in zip(groups, rows) if any(g is k for k in kept)]
            groups = kept
        ref = t["ref_logp"].tolist()
        table = {tuple(1 + b * T + i for i in range(lengths[b])): [None] + ref[b][1:lengths[b]] for b in range(B)}
        client = _ReferenceLogprobs(table) if kl_penalty_coef > 0 else None
        data, metrics, _usage = asyncio.run(train.prepare_minibatch(
            [_Builder() for _ in groups], groups, _Tokenizer(), client, kl_penalty_coef, kl_discount_factor))
        order = [b for r in rows for b in r]
        if len(data) != len(order):
            raise RuntimeError(f"expected one Datum per trajectory ({len(order)}), got {len(data)}")
        advantages = np.zeros((B, T), dtype=np.float64)
        datum_mask = np.zeros((B, T), dtype=np.float64)
        covered = np.zeros((B, T), dtype=bool)
        for b, datum in zip(order, data):
            n = lengths[b] - 1
            advantages[b, 1:n + 1] = datum.loss_fn_inputs["advantages"].to_numpy()
            datum_mask[b, 1:n + 1] = datum.loss_fn_inputs["mask"].to_numpy()
            covered[b, 1:n + 1] = True
        kept_rows = np.zeros(B, dtype=bool)
        kept_rows[order] = True
        return {"advantages": advantages, "datum_mask": datum_mask, "covered": covered, "kept": kept_rows,
                "advantages_dtype": str(data[0].loss_fn_inputs["advantages"].to_numpy().dtype) if data else "",
                "kl_policy_base": float(metrics.get("kl_policy_base", float("nan")))}

    ops = {
        "compute_advantages": compute_advantages,
        "remove_constant_reward_groups": remove_constant_reward_groups,
        "prepare_minibatch": prepare_minibatch,
    }
    info = {"stubs": [], "stand_ins": ["the reference model's SamplingClient.sample (incorporate_kl_penalty's scoring call)",
                                       "the tokenizer's decode (print_group's logging)"],
            "data_processing": data_processing.__file__}
    return {"version": _version(), "ops": ops, "info": info}


def _version() -> str:
    from importlib.metadata import version

    return version("tinker-cookbook")
