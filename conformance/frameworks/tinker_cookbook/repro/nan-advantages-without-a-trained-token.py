"""A batch without a trained token gets NaN advantages (tinker-cookbook 0.6.1, finding
nan-advantages-without-a-trained-token).

`incorporate_kl_penalty` divides the summed log-prob differences by the number of trained tokens of the batch
(tinker_cookbook/rl/metrics.py:214-216) with no guard: with none it is 0/0 = NaN, and
`kl_penalty_coef * mask * (NaN - delta)` (:218) is NaN at every position of every datum, also where the advantage was
0; `kl_policy_base` is NaN. A batch has no trained token when every turn is a masked parse-error turn: with a
ParseErrorPolicy(mask_error_turns=True) (rl/rollout_limits.py:148-157) a structural parse failure ends the episode
with the turn flagged `parse_error_masked` (rl/message_env.py:208-209, :270-274), and trajectory_to_data gives its tokens
mask 0 (rl/data_processing.py:242-258). The trainer sends these advantages without the mask (rl/train.py:274-278).
Below: a group of two trajectories whose only turn failed to parse (terminal_reward 0), kl_penalty_coef 0.1.

Run: pip install tinker-cookbook==0.6.1 tinker==0.38.0 torch; python nan-advantages-without-a-trained-token.py

Expected (spec aggregate token_mean of no token is 0, so the KL term is 0 and the advantages stay 0, by hand):
advantages [0, 0, 0] for each datum, kl_policy_base 0.

Actual:
    datum masks: [0.0, 0.0, 0.0] [0.0, 0.0, 0.0]
    datum advantages: [nan, nan, nan] [nan, nan, nan]
    kl_policy_base: nan
"""

import asyncio
import logging
import types
import warnings

warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)

import tinker  # noqa: E402
from tinker_cookbook.completers import TokensWithLogprobs  # noqa: E402
from tinker_cookbook.rl import data_processing, metrics, train  # noqa: E402
from tinker_cookbook.rl.types import PARSE_ERROR_MASKED_METRIC_KEY, Trajectory, TrajectoryGroup, Transition  # noqa: E402


class ReferenceModel:
    """Stand-in for the reference model's tinker.SamplingClient (a service call): incorporate_kl_penalty scores each
    sequence with sample(..., include_prompt_logprobs=True) (rl/metrics.py:27-62); this answers with the given
    prompt log-probs, None at the first position as the service does."""

    def __init__(self, table):
        self.table = table

    def sample(self, prompt, num_samples, sampling_params, include_prompt_logprobs):
        response = types.SimpleNamespace(prompt_logprobs=self.table[tuple(prompt.to_ints())], prompt_cache_hit_tokens=0,
                                         sequences=[types.SimpleNamespace(tokens=[0] * sampling_params.max_tokens)])

        async def coroutine():
            return response

        return types.SimpleNamespace(coroutine=coroutine)


def turn(ob, ac, logprobs, reward=0.0, masked=False):
    """One transition as an env step returns it: the observation so far, the sampled action with its log-probs."""
    return Transition(ob=tinker.ModelInput.from_ints(ob), ac=TokensWithLogprobs(tokens=ac, maybe_logprobs=logprobs),
                      reward=reward, episode_done=True, metrics={PARSE_ERROR_MASKED_METRIC_KEY: 1.0} if masked else {})


def datums(groups, reference, kl_penalty_coef, kl_discount_factor):
    """What prepare_minibatch does (rl/train.py:1836-1850): compute_advantages, assemble_training_data, then
    incorporate_kl_penalty."""
    data, _ = data_processing.assemble_training_data(groups, data_processing.compute_advantages(groups))
    kl_metrics, _ = asyncio.run(metrics.incorporate_kl_penalty(data, ReferenceModel(reference), kl_penalty_coef,
                                                                kl_discount_factor))
    return data, kl_metrics


def fmt(xs):
    return [round(float(x), 4) for x in xs]


trajectories = [Trajectory(transitions=[turn([1, 2], [3, 4], [-1.0, -1.0], masked=True)],
                           final_ob=tinker.ModelInput.empty()),
                Trajectory(transitions=[turn([1, 2], [5, 6], [-0.5, -2.0], masked=True)],
                           final_ob=tinker.ModelInput.empty())]
group = TrajectoryGroup(trajectories_G=trajectories, final_rewards_G=[0.0, 0.0], metrics_G=[{}, {}])
reference = {(1, 2, 3, 4): [None, -2.0, -1.5, -0.5], (1, 2, 5, 6): [None, -2.0, -1.0, -1.0]}
data, kl_metrics = datums([group], reference, kl_penalty_coef=0.1, kl_discount_factor=0.0)
print("datum masks:", *[fmt(d.loss_fn_inputs["mask"].to_numpy()) for d in data])
print("datum advantages:", *[fmt(d.loss_fn_inputs["advantages"].to_numpy()) for d in data])
print("kl_policy_base:", round(kl_metrics["kl_policy_base"], 4))
