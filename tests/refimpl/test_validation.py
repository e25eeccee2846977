"""refimpl input checks: the error rules of api.md ("Errors"), with ``<function>: <argument>:`` messages."""

from __future__ import annotations

import pytest
import torch

import refimpl

B, T, V, D = 2, 5, 7, 3
MASK = torch.tensor([[0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.bool)


def tok(value: float = 0.5) -> torch.Tensor:
    return torch.full((B, T), -value)


def with_nan_at_valid(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[0, 2] = float("nan")
    return x


LOGITS = torch.randn(B, T, V)
IDS = torch.randint(0, V, (B, T))
HIDDEN, WEIGHT = torch.randn(B, T, D), torch.randn(V, D)
REWARDS = torch.tensor([1.0, 0.0, 2.0, 1.0])

# (exception, message start, call)
CASES = [
    # dtypes and Python types
    (TypeError, "token_logprobs: logits:", lambda: refimpl.token_logprobs(LOGITS.long(), IDS, MASK)),
    (TypeError, "token_logprobs: input_ids:", lambda: refimpl.token_logprobs(LOGITS, IDS.float(), MASK)),
    (TypeError, "pg_token_loss: logp:", lambda: refimpl.pg_token_loss(MASK, tok(), MASK)),
    (TypeError, "kl_penalty: logp:", lambda: refimpl.kl_penalty([[0.0] * T] * B, tok(), MASK)),
    (TypeError, "token_logprobs_from_hidden: weight:",
     lambda: refimpl.token_logprobs_from_hidden(HIDDEN, WEIGHT.double(), IDS, MASK)),
    (TypeError, "grpo_advantages: group_size:", lambda: refimpl.grpo_advantages(REWARDS, 2.0)),
    (TypeError, "ppo_token_loss: eps_low:", lambda: refimpl.ppo_token_loss(tok(), tok(), tok(), MASK, eps_low="0.2")),
    # ranks and shapes
    (ValueError, "grpo_advantages: rewards: expected 1-D [B], got shape (2, 2)",
     lambda: refimpl.grpo_advantages(REWARDS.view(2, 2), 2)),
    (ValueError, "token_logprobs: logits:", lambda: refimpl.token_logprobs(LOGITS[:, :4], IDS, MASK)),
    (ValueError, "pg_token_loss: advantages:", lambda: refimpl.pg_token_loss(tok(), torch.zeros(3), MASK)),
    (ValueError, "gae: values:", lambda: refimpl.gae(tok(), tok()[:, :3], MASK)),
    (ValueError, "token_entropy_from_hidden: weight:",
     lambda: refimpl.token_entropy_from_hidden(HIDDEN, WEIGHT[:, :2], MASK)),
    # masks
    (ValueError, "whiten: mask: expected a binary mask", lambda: refimpl.whiten(tok(), MASK.float() * 0.5)),
    (ValueError, "whiten: mask: expected mask[:, 0] False", lambda: refimpl.whiten(tok(), MASK | True)),
    # values
    (ValueError, "kl_penalty: logp: expected finite values at valid", lambda: refimpl.kl_penalty(with_nan_at_valid(tok()), tok(), MASK)),
    (ValueError, "gae: token_rewards: expected finite", lambda: refimpl.gae(with_nan_at_valid(tok()), tok(), MASK)),
    (ValueError, "aggregate: token_loss: expected finite", lambda: refimpl.aggregate(with_nan_at_valid(tok()), MASK, mode="token_sum")),
    (ValueError, "token_logprobs: logits: expected finite",
     lambda: refimpl.token_logprobs(LOGITS.index_put((torch.tensor(0), torch.tensor(1), torch.tensor(3)), torch.tensor(float("-inf"))), IDS, MASK)),
    (ValueError, "token_entropy_from_hidden: hidden: expected finite",
     lambda: refimpl.token_entropy_from_hidden(HIDDEN.index_put((torch.tensor(1), torch.tensor(2)), torch.tensor(float("inf"))), WEIGHT, MASK)),
    (ValueError, "rloo_advantages: rewards: expected finite", lambda: refimpl.rloo_advantages(torch.tensor([1.0, float("inf")]), 2)),
    (ValueError, "pg_token_loss: advantages: expected finite", lambda: refimpl.pg_token_loss(tok(), torch.tensor([0.0, float("nan")]), MASK)),
    (ValueError, "token_logprobs: input_ids: expected token ids in [0, V=7)",
     lambda: refimpl.token_logprobs(LOGITS, IDS.index_put((torch.tensor(1), torch.tensor(3)), torch.tensor(V)), MASK)),
    (ValueError, "token_logprobs: temperature:", lambda: refimpl.token_logprobs(LOGITS, IDS, MASK, temperature=0.0)),
    (ValueError, "grpo_advantages: group_size: expected a divisor", lambda: refimpl.grpo_advantages(REWARDS, 3)),
    (ValueError, "rloo_advantages: group_size: expected an int >= 1", lambda: refimpl.rloo_advantages(REWARDS, 0)),
    (ValueError, "grpo_advantages: eps:", lambda: refimpl.grpo_advantages(REWARDS, 2, eps=-1e-6)),
    (ValueError, "whiten: eps:", lambda: refimpl.whiten(tok(), MASK, eps=-1.0)),
    (ValueError, "gae: gamma:", lambda: refimpl.gae(tok(), tok(), MASK, gamma=1.5)),
    # names
    (ValueError, "kl_penalty: estimator:", lambda: refimpl.kl_penalty(tok(), tok(), MASK, estimator="k4")),
    (ValueError, "aggregate: mode:", lambda: refimpl.aggregate(tok(), MASK, mode="mean")),
    (ValueError, "gspo_token_loss: form:", lambda: refimpl.gspo_token_loss(tok(), tok(), tok(), MASK, form="seq")),
    (ValueError, "reinforce_advantages: baseline:", lambda: refimpl.reinforce_advantages(REWARDS, baseline="mean")),
    # clip parameters
    (ValueError, "ppo_token_loss: eps_high:", lambda: refimpl.ppo_token_loss(tok(), tok(), tok(), MASK, eps_high=-0.1)),
    (ValueError, "ppo_token_loss: dual_clip:", lambda: refimpl.ppo_token_loss(tok(), tok(), tok(), MASK, dual_clip=1.0)),
    (ValueError, "value_token_loss: clip:", lambda: refimpl.value_token_loss(tok(), tok(), tok(), MASK, clip=0.0)),
    (ValueError, "cispo_token_loss: eps_high: expected an upper bound",
     lambda: refimpl.cispo_token_loss(tok(), tok(), tok(), MASK, eps_low=0.2, eps_high=0.5, bound="absolute")),
    (ValueError, "aggregate: norm_length:", lambda: refimpl.aggregate(tok(), MASK, mode="seq_mean_token_sum_norm")),
]


@pytest.mark.parametrize("error,message,call", CASES, ids=[c[1] for c in CASES])
def test_error_rules(error, message, call):
    with pytest.raises(error) as info:
        call()
    assert str(info.value).startswith(message)
    assert " expected " in str(info.value) and " got " in str(info.value)


def test_integer_and_float_masks_are_accepted():
    x = torch.arange(B * T, dtype=torch.float32).view(B, T)
    ref = refimpl.whiten(x, MASK)
    for m in (MASK.long(), MASK.float(), MASK.to(torch.uint8)):
        assert torch.equal(refimpl.whiten(x, m), ref)
