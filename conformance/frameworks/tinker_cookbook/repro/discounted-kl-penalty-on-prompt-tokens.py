"""The discounted KL penalty lands on prompt and observation tokens (tinker-cookbook 0.6.1, finding
discounted-kl-penalty-on-prompt-tokens).

`incorporate_kl_penalty` computes `kl_penalty_coef * mask * (mean - delta)` per datum position, zero off the trained
tokens, and with `kl_discount_factor > 0` replaces it by its discounted future sum over every position of the datum
(tinker_cookbook/rl/metrics.py:217-223, `discounted_future_sum_vectorized` :228-247). So each mask-0 position before a
trained token (the prompt, observation tokens between turns, a masked parse-error turn) gets a nonzero advantage.
The trainer then drops the mask before `forward_backward` (`_remove_mask`, rl/train.py:274-278, :364, :372), so
the service receives those advantages at every target; the cookbook refuses the setting only for
loss_fn="stable_reinforce" because that loss "only accepts nonzero advantages on sampled tokens" (:2496-2507).
Below: one trajectory, prompt tokens [1, 2], sampled tokens [3, 4] with log-probs [-1, -1]; the reference model
gives [-1.5, -0.5] for them, so delta = [0.5, -0.5] (mean 0); kl_penalty_coef 0.5, kl_discount_factor 0.5; a group
of one (base advantage 0).

Run: pip install tinker-cookbook==0.6.1 tinker==0.38.0 torch; python discounted-kl-penalty-on-prompt-tokens.py

Expected (spec: A + reinforce_pp_advantages(x, mask, gamma, gap="discount") returns, x = c (mean - delta) on the
trained tokens, by hand): x = [-0.25, 0.25] on targets 3, 4; returns 0.25 and -0.25 + 0.5 * 0.25 = -0.125; the
prompt target (token 2) is not an action: 0. Datum advantages [0, -0.125, 0.25].

Actual:
    datum mask: [0.0, 1.0, 1.0]
    datum advantages: [-0.0625, -0.125, 0.25]
    sent to forward_backward: ['advantages', 'logprobs', 'target_tokens']
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


group = TrajectoryGroup(trajectories_G=[Trajectory(transitions=[turn([1, 2], [3, 4], [-1.0, -1.0])],
                                                   final_ob=tinker.ModelInput.from_ints([1, 2, 3, 4]))],
                        final_rewards_G=[1.0], metrics_G=[{}])
data, _ = datums([group], {(1, 2, 3, 4): [None, -2.0, -1.5, -0.5]}, kl_penalty_coef=0.5, kl_discount_factor=0.5)
print("datum mask:", fmt(data[0].loss_fn_inputs["mask"].to_numpy()))
print("datum advantages:", fmt(data[0].loss_fn_inputs["advantages"].to_numpy()))
print("sent to forward_backward:", sorted(train._remove_mask(data[0]).loss_fn_inputs))
