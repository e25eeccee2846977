"""The verl adapter (conformance/adapters/verl_adapter.py, via the subprocess worker) and the verl rows
(conformance/frameworks/verl_checks.py).

verl runs in its own environment: these tests need `rlspec frameworks install verl` (marked
`frameworks`, skipped with a reason otherwise; CI runs them as `pytest -m frameworks` after the
install). The tests of the "not installed" path and of the worker protocol need no verl and always run.
Pins every row's status as established against verl 0.9.1 (torch 2.13.0 CPU) and the findings.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import oracle
from conformance.adapters import BUILTIN_ADAPTERS
from conformance.adapters import subprocess_worker as sw
from conformance.commands.check import load_adapters
from tests.frameworks import pinned_rows

FRAMEWORK = "verl"
SKIP_REASON = pinned_rows.skip_reason("verl", FRAMEWORK)


# ---------------------------------------------------------------------------------------------
# Always: the "not installed" row and the protocol
# ---------------------------------------------------------------------------------------------


def test_registered():
    assert BUILTIN_ADAPTERS["verl"] == "conformance.adapters.verl_adapter:VerlAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


def test_environment_without_verl_is_a_not_installed_row(monkeypatch):
    """An interpreter that lacks verl (this one): the worker's hello carries the ImportError."""
    pytest.importorskip("numpy")
    if sw.importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is importable in this interpreter")
    monkeypatch.setenv("RLSPEC_VERL_PYTHON", sys.executable)
    monkeypatch.setattr(sw, "_WORKERS", {})
    adapters, infos, _ = load_adapters(["verl"])
    assert adapters == [] and infos[0].status == "not_installed", infos[0]
    assert "ModuleNotFoundError" in infos[0].message


def test_protocol_round_trip_is_exact_and_pickle_free():
    arrays = {"a": np.array([0.1, 1e-300, np.nan, -np.inf], dtype=np.float64), "b": np.float32(3.25) * np.ones((2, 0, 3), np.float32),
              "c": np.arange(6, dtype=np.int64).reshape(2, 3), "s": np.array(2.5)}
    back = sw.decode(sw.encode({"x": arrays, "f": 0.1, "t": (1, "k")}))
    for k, v in arrays.items():
        assert back["x"][k].dtype == v.dtype and back["x"][k].shape == v.shape
        np.testing.assert_array_equal(back["x"][k], v)
    assert back["f"] == 0.1 and back["t"] == [1, "k"]
    with pytest.raises(ValueError):  # object arrays would need pickle: refused
        sw.encode(np.array([object()], dtype=object))


# ---------------------------------------------------------------------------------------------
# With verl installed (the `adapter` and `extra` fixtures are in conftest.py)
# ---------------------------------------------------------------------------------------------

CORE = {  # core-API rows as `rlspec check --seed 0 --n-seeds 8` runs them (golden vectors included)
    'token_logprobs': 'pass',
    'token_entropy': 'pass',
    'rloo_advantages': 'fail',
    'gae': 'error',
    'whiten': 'error',
    'kl_penalty': 'preset',  # verl clamps only k3: preset verl for estimator='k3', canonical otherwise
    'ppo_token_loss': 'preset',
    'gspo_token_loss': 'variant',  # form='token_sg' (no preset of another name uses it)
    'cispo_token_loss': 'pass',
    'value_token_loss': 'pass',
    'aggregate': 'fail',
}

