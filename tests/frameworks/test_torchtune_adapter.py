"""The torchtune adapter (conformance/frameworks/torchtune/adapter.py, via the subprocess worker) and the
torchtune rows (conformance/frameworks/torchtune/checks.py).

torchtune runs in its own environment: these tests need `rlspec frameworks install torchtune` (marked
`frameworks`, skipped with a reason otherwise). The "not installed" tests need no torchtune and always run.
Pins every row's status as established against torchtune 0.6.1 (torch 2.13.0 CPU, torchao 0.15.0) and the
findings, each with a minimal reproduction whose expected numbers are worked by hand in its docstring.
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from conformance.runner.loading import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

pytestmark = pytest.mark.frameworks

FRAMEWORK = "torchtune"
SKIP_REASON = pinned_rows.skip_reason("torchtune", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["torchtune"] == "conformance.frameworks.torchtune.adapter:TorchtuneAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',  # logits_to_logprobs
    'rlhf_token_rewards': 'pass',  # get_rewards_ppo with the score on the last valid token; 'partial': k1 only
    'gae': 'pass',  # estimate_advantages' returns (each row's valid positions left-justified)
    # whiten with the keyword mapped (torchtune's shift_mean is the spec's negation): FAIL on the golden vector
    # whiten/single-valid-position-keep-mean, NaN for one valid token (test_finding_whiten_nan_for_one_valid_token)
    'whiten': 'fail',
    'kl_penalty': 'pass',  # get_rewards_ppo's kl; 'partial': k1 only
    # PPOLoss's per-token matrix: FAIL on ppo_token_loss/overflowing-ratio-zero-advantage (-0 * inf = NaN);
    # 'partial': one symmetric epsilon, no dual clip
    'ppo_token_loss': 'fail',
    'value_token_loss': 'pass',  # PPOLoss's value matrix x 0.5 (clip=None as value_clip_range=inf)
    'aggregate': 'pass',  # masked_mean = token_mean; 'partial': no other mode, no global counts
    'ppo_clipped_mask': 'pass',  # PPOLoss's clipfrac indicator; 'partial': no dual clip, no log-ratio clamp
    'token_entropy': 'not_implemented',
    'gspo_token_loss': 'not_implemented',
    'grpo_advantages': 'not_implemented',  # GRPO lives in torchtune/dev, which the wheel does not ship
}

EXTRA = {  # row id -> (status, matched preset)
    # PPOLoss's defaults: epsilon 0.1 and value_clip_range 0.2 are the torchtune preset
    'torchtune.PPOLoss[epsilon=0.1,value_clip_range=0.2,value_coeff=0.1]': ('preset', 'torchtune'),
    'torchtune.PPOLoss[epsilon=0.2,value_clip_range=0.2,value_coeff=0.1]': ('pass', None),
    'torchtune.PPOLoss[epsilon=0.2,value_clip_range=0.2,value_coeff=0.1,A=[B,T]]': ('pass', None),
    # whitened advantages with the mean added back (whiten's default shift_mean=True, rlhf/rewards.py:159-160)
    'torchtune.estimate_advantages[gamma=1,lmbda=0.95]': ('preset', 'torchtune'),
    'torchtune.estimate_advantages[gamma=0.9,lmbda=0.8]': ('preset', 'torchtune'),
    'torchtune.whiten[shift_mean=True]': ('preset', 'torchtune'),
    # ppo_step: each micro-batch's own token mean / gradient_accumulation_steps (bug-catalogue #1; a convention)
    'torchtune.ppo_step[gradient_accumulation_steps=2]': ('variant', None),
    # the PPO recipe on tiny random-weight models: the score one position after the last valid token,
    # GAE bootstrapping from the value there (the older TRL PPOTrainer's convention), torchtune's whitening,
    # the value loss over that position too
    'torchtune.recipe.rewards': ('variant', None),
    'torchtune.recipe.estimate_advantages': ('preset', 'torchtune'),
    'torchtune.recipe.ppo_step': ('variant', None),
}


# the `adapter` and `extra` fixtures are in conftest.py


def test_adapter_attributes(adapter):
    assert adapter.name == "torchtune" and adapter.version == "0.6.1"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float64", "float32")
    info = adapter._worker.hello["info"]
    assert info["torchao"] == "0.15.0" and info["torchtune_dev_installed"] is False


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


def test_gae_is_estimate_advantages_returns_minus_values(adapter):
    """r = [., 0, ., 1] on mask [0, 1, 0, 1] (a masked tool token), V = [., 0.5, 9, 0.5], gamma 1, lambda 0.5: the
    valid positions are sent left-justified as a trajectory holds them, so the tool token is skipped:
    A_3 = 1 - 0.5 = 0.5, A_1 = (0 + 0.5 - 0.5) + 0.5 * 0.5 = 0.25 (the spec's skip)."""
    m = np.array([[False, True, False, True]])
    r = np.array([[0.0, 0.0, 0.0, 1.0]])
    v = np.array([[0.0, 0.5, 9.0, 0.5]])
    adv, ret = adapter.gae(r, v, m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(adv, [[0.0, 0.25, 0.0, 0.5]], atol=1e-12)
    np.testing.assert_allclose(ret, [[0.0, 0.75, 0.0, 1.0]], atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Findings (torchtune 0.6.1), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


def test_finding_whiten_shift_mean_is_inverted(adapter):
    """rlhf/rewards.py:159-160 `if shift_mean: whitened += mean`: torchtune's default shift_mean=True adds the
    mean back, the reverse of TRL's masked_whiten it cites as its source. x = [., 1, 2, 3]: mean 2, unbiased
    var 1, so whiten(x) returns x itself; the spec's (and TRL's, verl's) default gives [-1, 0, 1]."""
    x = np.array([[0.0, 1.0, 2.0, 3.0]])
    m = np.array([[False, True, True, True]])
    np.testing.assert_allclose(adapter.torchtune_whiten(x, m, shift_mean=True), [[0.0, 1.0, 2.0, 3.0]], atol=1e-7)
    np.testing.assert_allclose(adapter.torchtune_whiten(x, m, shift_mean=False), [[0.0, -1.0, 0.0, 1.0]], atol=1e-7)
    np.testing.assert_allclose(oracle.whiten(x, m), [[0.0, -1.0, 0.0, 1.0]], atol=1e-7)


def test_finding_estimate_advantages_keep_their_mean(adapter):
    """estimate_advantages calls whiten(advantages, mask=masks) at that default (rlhf/rewards.py:216): PPO's
    advantages are scaled but not centred. Rows of one token, r = 1, 2, 3 and V = 0 (gamma = lambda = 1):
    raw A = [1, 2, 3], mean 2, unbiased std 1, so torchtune returns [1, 2, 3] (mean 2) where the spec's
    whiten gives [-1, 0, 1] (mean 0)."""
    m = np.array([[False, True]] * 3)
    r = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    adv, _ = adapter.estimate_advantages(r, np.zeros_like(r), m, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(adv[:, 1], [1.0, 2.0, 3.0], atol=1e-7)
    np.testing.assert_allclose(oracle.whiten(oracle.gae(r, np.zeros_like(r), m)[0], m)[:, 1], [-1.0, 0.0, 1.0], atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_finding_whiten_nan_for_one_valid_token(adapter, dtype):
    """masked_var (rlhf/rewards.py:133-135): mask_sum = mask.sum() + 1e-8 is an int64 sum plus a float, a float32
    tensor whatever x's dtype, so for one valid token mask_sum = 1.0 exactly, the Bessel factor is 1 / 0 = inf
    and var = 0 * inf = NaN: whiten, and estimate_advantages of a batch with one response token, return NaN.
    The spec gives 0 (var := 0 when n - ddof <= 0; shift_mean=False gives x). Reached by the recipe with
    batch_size=1 (accepted, recipe :394-425) and a response that is its stop token alone (kept as one token,
    rlhf/sequence_processing.py:79): the batch's whitening then sees one valid token."""
    x = np.array([[0.0, 3.0, 7.0]], dtype=dtype)
    m = np.array([[False, True, False]])
    assert np.isnan(adapter.torchtune_whiten(x, m, shift_mean=False)[0, 1])
    assert np.isnan(adapter.torchtune_whiten(x, m, shift_mean=True)[0, 1])
    assert oracle.whiten(x.astype(np.float64), m)[0, 1] == 0.0
    out = adapter.call("estimate_advantages", {"values": np.zeros((1, 2), dtype=dtype), "rewards": np.array([[1.0, 0.0]], dtype=dtype),
                                               "masks": np.array([[True, False]])}, {"gamma": 1.0, "lmbda": 0.95})["outputs"]
    assert np.isnan(out["advantages"][0, 0]) and out["returns"][0, 0] == 1.0


def test_finding_ppo_nan_for_overflowing_ratio_with_zero_advantage(adapter):
    """PPOLoss takes ratios = exp(pi_logprobs - pi_old_logprobs) unclamped (rlhf/loss/ppo.py:79) and multiplies
    by -advantages (:82-83): a log-ratio of 100 in float32 gives ratio inf, and A = 0 gives -0 * inf = NaN at
    a valid token; the spec's loss there is 0 (golden vector ppo_token_loss/overflowing-ratio-zero-advantage)."""
    lp = np.array([[0.0, 0.0, -1.0]], dtype=np.float32)
    old = np.array([[0.0, -100.0, -1.0]], dtype=np.float32)
    m = np.array([[False, True, True]])
    got = adapter.ppo_token_loss(lp, old, np.array([0.0], dtype=np.float32), m)
    assert np.isnan(got[0, 1]) and got[0, 2] == 0.0
    assert oracle.ppo_token_loss(lp.astype(np.float64), old.astype(np.float64), np.array([0.0]), m)[0, 1] == 0.0


def test_finding_gradient_accumulation_uses_local_token_counts(adapter):
    """ppo_step: loss = PPOLoss(...) / gradient_accumulation_steps (recipes/ppo_full_finetune_single_device.py:
    1107-1118), PPOLoss a masked_mean over its micro-batch. Micro-batch 1: losses 1, 1, 1 (3 tokens); micro-batch
    2: loss 5 (1 token). torchtune: (1 + 5) / 2 = 3; the token mean of the PPO batch is (1 + 1 + 1 + 5) / 4 = 2.
    A convention (the usual per-micro-batch accumulation), not a bug."""
    x1, m1 = np.array([[0.0, 1.0, 1.0, 1.0]]), np.array([[False, True, True, True]])
    x2, m2 = np.array([[0.0, 5.0, 0.0, 0.0]]), np.array([[False, True, False, False]])
    losses = adapter.micro_batched_loss([x1, x2], [m1, m2], mode="token_mean")
    assert float(sum(losses)) == pytest.approx(3.0)
    assert oracle.aggregate(np.vstack([x1, x2]), np.vstack([m1, m2]), mode="token_mean") == pytest.approx(2.0)
    with pytest.raises(NotImplementedError):  # the recipe is single-device
        adapter.micro_batched_loss([x1, x2], [m1, m2], mode="token_mean", dp_world_size=2)


def _penalised(adapter, responses, **kw):
    params = {"stop_token_ids": [2], "penalise_no_eos": True, "min_response_length": None, **kw}
    return adapter.call("reward_penalty_mask", {"responses": np.array(responses)}, params)["outputs"]


def test_min_response_length_counts_the_tokens_before_the_stop_token(adapter):
    """Not a finding (the claim "min_response_length is off by one" is withdrawn, findings.toml): the recipe passes
    seq_lens = training.get_unmasked_sequence_lengths(...) (recipe :835), the 0-indexed position of the last valid
    token (training/pooling.py:9-42), to get_reward_penalty_mask, which penalises seq_lens < min_response_length
    (rlhf/rewards.py:44-45). For a response that ends with its stop token that is the number of tokens before the
    stop token, the length the recipe logs as response_lengths (:1159). min_response_length 2: [7, EOS] (one token
    before the stop) is penalised, [7, 8, EOS] (two) is not."""
    out = _penalised(adapter, [[7, 2, 0, 0], [7, 8, 2, 0]], min_response_length=2, penalise_no_eos=False)
    assert out["seq_lens"].tolist() == [1, 2]
    assert out["penalised"].tolist() == [True, False]


def test_finding_eos_in_the_last_position_counts_as_no_eos(adapter):
    """get_reward_penalty_mask decides "no EOS" as "no padding" (`~padding_masks.any(-1)`, rlhf/rewards.py:40-42):
    a response that stops with its stop token exactly at max_generated_tokens has no padding after it, so
    penalise_no_eos penalises it like a truncated one. [7, 8, 9, EOS] is penalised, [7, 8, EOS, pad] is not."""
    out = _penalised(adapter, [[7, 8, 9, 2], [7, 8, 2, 0]])
    assert out["response_padding_masks"].sum(axis=1).tolist() == [0, 1]
    assert out["penalised"].tolist() == [True, False]


@pytest.fixture(scope="module")
def recipe(adapter):
    from conformance.frameworks.torchtune.checks import recipe_batch

    return recipe_batch(adapter)


def test_finding_recipe_puts_the_score_after_the_last_token(adapter, recipe):
    """generate_trajectory (recipe :856-865): value_seq_idxs = seq_lens + 1 where 0 < seq_lens < max_generated_tokens
    - 1, else seq_lens; train passes it to get_rewards_ppo as valid_score_idxs (:945-951) and keeps the value there
    (value_padding_masks). So the score lands on the padding slot after the stop token for most rows, on the last
    valid token for one-token rows and rows reaching the last slot (the spec: always the last valid token). A
    convention: the older TRL PPOTrainer's sequence_lengths_p1 layout."""
    from conformance.frameworks.torchtune.checks import RECIPE

    seq, idx = recipe["seq_lens"], recipe["value_seq_idxs"]
    after = (seq > 0) & (seq < RECIPE["max_generated_tokens"] - 1)
    np.testing.assert_array_equal(idx, np.where(after, seq + 1, seq))
    assert after.any() and (~after).any()  # the batch has rows of both kinds
    rows = np.arange(seq.shape[0])
    resp_mask = recipe["mask"][:, 1:]
    assert not resp_mask[rows[after], idx[after]].any()  # a padding position ...
    np.testing.assert_allclose(recipe["rewards"][rows[after], 1 + idx[after]], recipe["scores"][after], atol=1e-6)  # ... holding the score
    on_token = recipe["rewards"][rows, 1 + idx] + RECIPE["kl_coeff"] * recipe["kl"][rows, 1 + idx]  # score - beta * kl elsewhere
    np.testing.assert_allclose(on_token, recipe["scores"], atol=1e-6)
    assert recipe["mask_ext"][rows[after], 1 + idx[after]].all()  # and in the value mask


def test_finding_grpo_recipe_cannot_import(adapter):
    """The wheel ships recipes/dev/grpo_full_finetune_distributed.py, which imports torchtune.dev.grpo (:23-25),
    but not torchtune/dev (README.md: likely its missing torchtune/dev/__init__.py): GRPOLoss, GRPOSimpleLoss
    and GRPOCompletionLoss cannot be imported from torchtune 0.6.1."""
    with pytest.raises(ModuleNotFoundError, match="torchtune.dev"):
        adapter.call("load_recipe", {}, {"relative": "dev/grpo_full_finetune_distributed.py"})
    names = adapter.call("load_recipe", {}, {"relative": "ppo_full_finetune_single_device.py"})["outputs"]["names"]
    assert "PPOFullFinetuneRecipeSingleDevice" in names


def test_not_expressible_settings(adapter):
    """One symmetric epsilon, no dual clip, k1 only, unbiased variance with eps 1e-8, token mean only."""
    lp = np.zeros((1, 3))
    m = np.array([[False, True, True]])
    with pytest.raises(NotImplementedError):
        adapter.ppo_token_loss(lp, lp, np.ones(1), m, eps_low=0.2, eps_high=0.28)
    with pytest.raises(NotImplementedError):
        adapter.ppo_token_loss(lp, lp, np.ones(1), m, dual_clip=3.0)
    with pytest.raises(NotImplementedError):
        adapter.kl_penalty(lp, lp, m, estimator="k3")
    with pytest.raises(NotImplementedError):
        adapter.whiten(lp, m, std_ddof=0)
    with pytest.raises(NotImplementedError):
        adapter.aggregate(lp, m, mode="seq_mean_token_mean")
    assert adapter.token_entropy is None and adapter.gspo_token_loss is None
