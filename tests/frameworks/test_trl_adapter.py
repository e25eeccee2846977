"""The TRL adapter (conformance/adapters/trl_adapter.py) and the TRL checks (conformance/trl_checks.py).

Pins the status of every row as established against trl 1.16.0 (CPU, float32): the function-level
rows, the trainer-level advantages (worked example derived from the spec, not from TRL), every GRPO
``loss_type`` (value and gradient), RLOO's loss, TRL's bfloat16 paths, and the findings. Runs on a
tiny random-weight Llama; about half a minute on 2 CPU cores.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is not installed (pip install -c .ci/constraints.txt trl==1.16.0)")

import oracle  # noqa: E402
from conformance import cases, trl_checks  # noqa: E402
from conformance.adapters import BUILTIN_ADAPTERS, load_adapter  # noqa: E402
from conformance.commands.check import load_adapters  # noqa: E402
from conformance.registry import BY_FUNCTION  # noqa: E402
from conformance.suite import check_row, seeds_for  # noqa: E402

N_SEEDS = 4


@pytest.fixture(scope="module")
def adapter():
    return load_adapter("trl")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def test_adapter_attributes(adapter):
    assert BUILTIN_ADAPTERS["trl"] == "conformance.adapters.trl_adapter:TRLAdapter"
    assert adapter.name == "trl"
    assert adapter.version == trl.__version__
    assert adapter.spec_version == "v1"
    assert adapter.array_api == "torch"
    assert adapter.framework_available is True


def test_missing_trl_is_a_not_installed_row(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError
    adapters, infos, _ = load_adapters(["trl"])
    assert adapters == []
    assert infos[0].status == "not_installed", infos[0]
    assert "cannot import" in infos[0].message


def test_loss_types_enumerated_from_installed_trl(adapter):
    found = set(adapter.grpo_loss_types())
    assert {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"} <= found
    covered = {cfg.loss_type for cfg in trl_checks.loss_configs()}
    assert found <= covered, f"loss types without a configuration: {found - covered}"


# ---------------------------------------------------------------------------------------------
# Core-API rows (float32)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "function", ["token_logprobs", "token_entropy", "token_logprobs_from_hidden", "rloo_advantages"]
)
def test_function_rows_pass(adapter, function):
    row = check_row(BY_FUNCTION[function], adapter, seeds=seeds_for(function, 0, N_SEEDS))
    assert row.status == "pass", row.message
    assert row.n_cases > 0


def test_grpo_advantages_row_is_preset_trl(adapter):
    row = check_row(BY_FUNCTION["grpo_advantages"], adapter, seeds=seeds_for("grpo_advantages", 0, N_SEEDS))
    assert row.status == "preset", row.message
    assert row.matched_preset == "trl"
    assert row.matched_kwargs == {"eps": 1e-4}


def _spec_advantages(rewards, G, scale):
    """The spec's value: std_ddof = 1 (Bessel), eps = 1e-4 added to the std (preset trl)."""
    return oracle.grpo_advantages(np.asarray(rewards, dtype=np.float64), G, scale=scale, std_ddof=1, eps=1e-4)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_worked_example(adapter, scale):
    rewards = [1.0, 0, 0, 0, 3, 3, 3, 3]
    got = adapter.grpo_advantages(torch.tensor(rewards), 4, scale=scale).numpy()
    expected = _spec_advantages(rewards, 4, scale)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)
    if scale == "group":  # (1 - 1/4) / (sqrt(1/4) + 1e-4) and (-1/4) / (sqrt(1/4) + 1e-4)
        assert expected[0] == pytest.approx(0.75 / (0.5 + 1e-4))
        np.testing.assert_allclose(got, [1.4997, -0.4999, -0.4999, -0.4999, 0, 0, 0, 0], atol=1e-4)


def test_size_one_groups_give_zero(adapter):
    r = torch.tensor([1.0, -2.0, 5.0])
    assert adapter.grpo_advantages(r, 1).abs().max() == 0
    assert adapter.rloo_advantages(r, 1).abs().max() == 0