EXTRA = {  # row id -> (status, matched preset)
    'verl.agg_loss[token-mean]': ('pass', None),
    'verl.agg_loss[token-mean,local]': ('pass', None),
    'verl.agg_loss[token-mean,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-mean]': ('pass', None),
    'verl.agg_loss[seq-mean-token-mean,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-mean,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-sum,dp=2]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum-norm]': ('pass', None),
    'verl.agg_loss[seq-mean-token-sum-norm,local]': ('variant', None),
    'verl.agg_loss[seq-mean-token-sum-norm,dp=2]': ('pass', None),
    'verl.agg_loss[token-sum]': ('pass', None),
    'verl.agg_loss[token-sum,local]': ('pass', None),
    'verl.agg_loss[token-sum,dp=2]': ('pass', None),
    'verl.policy_loss[vanilla,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-sum]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,seq-mean-token-sum-norm]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,token-sum]': ('preset', 'verl'),
    'verl.policy_loss[vanilla,token-mean,clip_ratio_high=0.28,clip_ratio_c=10.0]': ('pass', None),
    'verl.policy_loss[vanilla,token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[gspo,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean,A=[B,T]]': ('preset', 'verl'),
    'verl.policy_loss[gspo,seq-mean-token-mean,clip_ratio_low=0.0003,clip_ratio_high=0.0004]': ('pass', None),
    'verl.policy_loss[cispo,token-mean]': ('preset', 'verl'),
    'verl.policy_loss[cispo,seq-mean-token-mean,clip_ratio_low=0.2,clip_ratio_high=0.28]': ('pass', None),
    'verl.compute_value_loss[cliprange_value=0.5,token-mean]': ('preset', 'verl'),
    'verl.compute_value_loss[cliprange_value=0.5,seq-mean-token-mean]': ('preset', 'verl'),
    'verl.compute_value_loss[cliprange_value=0.2,token-mean]': ('pass', None),
    'verl.kl_penalty[kl]': ('pass', None),
    'verl.kl_penalty[k1]': ('pass', None),
    'verl.kl_penalty[mse]': ('pass', None),
    'verl.kl_penalty[k2]': ('pass', None),
    'verl.kl_penalty[low_var_kl]': ('preset', 'verl'),
    'verl.kl_penalty[k3]': ('preset', 'verl'),
    'verl.kl_penalty[k3+]': ('variant', None),
    'verl.kl_penalty[low_var_kl+]': ('variant', None),
    'verl.kl_penalty[k1+]': ('variant', None),
    'verl.kl_penalty[abs]': ('not_implemented', None),
    'verl.grpo_advantages[norm_adv_by_std_in_grpo=True]': ('preset', 'verl'),  # + precision: epsilon added in float32
    'verl.grpo_advantages[norm_adv_by_std_in_grpo=False]': ('preset', 'verl'),
    'verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=True]': ('preset', 'verl'),
    'verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=False]': ('preset', 'verl'),
    'verl.rloo_vectorized_advantages': ('pass', None),
    'verl.compute_gae_advantage_return': ('pass', None),
}


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "verl" and adapter.version == "0.9.1"
    assert adapter.spec_version == "v1" and adapter.array_api == "numpy"
    assert adapter.framework_available is True


test_core_row = pinned_rows.core_row_test(CORE)
test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


# ---------------------------------------------------------------------------------------------
# Findings (verl 0.9.1), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_grpo_statistics_in_float32_are_a_precision_finding(extra):
    """verl adds GRPO's epsilon in float32 (core_algos.py) and its vectorised group_mean_std computes
    in float32 (utils/groupwise.py): float64 rewards get float32-precision advantages. The semantic
    verdict is still its own preset, at that precision; the precision is reported apart."""
    for row_id in ("verl.grpo_advantages[norm_adv_by_std_in_grpo=True]",
                   "verl.grpo_vectorized_advantages[norm_adv_by_std_in_grpo=True]"):
        row = extra[row_id]
        assert (row.status, row.matched_preset) == ("preset", "verl"), row.message
        assert [(f["dtype"], f["meets"]) for f in row.precision_findings] == [("float64", "float32")], row.precision_findings


