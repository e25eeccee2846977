"""The OpenRLHF adapter (conformance/adapters/openrlhf_adapter.py, via the subprocess worker) and the
OpenRLHF rows (conformance/frameworks/openrlhf_checks.py).

OpenRLHF runs in its own environment: these tests need `rlspec frameworks install openrlhf` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the
install). The "not installed" tests need no OpenRLHF and always run. Pins every row's status as
established against openrlhf 0.11.2 (torch 2.13.0 CPU, float32) and the findings.
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from conformance.adapters import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

FRAMEWORK = "openrlhf"
SKIP_REASON = pinned_rows.skip_reason("OpenRLHF", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["openrlhf"] == "conformance.adapters.openrlhf_adapter:OpenRLHFAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    'rlhf_token_rewards': 'pass',
    'gae': 'fail',  # masked tool tokens inside a completion are not skipped (golden gae/multi-turn-gap-*)
    'kl_penalty': 'preset',  # its own clamp=10.0 (golden vectors with |k| > 10)
    'ppo_token_loss': 'preset',  # its own log_ratio_clamp=20.0 (golden vectors with |d| > 20)
    'gspo_token_loss': 'fail',  # an overflowing ratio with A = 0 gives NaN (golden gspo/overflowing-ratio-zero-advantage)
    'value_token_loss': 'pass',
}

EXTRA = {  # row id -> (status, matched preset)
    'openrlhf.aggregate_loss[token,local]': ('pass', None),
    'openrlhf.aggregate_loss[token,trainer]': ('pass', None),
    'openrlhf.aggregate_loss[token,dp=2]': ('pass', None),
    'openrlhf.aggregate_loss[sample,local]': ('variant', None),
    'openrlhf.aggregate_loss[sample,trainer]': ('variant', None),
    'openrlhf.aggregate_loss[sample,dp=2]': ('variant', None),
    'openrlhf.PolicyLoss[ppo]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,local]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,clip_eps_high=0.28]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,dual_clip=3.0]': ('pass', None),
    'openrlhf.PolicyLoss[ppo,A=[B,T]]': ('pass', None),
    'openrlhf.PolicyLoss[gspo]': ('preset', 'openrlhf'),
    'openrlhf.PolicyLoss[gspo,A=[B,T]]': ('preset', 'openrlhf'),
    'openrlhf.ValueLoss[clip_eps=0.5]': ('preset', 'openrlhf'),
    'openrlhf.ValueLoss[clip_eps=None]': ('pass', None),
    'openrlhf.compute_approx_kl[k1]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k1,loss batch]': ('pass', None),
    'openrlhf.compute_approx_kl[k1,loss batch,unbiased_gradient]': ('variant', None),
    'openrlhf.compute_approx_kl[k2]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k2,loss batch]': ('pass', None),
    'openrlhf.compute_approx_kl[k2,loss batch,unbiased_gradient]': ('variant', None),
    'openrlhf.compute_approx_kl[k3]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k3,loss batch]': ('preset', 'openrlhf'),
    'openrlhf.compute_approx_kl[k3,loss batch,unbiased_gradient]': ('variant', None),
    'openrlhf.advantages[group_norm]': ('preset', 'openrlhf'),
    'openrlhf.advantages[dr_grpo]': ('pass', None),
    'openrlhf.advantages[rloo]': ('pass', None),
    'openrlhf.advantages[flash_reinforce]': ('pass', None),
    'openrlhf.advantages[reinforce_baseline]': ('preset', 'openrlhf'),
    'openrlhf.advantages[gae,gamma=1,lambd=1]': ('preset', 'openrlhf'),
    'openrlhf.advantages[gae,gamma=0.99,lambd=0.95]': ('fail', None),
}


# the `adapter` and `extra` fixtures are in conftest.py


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "openrlhf" and adapter.version == "0.11.2"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float32",)
    assert adapter.has_experience_maker


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (openrlhf 0.11.2), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_gae_does_not_skip_masked_tokens(adapter):
    """get_advantages_and_returns (experience_maker.py:343-387) zeroes V and r at masked positions and
    runs the plain recursion through them: an environment token inside a multi-turn completion (the
    agent path builds such action masks, samples_generator.py:255-257) is a step with V = 0, so with
    lambda < 1 (or gamma < 1) the action before it bootstraps from 0. verl carries V and A across it."""
    m = np.array([[False, True, True, False, True]])
    r = np.array([[0.0, 0.0, 0.0, 0.0, 1.0]], dtype=np.float32)
    v = np.array([[0.0, 0.5, 0.5, 9.0, 0.5]], dtype=np.float32)
    adv, ret = adapter.gae(r, v, m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(adv, [[0, -0.0625, -0.125, 0, 0.5]], atol=1e-7)
    spec_adv, _ = oracle.gae(r.astype(np.float64), v.astype(np.float64), m, gamma=1.0, lam=0.5)
    np.testing.assert_allclose(spec_adv, [[0, 0.125, 0.25, 0, 0.5]], atol=1e-12)
    same, _ = adapter.gae(r, v, m, gamma=1.0, lam=1.0)  # gamma = lambda = 1 (the CLI defaults): no difference
    np.testing.assert_allclose(same, oracle.gae(r.astype(np.float64), v.astype(np.float64), m)[0], atol=1e-6)


@pytest.mark.frameworks
def test_finding_singleton_group_is_nan(adapter):
    """group_norm with n_samples_per_prompt = 1: torch.std of one element is NaN (the CLI refuses n = 1)."""
    assert np.isnan(adapter.outcome_advantages("group_norm", np.array([1.0, 2.0], dtype=np.float32), 1)).all()


@pytest.mark.frameworks
def test_finding_sample_level_loss_skips_empty_rows(adapter):
    """aggregate_loss(token_level_loss=False) averages over the rows with a valid token (locally, and
    get_loss_batch_info counts only those globally); the spec counts every row in S."""
    x = np.array([[0.0, 1.0, 3.0], [0.0, 5.0, 5.0]], dtype=np.float32)
    m = np.array([[0, 1, 1], [0, 0, 0]], dtype=np.float32)
    got = float(adapter.call("aggregate_loss", {"loss": x, "loss_mask": m}, {"token_level_loss": False})["outputs"]["loss"])
    assert got == pytest.approx(2.0)
    assert oracle.aggregate(x.astype(np.float64), m.astype(bool), mode="seq_mean_token_mean") == pytest.approx(1.0)


@pytest.mark.frameworks
def test_import_stubs_are_reported(adapter):
    """On CPU the worker skips the package __init__ files and stubs deepspeed and ray (never flash_attn)."""
    assert any(s.startswith("deepspeed") for s in adapter.stubs)
    assert not any("flash_attn" in s for s in adapter.stubs)