def test_group_size_must_divide(adapter):
    with pytest.raises(ValueError, match="grpo_advantages: group_size"):
        adapter.grpo_advantages(torch.zeros(5), 2)


# ---------------------------------------------------------------------------------------------
# GRPO loss rows (value and gradient, every loss_type)
# ---------------------------------------------------------------------------------------------

KL_PRESET = {"kl": "k3 * r_t (use_bias_correction_kl)"}
KL_PRESET_SEQ = {"kl": "k3 * s_b (use_bias_correction_kl)"}
CISPO = {"bound": "absolute"}
EXPECTED = {  # row id -> (status, matched_kwargs)
    "trl.grpo_loss[grpo,beta=0]": ("pass", None),
    "trl.grpo_loss[bnpo,beta=0]": ("pass", None),
    "trl.grpo_loss[dr_grpo,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,beta=0]": ("pass", None),
    "trl.grpo_loss[cispo,beta=0]": ("preset", CISPO),
    "trl.grpo_loss[cispo,epsilon_high=5.0,beta=0]": ("preset", CISPO),
    "trl.grpo_loss[grpo,sequence,beta=0]": ("pass", None),
    "trl.grpo_loss[luspo,sequence,beta=0]": ("pass", None),
    "trl.grpo_loss[grpo,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[bnpo,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[dr_grpo,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[dapo,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[cispo,beta=0.04]": ("preset", {**CISPO, **KL_PRESET}),
    "trl.grpo_loss[cispo,epsilon_high=5.0,beta=0.04]": ("preset", {**CISPO, **KL_PRESET}),
    "trl.grpo_loss[grpo,sequence,beta=0.04]": ("preset", KL_PRESET_SEQ),
    "trl.grpo_loss[luspo,sequence,beta=0.04]": ("preset", KL_PRESET_SEQ),
    "trl.grpo_loss[dapo,use_bias_correction_kl=False,beta=0.04]": ("pass", None),
    "trl.grpo_loss[dapo,sequence,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,epsilon_high=0.28,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,delta=1.5,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,temperature=0.7,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,entropy_coef=0.01,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,A=[B,T],beta=0]": ("pass", None),
    "trl.grpo_loss[vespo,on_policy,beta=0]": ("pass", None),
    "trl.grpo_loss[sapo,on_policy,beta=0]": ("not_implemented", None),  # gradient checked, value not a spec quantity
    "trl.grpo_loss[vespo,beta=0]": ("not_implemented", None),
    "trl.grpo_loss[sapo,beta=0]": ("not_implemented", None),
}
CONFIGS = {cfg.row_id: cfg for cfg in trl_checks.loss_configs()}


def test_every_configuration_has_an_expectation():
    assert set(CONFIGS) == set(EXPECTED)


@pytest.mark.parametrize("row_id", list(EXPECTED))
def test_grpo_loss_row(adapter, row_id):
    status, kwargs = EXPECTED[row_id]
    row = trl_checks.check_loss_config(adapter, CONFIGS[row_id], seed=0)
    assert row.status == status, row.message
    assert row.matched_kwargs == kwargs
    if status in ("pass", "preset"):
        assert row.checks.get("value") == "pass", row.checks  # value compared ...
        for what in ("grad[logp]", "grad[hidden]", "grad[weight]"):  # ... and the gradient
            assert row.checks.get(what) == "pass", row.checks
        assert row.max_abs_err < 1e-5
    if status == "preset":
        assert row.matched_preset == "trl"
    if row_id == "trl.grpo_loss[sapo,on_policy,beta=0]":
        assert "value" not in row.checks and row.checks["grad[hidden]"] == "pass"


def test_rloo_loss_row(adapter):
    row = trl_checks.check_rloo_loss(adapter, seed=0)
    assert row.status == "pass", row.message
    assert set(row.checks) == {"value", "grad[logp]", "grad[hidden]", "grad[weight]"}