@pytest.mark.frameworks
def test_finding_singleton_groups(adapter):
    """A group of one: the loop GRPO gives r/(1 + 1e-6) (mean 0, std 1; core_algos.py:315-317), the
    loop RLOO gives the raw reward, the vectorised RLOO gives 0 (core_algos.py:864). The spec's
    singleton="raw" is A = r exactly, so at float64 the GRPO row fails by 1e-6 relative."""
    r = np.array([1.0, 2.0])
    # (1 + 1e-6 is formed with verl's float32 0-d std tensor: r / 1.00000095 even for float64 rewards)
    np.testing.assert_allclose(adapter.outcome_advantages("grpo", r, 1), r / np.float32(1 + 1e-6), rtol=1e-12)
    assert abs(adapter.outcome_advantages("grpo", r, 1)[0] - 1.0) > 1e-7  # not the spec's "raw" (A = r)
    np.testing.assert_array_equal(adapter.outcome_advantages("rloo", r, 1), r)
    np.testing.assert_array_equal(adapter.outcome_advantages("rloo_vectorized", r, 1), [0.0, 0.0])


@pytest.mark.frameworks
def test_finding_masked_whiten_refuses_one_token(adapter):
    """masked_whiten (and so compute_gae_advantage_return) raises on a mask with 0 or 1 valid tokens
    (torch_functional.py:311-326); the spec returns 0 / the token's own value."""
    m = np.array([[False, True, False]])
    with pytest.raises(ValueError, match="sum of the mask is one"):
        adapter.whiten(np.array([[0.0, 3.0, 0.0]]), m)
    with pytest.raises(ValueError, match="At least one element"):
        adapter.gae(np.zeros((1, 3)), np.zeros((1, 3)), np.zeros((1, 3), dtype=bool))


@pytest.mark.frameworks
def test_finding_seq_mean_token_mean_guard(adapter):
    """agg_loss divides each row by (n_b + 1e-8) (core_algos.py:1192): 1e-8/n_b relative, visible at
    float64 (the core aggregate row fails at rtol 1e-9), invisible at float32."""
    x = np.array([[0.0, 1.0, 2.0]])
    m = np.array([[False, True, True]])
    got = adapter.aggregate(x, m, mode="seq_mean_token_mean")
    assert got == pytest.approx(3.0 / (2 + 1e-8), rel=1e-15)
    assert got != oracle.aggregate(x, m, mode="seq_mean_token_mean")


@pytest.mark.frameworks
def test_finding_gspo_aggregation_default(adapter):
    """verl 0.9.1 aggregates GSPO with the actor's loss_agg_mode (token-mean by default), verl main
    hard-codes seq-mean-token-mean (peer-conventions §7): on ragged rows the two differ."""
    from conformance.frameworks import checks

    b = checks.round_batch(checks.loss_batch(0), "float32")
    arrays = {"old_log_prob": b["old_logp"].astype(np.float32), "log_prob": b["logp"].astype(np.float32),
              "advantages": np.broadcast_to(b["advantages"][:, None], b["mask"].shape).astype(np.float32),
              "response_mask": b["mask"].astype(np.float32)}
    losses = {mode: float(adapter.call("policy_loss", arrays, {"name": "gspo", "loss_agg_mode": mode})["outputs"]["loss"])
              for mode in ("token-mean", "seq-mean-token-mean")}
    assert abs(losses["token-mean"] - losses["seq-mean-token-mean"]) > 1e-3


@pytest.mark.frameworks
def test_dual_clip_off_is_exact(adapter):
    """dual_clip=None is run as clip_ratio_c=inf: identical to the canonical PPO loss and gradient."""
    rng = np.random.default_rng(1)
    m = np.zeros((3, 5), dtype=bool)
    m[:, 1:] = True
    lp = -np.abs(rng.normal(size=(3, 5)))
    old = lp - np.array([[0, 2.0, -2.0, 1.5, 0.1]] * 3)
    A = np.array([-1.0, 0.0, 2.0])
    u = rng.normal(size=(3, 5))
    np.testing.assert_allclose(adapter.ppo_token_loss(lp, old, A, m), oracle.ppo_token_loss(lp, old, A, m), rtol=1e-12)
    np.testing.assert_allclose(adapter.ppo_token_loss_grad(lp, old, A, m, u), oracle.ppo_token_loss_grad(lp, old, A, m, u), rtol=1e-12)
