"""The tinker-cookbook adapter (conformance/frameworks/tinker_cookbook/adapter.py, via the subprocess worker) and the
tinker-cookbook rows (conformance/frameworks/tinker_cookbook/checks.py).

tinker-cookbook runs in its own environment: these tests need `rlspec frameworks install tinker_cookbook` (marked
`frameworks`, skipped with a reason otherwise). The "not installed" tests need no tinker-cookbook and always run.
Only what the cookbook computes locally is checked (the losses run on the Tinker service and cannot be called).
Pins every row's status as established against tinker-cookbook 0.6.1 (tinker 0.38.0, torch 2.13.0 CPU) and the
findings, each with a minimal reproduction whose expected values are worked by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from conformance.runner.loading import BUILTIN_ADAPTERS
from conformance.runner.parts import golden_cases
from conformance.records import BY_FUNCTION
from conformance.runner.verdict import check_row
from conformance.runner.rows import seeds_for
from tests.frameworks import pinned_rows

FRAMEWORK = "tinker_cookbook"
SKIP_REASON = pinned_rows.skip_reason("tinker-cookbook", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["tinker_cookbook"] == "conformance.frameworks.tinker_cookbook.adapter:TinkerCookbookAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    # compute_advantages: r - group mean, canonical for scale='none'; 'partial' (scale 'group'/'batch' have no
    # setting) and a float64 precision finding (the rewards become a float32 tensor, data_processing.py:38)
    "grpo_advantages": "pass",
}

EXTRA = {  # row id -> (status, matched preset)
    "tinker_cookbook.remove_constant_reward_groups[G=3]": ("pass", None),
    "tinker_cookbook.remove_constant_reward_groups[every group constant]": ("pass", None),
    "tinker_cookbook.prepare_minibatch[kl_penalty_coef=0.0]": ("pass", None),
    # the KL in the advantage: A + c·(token mean of k1 − k1), exactly the composition
    "tinker_cookbook.prepare_minibatch[kl_penalty_coef=0.1,kl_discount_factor=0.0]": ("pass", None),
    # discounted: the trained tokens are the composition (reinforce_pp_advantages(gap='discount') returns); the
    # mask-0 positions before them are not 0 (finding)
    "tinker_cookbook.prepare_minibatch[kl_penalty_coef=0.1,kl_discount_factor=0.9]": ("fail", None),
    # the filter first (train.py:2383-2384): the KL mean is over the kept groups' tokens
    "tinker_cookbook.prepare_minibatch[remove_constant_reward_groups=True,kl_penalty_coef=0.1,kl_discount_factor=0.0]": ("pass", None),
    # no trained token in the batch: every advantage NaN (finding)
    "tinker_cookbook.prepare_minibatch[kl_penalty_coef=0.1,no trained token]": ("fail", None),
    "tinker_cookbook.forward_backward[loss_fn=*]": ("not_implemented", None),
}


# the `adapter` and `extra` fixtures are in conftest.py

test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "tinker_cookbook" and adapter.version == "0.6.1"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float64", "float32") and not adapter.supports_grad
    # computed by the Tinker service: nothing local to call
    for fn in ("token_logprobs", "token_entropy", "kl_penalty", "ppo_token_loss", "gspo_token_loss", "value_token_loss",
               "micro_batched_loss", "kl_controller_update"):
        assert getattr(adapter, fn) is None, fn
    assert adapter._worker.hello["info"]["stubs"] == []


@pytest.mark.frameworks
def test_service_functions_are_not_implemented_rows(adapter):
    record = BY_FUNCTION["ppo_token_loss"]
    row = check_row(record, adapter, seeds=seeds_for("ppo_token_loss", 0, 2), golden=golden_cases(record))
    assert row.status == "not_implemented"


@pytest.mark.frameworks
def test_group_centred_advantages(adapter):
    """compute_advantages (data_processing.py:38-40): r - group mean; no std, so scale='group' is not implemented."""
    r = np.array([1.0, 0.0, 0.0, 1.0, 3.0, 0.0, 1.0, 2.0])
    np.testing.assert_array_equal(adapter.grpo_advantages(r, 4, scale="none"), [0.5, -0.5, -0.5, 0.5, 1.5, -1.5, -0.5, 0.5])
    np.testing.assert_array_equal(adapter.grpo_advantages(r[:3], 1, scale="none"), [0.0, 0.0, 0.0])  # singleton 'zero'
    with pytest.raises(NotImplementedError, match="scale='none'"):
        adapter.grpo_advantages(r, 4)
    with pytest.raises(ValueError, match="grpo_advantages: rewards"):
        adapter.grpo_advantages(np.array([1.0, np.nan]), 2, scale="none")


@pytest.mark.frameworks
def test_kl_in_advantage_worked_by_hand(adapter):
    """incorporate_kl_penalty (rl/metrics.py:208-223), kl_discount_factor 0: rewards [1, 0] in one group give
    A = [0.5, -0.5]; row 0's trained tokens have k1 = logp - ref = [0.5, -0.5], row 1's [0.75]; the token mean
    is 0.75 / 3 = 0.25; with c = 0.5 the term c·(0.25 - k1) is [-0.125, 0.375] and [-0.25]:
    advantages [0.375, 0.875] and [-0.75], 0 on the prompt."""
    batch = {"mask": np.array([[False, False, True, True], [False, True, False, False]]),
             "logp": np.array([[0.0, 0.0, -1.0, -1.0], [0.0, -2.0, 0.0, 0.0]]),
             "ref_logp": np.array([[0.0, -3.0, -1.5, -0.5], [0.0, -2.75, 0.0, 0.0]]),
             "step_rewards": np.zeros(2), "final_rewards": np.array([1.0, 0.0])}
    batch["action"] = batch["mask"]
    out = adapter.prepare_minibatch(batch, 2, kl_penalty_coef=0.5)
    np.testing.assert_array_equal(out["advantages"], [[0.0, 0.0, 0.375, 0.875], [0.0, -0.75, 0.0, 0.0]])
    assert out["kl_policy_base"] == 0.25
    np.testing.assert_array_equal(out["covered"], [[False, True, True, True], [False, True, False, False]])


# ---------------------------------------------------------------------------------------------
# Findings (tinker-cookbook 0.6.1), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_discounted_kl_penalty_lands_on_prompt_tokens(adapter):
    """kl_discount_factor > 0: discounted_future_sum_vectorized runs over every datum position (rl/metrics.py:219-220,
    :242-246), so a prompt token before the completion gets the discounted KL term of the tokens after it.
    One row, prompt tokens 0-1, completion tokens 2-3 with k1 = [0.5, -0.5] (mean 0), c = 0.5, gamma = 0.5: x =
    [-0.25, 0.25]; returns 0.25 at token 3, -0.25 + 0.5·0.25 = -0.125 at token 2 (the spec's composition), and
    0.5·(-0.125) = -0.0625 at prompt token 1, where the spec has 0. The cookbook sends the datum without its mask
    (rl/train.py:274-278) to the importance_sampling loss, -sum_t (p/q)_t A_t over every target, so that prompt
    token is trained (only loss_fn='stable_reinforce' refuses the setting, rl/train.py:2496-2507)."""
    m = np.array([[False, False, True, True]])
    batch = {"mask": m, "action": m, "logp": np.array([[0.0, 0.0, -1.0, -1.0]]),
             "ref_logp": np.array([[0.0, -2.0, -1.5, -0.5]]), "step_rewards": np.zeros(1), "final_rewards": np.ones(1)}
    out = adapter.prepare_minibatch(batch, 1, kl_penalty_coef=0.5, kl_discount_factor=0.5)
    np.testing.assert_array_equal(out["advantages"], [[0.0, -0.0625, -0.125, 0.25]])
    assert out["covered"][0, 1] and out["datum_mask"][0, 1] == 0.0
    x = np.array([[0.0, 0.0, -0.25, 0.25]])
    np.testing.assert_array_equal(oracle.reinforce_pp_advantages(x, m, gamma=0.5, gap="discount")[1], [[0.0, 0.0, -0.125, 0.25]])


@pytest.mark.frameworks
def test_finding_batch_without_trained_token_gets_nan_advantages(adapter):
    """Every turn a masked parse-error turn (data_processing.py:245-247: mask 0, advantage 0): the mean of the
    log-ratios is 0/0 (rl/metrics.py:214-216) and c·mask·(NaN − Δ) is NaN (:218): every advantage of every datum
    becomes NaN, also where it was 0. The spec's token mean of no token is 0 and the advantages stay 0."""
    m = np.array([[False, False, False, False]])
    batch = {"mask": m, "action": np.array([[False, False, True, True]]), "logp": np.array([[0.0, 0.0, -1.0, -1.0]]),
             "ref_logp": np.array([[0.0, -2.0, -1.5, -0.5]]), "step_rewards": np.zeros(1), "final_rewards": np.ones(1)}
    out = adapter.prepare_minibatch(batch, 1, kl_penalty_coef=0.1)
    assert np.isnan(out["advantages"][0, 1:]).all() and np.isnan(out["kl_policy_base"])
    assert oracle.aggregate(np.zeros((1, 4)), m, mode="token_mean") == 0.0
    without_kl = adapter.prepare_minibatch(batch, 1)
    np.testing.assert_array_equal(without_kl["advantages"], np.zeros((1, 4)))


@pytest.mark.frameworks
def test_finding_all_equal_group_keeps_a_float32_residue(adapter):
    """torch.tensor(rewards) is float32 and its mean a float32 sum / G (data_processing.py:38-40): six rewards of
    0.3 (float32 0.30000001192...) sum to 1.8000001907... (rounded), / 6 = 0.29999998...; every member keeps
    +2^-25 = 2.98e-08 where the spec's all-equal group is exactly 0 (inside the float32 tolerance: harmless, but
    not 0; remove_constant_reward_groups, off by default, would drop the group)."""
    got = adapter.grpo_advantages(np.full(6, 0.3), 6, scale="none")
    np.testing.assert_array_equal(got, np.full(6, 2.0 ** -25))
    np.testing.assert_array_equal(oracle.grpo_advantages(np.full(6, 0.3), 6, scale="none"), np.zeros(6))
    assert adapter.constant_group_filter(np.full(6, 0.3), 6).tolist() == [0]  # the only group: kept by the fallback


@pytest.mark.frameworks
def test_rewards_become_float32(adapter):
    """float64 rewards get float32 advantages (the precision finding of the core row): [0.1, 0.2] centre to
    ±0.05 of the float32 values, not of the float64 ones."""
    got = adapter.grpo_advantages(np.array([0.1, 0.2]), 2, scale="none")
    r32 = np.array([0.1, 0.2], dtype=np.float32)
    np.testing.assert_array_equal(got, (r32 - r32.mean()).astype(np.float64))
    spec = oracle.grpo_advantages(np.array([0.1, 0.2]), 2, scale="none")
    assert not np.array_equal(got, spec) and np.allclose(got, spec, rtol=2e-6, atol=1e-5)


@pytest.mark.frameworks
def test_constant_group_filter(adapter):
    """remove_constant_reward_groups (data_processing.py:324-332): groups with two distinct rewards survive; if none
    does, the first group alone (a training step without any signal, unless the KL penalty adds some)."""
    assert adapter.constant_group_filter(np.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5]), 2).tolist() == [1]
    assert adapter.constant_group_filter(np.array([0.0, 0.0, 1.0, 1.0]), 2).tolist() == [0]