def test_batch_exercises_every_branch(adapter):
    """The seeded batch puts tokens on both sides of every clip in use, for both signs of A."""
    cfg = trl_checks._cfg("dapo", delta=1.5)
    run = trl_checks.run_loss_config(adapter, cfg, seed=0)
    m = run["mask"]
    r = np.exp(run["logp"] - run["old_logp"])[m]
    A = np.broadcast_to(run["advantages"][:, None], m.shape)[m]
    assert ((r > 1.2) & (A > 0)).any() and ((r < 0.8) & (A < 0)).any()  # clipped
    assert ((r > 1.5) & (A < 0)).any()  # TRL's delta (the spec's dual clip) binds
    assert ((abs(np.log(r)) < 0.18) & (A != 0)).any()  # inside the clip range
    assert (r > 5).any() and (r < 0.2).any()  # CISPO's absolute bounds 5.0 and 0.2
    assert run["num_items_in_batch"] == m.sum() == 12  # the tool token and padding are out
    assert run["max_completion_length"] == 7 and run["input_ids"].shape[1] == trl_checks.P + trl_checks.C


def test_gradient_check_catches_a_detach(adapter):
    """A mutant that detaches one valid token's log-prob inside TRL's forward: the loss value is
    unchanged, the captured hidden/weight gradients are not."""
    cfg = trl_checks._cfg("dapo")
    trainer = adapter._world_()._trainer("grpo", cfg.trl_config())

    def detach_one(module, args, out):
        if getattr(out, "log_probs", None) is not None:
            keep = torch.zeros_like(out.log_probs, dtype=torch.bool)
            keep[0, -3] = True  # a valid completion token of row 0
            out.log_probs = torch.where(keep, out.log_probs.detach(), out.log_probs)
        return out

    hook = trainer.model.register_forward_hook(detach_one)
    try:
        row = trl_checks.check_loss_config(adapter, cfg, seed=0)
    finally:
        hook.remove()
    assert row.status == "fail"
    assert row.checks["value"] == "pass" and row.checks["grad[hidden]"] == "fail"


def test_normaliser_is_checked(adapter):
    """The dapo run is not the grpo (per-sequence mean) nor the Dr. GRPO composition with the padded width."""
    run = trl_checks.run_loss_config(adapter, trl_checks._cfg("dapo"), seed=0)
    for other in ({"loss_type": "grpo"}, {"loss_type": "dr_grpo", "max_completion_length": trl_checks.C}):
        wrong = {**run, **other}  # TRL's results, composed as another loss type
        result, _ = trl_checks.compare_run(wrong, trl_checks.compositions(wrong, on_policy=False)[0])
        assert not result.ok


# ---------------------------------------------------------------------------------------------
# Findings (trl 1.16.0), pinned
# ---------------------------------------------------------------------------------------------


def test_finding_cispo_default_bound_is_absolute_0_2(adapter):
    """GRPOConfig(loss_type="cispo") without epsilon_high caps the IS weight at epsilon = 0.2 as an
    absolute bound: on-policy (r = 1) every token's weight is 0.2, i.e. 1/5 of REINFORCE's gradient."""
    run = trl_checks.run_loss_config(adapter, trl_checks.LossConfig("cispo", on_policy=True), seed=0)
    assert run["epsilon_high"] == 0.2
    pg = trl_checks.compositions({**run, "loss_type": "vespo"}, on_policy=True)[0]  # -A*logp, token mean
    reinforce = trl_checks.evaluate(run, pg)
    m = run["mask"]
    np.testing.assert_allclose(run["grad_logp"][m], 0.2 * reinforce.grad_logp[m], rtol=1e-5, atol=1e-7)


def test_finding_bias_corrected_kl_changes_the_gradient_on_policy(adapter):
    """use_bias_correction_kl (default True) multiplies k3 by the differentiable ratio: on-policy the
    value is k3's but the per-token gradient is k3' + k3 = logp - ref instead of k3' = 1 - e^(ref - logp)."""
    cfg = trl_checks.LossConfig("dapo", (("beta", 0.04),), on_policy=True)
    run = trl_checks.run_loss_config(adapter, cfg, seed=0)
    m = run["mask"]
    A = np.broadcast_to(run["advantages"][:, None], m.shape)
    d = run["logp"] - run["ref_logp"]
    n = m.sum()
    expected = (-A + 0.04 * d) / n  # PPO's on-policy gradient is -A; the KL part is beta * d
    np.testing.assert_allclose(run["grad_logp"][m], expected[m], rtol=1e-4, atol=1e-7)
    canonical = (-A + 0.04 * (1 - np.exp(-d))) / n
    assert np.abs(run["grad_logp"][m] - canonical[m]).max() > 1e-4


def test_finding_fused_entropy_cancellation(adapter):
    """TRL's fused head computes the entropy as log Z - sum_v p_v z_v in float32, which cancels for
    confident rows with large logits: |error| 5e-6 at |z/T| ~ 33 (float32 -sum p log p: 2.6e-7)."""
    case = cases.make_case("token_entropy_from_hidden", 507326349)
    r = cases.rounded_args(case, "float32")
    tau = case.kwargs["temperature"]
    h, W, mask = (torch.tensor(r[k], dtype=torch.float32) for k in ("hidden", "weight", "mask"))
    got = adapter.token_entropy_from_hidden(h, W, mask.bool(), temperature=tau).numpy()
    expected = oracle.token_entropy_from_hidden(r["hidden"], r["weight"], r["mask"], temperature=tau)
    z = torch.tensor(r["hidden"] @ r["weight"].T / tau, dtype=torch.float32)
    lp = z.log_softmax(-1)
    naive = np.zeros_like(expected)
    naive[:, 1:] = (-(lp.exp() * lp).sum(-1)).numpy()[:, :-1] * r["mask"][:, 1:]
    assert np.abs(got - expected).max() > 2e-6
    assert np.abs(naive - expected).max() < 1e-6


def test_finding_bf16_softmax_is_a_precision_finding(adapter):
    """TRL's bfloat16 selective_log_softmax / entropy_from_logits run log_softmax in bfloat16 (no
    float32 upcast): outside the spec's bfloat16 tolerance, reported as a precision finding of the
    core rows (their float64/float32 cases decide the semantics: canonical), and a FAIL under
    --strict-precision. The advantages stay within the bfloat16 class."""
    for fn in ("token_logprobs", "token_entropy"):
        record = BY_FUNCTION[fn]
        row = check_row(record, adapter, seeds=seeds_for(fn, 0, N_SEEDS))
        assert row.status == "pass", row.message
        found = {f["dtype"]: f for f in row.precision_findings}
        assert set(found) == {"bfloat16"} and found["bfloat16"]["meets"] == "below_bfloat16", row.precision_findings
        assert "bfloat16" in found["bfloat16"]["note"]
        strict = check_row(record, adapter, seeds=seeds_for(fn, 0, N_SEEDS), strict_precision=True)
        assert strict.status == "fail" and not strict.precision_findings
    grpo = check_row(BY_FUNCTION["grpo_advantages"], adapter, seeds=seeds_for("grpo_advantages", 0, N_SEEDS))
    assert grpo.precision.get("bfloat16") in ("float32", "bfloat16"), grpo.precision


def test_finding_row_mask_does_not_isolate_gradients():
    """selective_log_softmax(row_mask=...) on CPU zeroes masked rows' values but still computes them:
    a NaN logit in a masked row gives NaN gradients (TRL's Triton path skips such rows)."""
    from trl.trainer.utils import selective_log_softmax

    logits = torch.randn(1, 3, 5)
    logits[0, 2] = math.nan
    logits.requires_grad_(True)
    lp = selective_log_softmax(logits, torch.tensor([[1, 2, 3]]), row_mask=torch.tensor([[1, 1, 0]]))
    assert lp[0, 2] == 0 and torch.isfinite(lp).all()
    lp.sum().backward()
    assert torch.isnan(logits.grad[0, 2]).all() and torch.isfinite(logits.grad[0, :2]).all()


def test_helper_rows(adapter):
    assert trl_checks.nanstd_row(adapter, 0).status == "pass"
    assert trl_checks.fused_softmax_entropy_row(adapter, 0).status == "pass"
