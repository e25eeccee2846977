"""The TRL adapter (conformance/frameworks/trl/adapter.py) and the TRL checks (conformance/frameworks/trl/checks.py).

Pins the status of every row as established against trl 1.16.0 (CPU, float32): the function-level
rows, the trainer-level advantages (worked example derived from the spec, not from TRL), every GRPO
``loss_type`` (value and gradient), RLOO's loss, TRL's bfloat16 paths, and the findings. Runs on a
tiny random-weight Llama; about half a minute on 2 CPU cores.
"""

from __future__ import annotations

import math
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is not installed (pip install -c .ci/constraints.txt -e '.[trl]')")

import oracle  # noqa: E402
from conformance.records import cases, make_case  # noqa: E402
from conformance.frameworks.trl import checks as trl_checks  # noqa: E402
from conformance.runner.loading import BUILTIN_ADAPTERS, load_adapter  # noqa: E402
from conformance.runner.parts import golden_cases
from conformance.cli import main  # noqa: E402
from conformance.runner.run import load_adapters  # noqa: E402
from conformance.records import BY_FUNCTION  # noqa: E402
from conformance.runner.verdict import check_row
from conformance.runner.rows import seeds_for  # noqa: E402

N_SEEDS = 4


@pytest.fixture(scope="module")
def adapter():
    return load_adapter("trl")


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def test_adapter_attributes(adapter):
    assert BUILTIN_ADAPTERS["trl"] == "conformance.frameworks.trl.adapter:TRLAdapter"
    assert adapter.name == "trl"
    assert adapter.version == trl.__version__
    assert adapter.spec_version == "v1"
    assert adapter.array_api == "torch"


def test_missing_trl_is_a_not_installed_row(monkeypatch):
    """TRL is the `trl` extra (and in `test`), not a dependency: without it the trl column is "not installed"
    with the command that installs it, and naming it with --adapter is a broken run (exit 2)."""
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("trl") for d in project["dependencies"])
    assert any(d.startswith("trl") for d in project["optional-dependencies"]["trl"])
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` now raises ImportError
    adapters, infos = load_adapters(["trl"])
    assert adapters == []
    assert infos[0].status == "not_installed", infos[0]
    assert "cannot import" in infos[0].message and "pip install 'rlspec[trl]'" in infos[0].message
    assert main(["check", "--adapter", "trl", "--only", "loss.pg", "--no-progress"]) == 2


def test_loss_types_enumerated_from_installed_trl(adapter):
    found = set(adapter.grpo_loss_types())
    assert {"grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo"} <= found
    # GRPOConfig does not validate loss_type; _compute_loss dispatches on it (grpo_trainer.py:3109-3138,
    # :3153-3184, "Unknown loss type" otherwise). In trl 1.16.0 the documented and the dispatched sets agree.
    assert set(adapter.grpo_documented_loss_types()) == set(adapter.grpo_dispatched_loss_types()) == found
    covered = {cfg.loss_type for cfg in trl_checks.loss_configs()}
    assert found <= covered, f"loss types without a configuration: {found - covered}"


def test_every_loss_type_is_checked_off_policy(adapter):
    """Every loss_type TRL offers has a checked (value and gradient) off-policy row: none is left
    "not implemented" (vespo through vespo_token_loss, spec loss.vespo)."""
    assert trl_checks.NOT_EXPRESSIBLE == {}
    checked = {CONFIGS[r].loss_type for r, (status, _) in EXPECTED.items()
               if status in ("pass", "preset") and not CONFIGS[r].on_policy}
    assert set(adapter.grpo_loss_types()) <= checked


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
    assert row.matched_preset == "ms_swift, trl"  # ms-swift adds the same eps (its own preset)
    assert row.matched_kwargs == {"eps": 1e-4}


def test_gdpo_advantages_row_is_preset_trl(adapter):
    """Spec v1.1 adv.gdpo: multi_objective_aggregation="normalize_then_sum" (grpo_trainer.py:2790-2800), one
    reward function per column: per-reward group z-scores with nanstd + 1e-4, the weighted sum, the batch
    z-score with + 1e-4: preset trl."""
    row = check_row(BY_FUNCTION["gdpo_advantages"], adapter, seeds=seeds_for("gdpo_advantages", 0, N_SEEDS))
    assert row.status == "preset", row.message
    assert row.matched_preset == "trl" and row.matched_kwargs == {"eps": 1e-4}


def test_gdpo_worked_example(adapter):
    """Two rewards weighted [1, 2] in groups of 2: z = 0.5 / (sqrt(0.5) + 1e-4) per column, s = [-z, z, 3z, -3z],
    then (s - mean) / (std + 1e-4) over the 4 sequences; the default sum_then_normalize gives GRPO of the sum."""
    r = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    got = adapter.gdpo_advantages(torch.tensor(r), 2, reward_weights=[1.0, 2.0]).numpy()
    z = 0.5 / (np.sqrt(0.5) + 1e-4)
    s = np.array([-z, z, 3 * z, -3 * z])
    np.testing.assert_allclose(got, (s - s.mean()) / (s.std(ddof=1) + 1e-4), rtol=2e-6, atol=1e-6)
    grpo_of_sum = adapter.grpo_advantages(torch.tensor(r @ np.array([1.0, 2.0])), 2).numpy()
    assert not np.allclose(got, grpo_of_sum, atol=1e-3)


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

KL_PRESET = {"gradient": "bias_corrected"}  # spec v1.1 kl_loss_term's preset trl (use_bias_correction_kl)
KL_PRESET_SEQ = {"kl": "k3 * s_b (use_bias_correction_kl)"}
CISPO = {"bound": "absolute"}
ZERO = {"rejected": "zero"}  # spec v1.1 corrected_policy_loss's preset trl: a token OPSM rejects still counts
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
    # spec v1.1 entropy terms (grpo_trainer.py:3049-3052, :3143-3144, :3186-3211): the bonus is
    # entropy_bonus(mode="token_mean") whatever loss_type (grpo reduces its policy term seq_mean_token_mean);
    # entropy_top_mask multiplies the policy term (not the KL, still counted over the whole mask) and restricts
    # the bonus to the kept tokens
    "trl.grpo_loss[grpo,entropy_coef=0.01,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,top_entropy_quantile=0.2,beta=0]": ("pass", None),
    "trl.grpo_loss[dapo,entropy_coef=0.01,top_entropy_quantile=0.5,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[dapo,A=[B,T],beta=0]": ("pass", None),
    # loss_type="sapo" (grpo_trainer.py:3121-3124): aggregate(sapo_token_loss(tau_pos, tau_neg), mode=
    # "seq_mean_token_mean") with tau = GRPOConfig.sapo_temperature_pos/neg (1.0/1.05, canonical), reduced
    # like grpo (:3153-3157); beta > 0 adds k3 times the ratio (the KL preset, as every loss type).
    # TRL's tau is a float32 tensor (precision only; these runs are float32 throughout).
    "trl.grpo_loss[sapo,beta=0]": ("pass", None),
    "trl.grpo_loss[sapo,beta=0.04]": ("preset", KL_PRESET),
    # the gate on GSPO's s_b (:3086-3088): sapo_token_loss at the row means of logp and old_logp
    "trl.grpo_loss[sapo,sequence,beta=0]": ("pass", None),
    "trl.grpo_loss[sapo,sequence,beta=0.04]": ("preset", KL_PRESET_SEQ),
    "trl.grpo_loss[sapo,sapo_temperature_neg=2.0,sapo_temperature_pos=0.5,beta=0]": ("pass", None),  # tau from the config
    "trl.grpo_loss[sapo,A=[B,T],beta=0]": ("pass", None),  # tau by the sign of each A_t
    "trl.grpo_loss[sapo,on_policy,beta=0]": ("pass", None),  # r = 1: value -2A/tau, gradient -A (value now compared)
    # luspo at the config's default token level (a warning, :916-920): ppo_token_loss + seq_mean_token_sum
    "trl.grpo_loss[luspo,beta=0]": ("pass", None),
    # vespo: phi(1) = 1 on-policy, so pg_token_loss (+ the KL preset); off-policy vespo_token_loss with
    # GRPOConfig's (k, lambda) (:2972-3018); this batch's log-ratios never reach TRL's clamps: canonical
    "trl.grpo_loss[vespo,on_policy,beta=0]": ("pass", None),
    "trl.grpo_loss[vespo,on_policy,beta=0.04]": ("preset", KL_PRESET),
    "trl.grpo_loss[vespo,beta=0]": ("pass", None),
    # Rollout corrections (trl_checks.offpolicy_configs): TRL = aggregate(keep*w*ppo + beta*k3, mask, mode), the
    # KL term unweighted and every valid token in the denominator: canonical without OPSM (a zero weight w counts
    # either way); with OPSM the canonical rejected="drop" takes the rejected tokens out, TRL's is preset trl.
    # token_truncate: w = min(rho, 2) multiplies the PPO token loss, value and gradient (no zero weight,
    # so the "rejected tokens" contrast cannot be told apart on this row).
    "trl.grpo_loss[dapo,is=token_truncate(max=2),beta=0]": ("pass", None),
    # TRL's defaults (sequence_mask, clip_max 3, use_bias_correction_kl): only the KL's own ratio r_t
    # (the existing KL preset), not the IS weight, multiplies k3.
    "trl.grpo_loss[dapo,is=sequence_mask(max=3),beta=0.04]": ("preset", KL_PRESET),
    # the same without the bias-corrected KL: exactly canonical, zero-weight rows still in num_items_in_batch
    "trl.grpo_loss[dapo,is=sequence_mask(max=3),use_bias_correction_kl=False,beta=0.04]": ("pass", None),
    # OPSM without vLLM reads old_per_token_logps (:3073); bnpo divides by _compute_loss's own mask.sum(), so the
    # tokens OPSM rejects still count: spec offpolicy.loss rejected="zero" (preset trl), not the canonical "drop"
    "trl.grpo_loss[bnpo,opsm,beta=0]": ("preset", ZERO),
    # both corrections, OPSM against the sampling log-probs, token-level masked IS with both bounds
    "trl.grpo_loss[dapo,is=token_mask(min=0.5,max=2),opsm,use_bias_correction_kl=False,beta=0.04]": ("preset", ZERO),
    # per-token advantages (OPSM per token), per-sequence mean, bias-corrected KL: both presets
    "trl.grpo_loss[grpo,is=sequence_truncate(max=3),opsm,A=[B,T],beta=0.04]": ("preset", {**KL_PRESET, **ZERO}),
    # finding unclamped-ratio-overflow-nan (trl_checks.overflow_configs): a zero-advantage row with a log-ratio
    # of 800; coef_1 = exp(log-ratio) is inf (grpo_trainer.py:3095, no clamp), so the PPO and GSPO loss is
    # 0*inf = NaN (:3118-3120) and SAPO's gradient is NaN (:3123); the spec's value is 0
    "trl.grpo_loss[dapo,log_ratio=800 at A=0,beta=0]": ("fail", None),
    "trl.grpo_loss[grpo,sequence,log_ratio=800 at A=0,beta=0]": ("fail", None),
    "trl.grpo_loss[sapo,log_ratio=800 at A=0,beta=0]": ("fail", None),
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
    if CONFIGS[row_id].loss_type == "sapo":
        assert row.spec_id.startswith("loss.sapo+"), row.spec_id
        assert "sapo_token_loss(" in row.message


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


def _sapo_ok(run):
    result = trl_checks.compare_run(run, trl_checks.compositions(run, on_policy=False)[0])
    return result.ok


def test_sapo_rows_tell_the_gate_apart(adapter, monkeypatch):
    """The seed-0 sapo batch fails every near miss: tau swapped between the signs, tau not sign-aware
    (1.0 or 1.05 for both), TRL's reduction replaced by the token mean, and the token gate on the
    sequence-level run (and vice versa). So the rows pin tau's reading, its sign rule and the reduction."""
    run = trl_checks.run_loss_config(adapter, trl_checks._cfg("sapo"), seed=0)
    assert (run["sapo_temperature_pos"], run["sapo_temperature_neg"]) == (1.0, 1.05)  # grpo_config.py:714-729
    assert _sapo_ok(run)
    for wrong in ({"sapo_temperature_pos": 1.05, "sapo_temperature_neg": 1.0}, {"sapo_temperature_neg": 1.0},
                  {"sapo_temperature_pos": 1.05}, {"importance_sampling_level": "sequence"}):
        assert not _sapo_ok({**run, **wrong}), wrong
    seq = trl_checks.run_loss_config(adapter, trl_checks._cfg("sapo", importance_sampling_level="sequence"), seed=0)
    assert _sapo_ok(seq) and not _sapo_ok({**seq, "importance_sampling_level": "token"})
    monkeypatch.setitem(trl_checks.AGGREGATION, "sapo", "token_mean")
    assert not _sapo_ok(run)
    # the batch reaches the gate's saturated tail (r > 5) and both sides of r = 1, for both signs of A
    m = run["mask"]
    r = np.exp(run["logp"] - run["old_logp"])[m]
    A = np.broadcast_to(run["advantages"][:, None], m.shape)[m]
    assert (r > 5).any() and ((r < 1) & (A > 0)).any() and ((r > 1) & (A < 0)).any() and ((r < 1) & (A < 0)).any()


SIGMA = 1 / (1 + math.exp(-1))  # sigma(1)


@pytest.mark.parametrize(
    "advantage, ratio, loss, grad",
    [  # loss.sapo.md worked values (tau_pos 1, tau_neg 1.05), through GRPOTrainer._compute_loss; one row of
        # two tokens with the same ratio, so the row's token mean is the token loss and each token's
        # gradient is half of dL/dlogp
        (1.0, 1.0, -2.0, -1.0),
        (-1.0, 1.0, 4 / 1.05 / 2, 1.0),
        (1.0, 2.0, -4 * SIGMA, -8 * SIGMA * (1 - SIGMA)),
        (-1.0, 2.0, 4 / 1.05 / (1 + math.exp(-1.05)), 8 * (1 / (1 + math.exp(-1.05))) * (1 - 1 / (1 + math.exp(-1.05)))),
        (1.0, 0.5, -4 / (1 + math.exp(0.5)), -2 / (1 + math.exp(0.5)) * (1 - 1 / (1 + math.exp(0.5)))),
    ],
)
def test_sapo_worked_example(adapter, advantage, ratio, loss, grad):
    config = {"loss_type": "sapo", "beta": 0.0}
    batch = _tiny_batch(adapter, config, advantage=advantage, ratio=[[1.0]])
    batch["old_per_token_logps"] = batch["old_per_token_logps"] - math.log(ratio)
    run = adapter.grpo_loss(batch, **config)
    assert run["loss"] == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(run["grad_logp"][run["mask"]].numpy(), [grad / 2] * 2, rtol=1e-4)


def test_finding_sapo_tau_is_float32(adapter):
    """grpo_trainer.py:3122 builds tau with torch.where on Python floats: a float32 tensor (torch's
    default dtype) whatever the advantages' dtype, so tau_neg = 1.05 is 1.0499999523 and float64 inputs
    are only float32-precise (loss.sapo.md). A precision matter, not a semantic one: the relative error
    is below float32's epsilon, and the trainer rows here run in float32 anyway."""
    import inspect

    from trl import GRPOTrainer

    line = "torch.where(advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg)"
    assert line in inspect.getsource(GRPOTrainer._compute_loss)
    A = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    tau = torch.where(A > 0, 1.0, 1.05)  # the same expression, TRL's defaults
    assert tau.dtype == torch.float32 and tau[0, 1].item() != 1.05
    assert abs(tau[0, 1].item() - 1.05) / 1.05 < 2**-24


def test_vespo_off_policy_is_the_gamma_weight_not_pg(adapter):
    """Off-policy phi(w) != 1: TRL's vespo run matches vespo_token_loss and not pg_token_loss (its
    on-policy composition), value and gradient."""
    run = trl_checks.run_loss_config(adapter, trl_checks.LossConfig("vespo"), seed=0)
    vespo = trl_checks.compositions(run, on_policy=False)[0]
    assert vespo.spec_id.startswith("loss.vespo") and trl_checks.compare_run(run, vespo).ok
    pg = trl_checks.compositions(run, on_policy=True)[0]
    assert not trl_checks.compare_run(run, pg).ok


def test_normaliser_is_checked(adapter):
    """The dapo run is not the grpo (per-sequence mean) nor the Dr. GRPO composition with the padded width."""
    run = trl_checks.run_loss_config(adapter, trl_checks._cfg("dapo"), seed=0)
    for other in ({"loss_type": "grpo"}, {"loss_type": "dr_grpo", "max_completion_length": trl_checks.C}):
        wrong = {**run, **other}  # TRL's results, composed as another loss type
        result = trl_checks.compare_run(wrong, trl_checks.compositions(wrong, on_policy=False)[0])
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


@pytest.mark.parametrize("cfg", trl_checks.overflow_configs(), ids=lambda c: c.row_id)
def test_finding_unclamped_ratio_overflows_to_nan(adapter, cfg):
    """A loss token with A = 0 and log-ratio 800: GRPOTrainer._compute_loss forms coef_1 = exp(log-ratio)
    unclamped (grpo_trainer.py:3095), inf in float32. PPO (dapo) and GSPO (sequence level) multiply it by
    A = 0 (:3118) and torch.min keeps the NaN (:3120): the loss is NaN. SAPO's gate saturates, so its value
    is finite, but the gradient through exp is 0*inf = NaN (:3123). The spec's composition (oracle, float64)
    is finite: the token contributes 0 to the loss and its gradient is 0."""
    run = trl_checks.run_loss_config(adapter, cfg, seed=0)
    m = run["mask"]
    r, t = trl_checks.OVERFLOW_ROW, trl_checks.P + trl_checks.OVERFLOW_TOKEN
    assert m[r, t] and run["advantages"][r] == 0.0
    assert run["logp"][r, t] - run["old_logp"][r, t] > 88.8  # exp overflows float32 (max ~ e^88.72)
    expected = trl_checks.evaluate(run, trl_checks.compositions(run, on_policy=False)[0])
    assert math.isfinite(expected.loss) and np.isfinite(expected.grad_logp).all() and expected.grad_logp[r, t] == 0.0
    assert np.isnan(run["grad_logp"][r, t]) and np.isnan(run["grad_weight"]).any()
    if cfg.loss_type == "sapo":
        assert run["loss"] == pytest.approx(expected.loss, rel=1e-5)
    else:
        assert math.isnan(run["loss"])


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
    case = make_case("token_entropy_from_hidden", 507326349)
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


def test_finding_bf16_log_softmax_rounds_a_confident_log_prob_to_zero():
    """On the CPU path selective_log_softmax and entropy_from_logits run PyTorch's bfloat16 log_softmax
    (utils.py:582-595, :637-639), which rounds the log-normaliser at the largest logit's scale: on a row of
    bfloat16-exact logits whose largest is 28.125, log p = -0.000546 (float64, by hand) comes out as 0, and the
    entropy (0.004834) loses that token's term, at T = 1 as at T = 1.3 (the temperature is not the cause).
    float32 keeps both."""
    from trl.trainer.utils import selective_log_softmax_and_entropy

    z = torch.tensor([[28.125, 20.5, 18.375, 9.625, -6.4375, -9.25, -9.5]])
    assert torch.equal(z.to(torch.bfloat16).float(), z)
    for T, logp0, H in ((1.0, -0.000546250, 0.004834177), (1.3, -0.003383945, 0.024105067)):
        exact = torch.log_softmax(z.double() / T, -1)
        assert exact[0, 0].item() == pytest.approx(logp0, rel=1e-6)
        assert -(exact.exp() * exact).sum().item() == pytest.approx(H, rel=1e-6)
        lp, ent = selective_log_softmax_and_entropy(z.to(torch.bfloat16), torch.tensor([0]), temperature=T)
        assert lp.item() == 0.0  # rounding the output alone would keep -0.000546 to 2^-9 relative
        assert abs(ent.item() - H) / H > 0.1  # outside the bfloat16 class (rtol 0.008)
        lp32, ent32 = selective_log_softmax_and_entropy(z, torch.tensor([0]), temperature=T)
        # float32: within two float32 ulps of the largest logit (2 * 2^-19 at 28.125: x - log Z is formed there)
        assert lp32.item() == pytest.approx(logp0, abs=4e-6) and ent32.item() == pytest.approx(H, rel=1e-3)


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


# ---------------------------------------------------------------------------------------------
# Spec v1.1: off_policy_sequence_mask (get_off_policy_mask) and rollout_is_weights (TRL's vLLM
# importance-sampling correction through a stubbed vLLM backend)
# ---------------------------------------------------------------------------------------------


def _v11_row(adapter, function):
    record = BY_FUNCTION[function]
    return check_row(record, adapter, seeds=seeds_for(function, 0, 10), golden=golden_cases(record))


def test_off_policy_sequence_mask_row_passes(adapter):
    """GRPOTrainer.get_off_policy_mask is the spec's OPSM for every case, [B] and [B, T] advantages
    (property cases, golden vectors and the mask invariant), at float64 in every dtype: a comparison
    of a mean with the threshold, well-conditioned cases only."""
    row = _v11_row(adapter, "off_policy_sequence_mask")
    assert row.status == "pass", row.message
    assert row.not_implemented_cases == [] and row.checks.get("golden") == "pass"
    assert not row.precision_findings


def test_opsm_worked_example(adapter):
    """offpolicy.opsm.md worked values: old - logp = [0.25, 0.75] on a row, D = 0.5."""
    logp = torch.tensor([[0.0, -1.0, -2.0]], dtype=torch.float64)
    old = logp + torch.tensor([[0.0, 0.25, 0.75]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True]])

    def kept(A, threshold):
        return adapter.off_policy_sequence_mask(logp, old, A, mask, threshold=threshold)[0, 1:].tolist()

    minus = torch.tensor([-1.0], dtype=torch.float64)
    assert kept(minus, 0.4) == [False, False]  # D > 0.4 and A < 0
    assert kept(minus, 0.5) == [True, True]  # D <= 0.5, inclusive
    assert kept(torch.tensor([1.0], dtype=torch.float64), 0.0) == [True, True]
    assert kept(torch.tensor([0.0], dtype=torch.float64), -5.0) == [True, True]  # A = 0 is kept
    assert kept(torch.tensor([[0.0, -1.0, 2.0]], dtype=torch.float64), 0.1) == [False, True]  # per token


def test_rollout_is_weights_row_passes_partially(adapter):
    """TRL's correction, computed by its own _generate_and_score_completions, is the spec's
    rollout_is_weights for every keyword set TRL's four modes express; the rest is not implemented
    (mode='none', seq_stat='geometric', batch_normalize). TRL holds log-probs in float32, so float64
    inputs meet float32 precision: a precision finding, not a semantic one."""
    row = _v11_row(adapter, "rollout_is_weights")
    assert row.status == "pass", row.message
    assert row.not_implemented_cases, "some keyword sets are not TRL modes"
    assert row.checks.get("property") == "pass" and row.checks.get("golden") == "pass"
    found = {f["dtype"]: f for f in row.precision_findings}
    assert set(found) == {"float64"} and found["float64"]["meets"] == "float32", row.precision_findings


RHO = [3.0, 1.0, 0.5, 1.5]


@pytest.mark.parametrize(
    "kwargs, expected",
    [  # offpolicy.is_weights.md worked values
        ({}, [2.0, 1.0, 0.5, 1.5]),
        ({"lo": 0.8}, [2.0, 1.0, 0.8, 1.5]),
        ({"mode": "mask"}, [0.0, 1.0, 0.5, 1.5]),
        ({"mode": "mask", "lo": 0.8}, [0.0, 1.0, 0.0, 1.5]),
        ({"level": "sequence"}, [2.0] * 4),
        ({"level": "sequence", "mode": "mask"}, [0.0] * 4),
        ({"level": "sequence", "mode": "mask", "hi": 3.0}, [2.25] * 4),  # TRL's default mode and clip_max
    ],
)
def test_rollout_is_weights_worked_example(adapter, kwargs, expected):
    old = torch.tensor([[0.0, -1.0, -0.7, -2.0, -0.4, 0.0]], dtype=torch.float64)
    rollout = old.clone()
    rollout[0, 1:5] -= torch.log(torch.tensor(RHO, dtype=torch.float64))
    mask = torch.tensor([[False, True, True, True, True, False]])
    got = adapter.rollout_is_weights(old, rollout, mask, **kwargs)
    assert got[0, 0] == 0 and got[0, 5] == 0  # exactly 0 outside the mask
    np.testing.assert_allclose(got[0, 1:5].numpy(), expected, rtol=2e-6)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "none"},  # every TRL mode bounds the ratio
        {"level": "sequence", "seq_stat": "geometric"},  # TRL's sequence ratio is the product
        {"batch_normalize": True},
        {"log_ratio_clamp": 20.0},
        {"lo": None, "hi": None},  # *_truncate needs a bound (grpo_config.py:1162-1171)
        {"mode": "mask", "lo": 2.0, "hi": 2.0},  # clip_min < clip_max (grpo_config.py:1152-1160)
    ],
)
def test_rollout_is_weights_not_expressible(adapter, kwargs):
    x = torch.zeros(1, 3, dtype=torch.float64)
    with pytest.raises(NotImplementedError):
        adapter.rollout_is_weights(x, x, torch.tensor([[False, True, True]]), **kwargs)


def test_rollout_is_weights_is_computed_by_trl(adapter, monkeypatch):
    """The ratio comes out of GRPOTrainer._generate_and_score_completions (TRL's (B, 1) for sequence
    modes), with TRL's own old_per_token_logps and the env_mask as its tool_mask."""
    from trl import GRPOTrainer

    seen = {}
    original = GRPOTrainer._generate_and_score_completions

    def spy(self, inputs):
        out = original(self, inputs)
        seen.update(out)
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", spy)
    old = torch.tensor([[0.0, -1.0, -2.0, -0.5], [0.0, -0.3, -0.7, -1.1]], dtype=torch.float64)
    rollout = old - torch.tensor([[0.0, 0.4, -0.1, 0.3], [0.0, 0.2, 0.9, 0.1]], dtype=torch.float64)
    mask = torch.tensor([[False, True, True, True], [False, True, False, True]])
    got = adapter.rollout_is_weights(old, rollout, mask, level="sequence", mode="truncate", hi=3.0)
    assert seen["importance_sampling_ratio"].shape == (2, 1)
    assert seen["tool_mask"].tolist() == [[1, 1, 1], [1, 0, 1]]
    np.testing.assert_allclose(seen["importance_sampling_ratio"][:, 0].numpy(), [math.exp(0.6), math.exp(0.3)], rtol=1e-6)
    np.testing.assert_allclose(got[1].numpy(), [0, math.exp(0.3), 0, math.exp(0.3)], rtol=1e-6)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers' deprecation notes on TrainingArguments
def test_use_vllm_needs_vllm_without_the_stub(adapter):
    """Why the stub: GRPOConfig(use_vllm=True) makes GRPOTrainer.__init__ build VLLMGeneration
    (grpo_trainer.py:1105-1138), which raises ImportError without vllm (vllm_generation.py:294-298)."""
    pytest.importorskip("datasets")
    try:
        import vllm  # noqa: F401

        pytest.skip("vllm is installed")
    except ImportError:
        pass
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    world = adapter._world_()
    args = GRPOConfig(output_dir=world._tmp.name + "/no-vllm", per_device_train_batch_size=2, num_generations=2,
                      report_to=[], use_cpu=True, bf16=False, use_vllm=True)
    with pytest.raises(ImportError, match="vLLM is not available"):
        GRPOTrainer(model=world.model_dir, reward_funcs=world._reward, args=args, processing_class=world.tokenizer,
                    train_dataset=Dataset.from_dict({"prompt": ["w0"] * 2}))


# ---------------------------------------------------------------------------------------------
# Rollout corrections inside _compute_loss: where the IS weight and the OPSM mask act
# ---------------------------------------------------------------------------------------------

OFFPOLICY_ROWS = [cfg.row_id for cfg in trl_checks.offpolicy_configs()]


@pytest.mark.parametrize("row_id", OFFPOLICY_ROWS)
def test_offpolicy_rows_tell_the_contrasts_apart(adapter, row_id):
    """Each rollout-correction row is selected by `--only 'offpolicy.*'`, and on the seed-0 batch the
    matched composition is told apart from the correction also weighting the KL term (rows with
    beta > 0) and from rejected tokens (keep*w = 0) leaving the loss mask (rows with such tokens)."""
    cfg = CONFIGS[row_id]
    run = trl_checks.run_loss_config(adapter, cfg, seed=0)
    comps = trl_checks.compositions(run, on_policy=False)
    assert comps[0].spec_id.startswith("offpolicy.")
    matched = next(c for c in comps if trl_checks.compare_run(run, c).ok)
    assert not matched.contrast
    told = trl_checks.contrasts(run, comps, matched)
    lp = oracle.token_logprobs_from_hidden(run["hidden"], run["weight"], run["input_ids"], run["mask"], temperature=run["temperature"])
    rejected = int(((comps[0].correction(lp) == 0) & run["mask"]).sum())
    kl_label = next((k for k in told if k.endswith("correction on the KL term too")), None)
    assert (kl_label is not None) == (run["beta"] > 0)
    if kl_label is not None:
        assert not told[kl_label].ok
    drop_label = next(k for k in told if k.endswith("rejected tokens out of the loss mask"))
    if "token_truncate" in row_id:  # truncation never gives a zero weight: nothing to tell apart
        assert rejected == 0 and told[drop_label].ok
    else:
        assert rejected > 0 and not told[drop_label].ok


def _tiny_batch(adapter, config, *, advantage, ratio, ref_shift=0.5):
    """One row, a 2-token prompt and a 2-token completion, on-policy (old = TRL's own log-probs, so
    r = 1 and the PPO token loss is -A), ref = logp - ref_shift, and the given IS ratio tensor."""
    batch = {
        "prompt_ids": torch.tensor([[5, 6]]),
        "prompt_mask": torch.ones(1, 2, dtype=torch.long),
        "completion_ids": torch.tensor([[7, 8]]),
        "completion_mask": torch.ones(1, 2, dtype=torch.long),
        "advantages": torch.tensor([advantage], dtype=torch.float32),
    }
    logp = adapter.grpo_current_logps(batch, **config)
    batch["old_per_token_logps"] = logp.clone()
    batch["ref_per_token_logps"] = logp - ref_shift
    batch["importance_sampling_ratio"] = torch.tensor(ratio, dtype=torch.float32)
    return batch


VLLM = {"use_vllm": True, "vllm_importance_sampling_correction": True}


def test_minimal_repro_is_weight_is_not_applied_to_the_kl_term(adapter):
    """grpo_trainer.py:3146-3150: per_token_loss * importance_sampling_ratio, then + beta * per_token_kl.
    A = 0 (no policy term), a sequence weight of 0 (sequence_mask rejecting the row): the loss is the
    whole KL term, beta * mean(k3), not 0, and its gradient is the KL's, beta * (1 - e^(ref - logp)) / n."""
    config = dict(loss_type="bnpo", beta=0.04, use_bias_correction_kl=False, **VLLM)
    run = adapter.grpo_loss(_tiny_batch(adapter, config, advantage=0.0, ratio=[[0.0]]), **config)
    k3 = math.exp(-0.5) + 0.5 - 1  # ref - logp = -0.5
    assert run["loss"] == pytest.approx(0.04 * k3, rel=1e-5)  # would be 0 if the weight multiplied the KL
    g = run["grad_logp"][run["mask"]].numpy()
    np.testing.assert_allclose(g, 0.04 * (1 - math.exp(-0.5)) / 2, rtol=1e-5)
    # the ratio is read only when use_vllm is on (:3146): the same batch without it gives the same loss here,
    # and with A = 1 the zero weight removes the policy term only with use_vllm
    plain = {"loss_type": "bnpo", "beta": 0.04, "use_bias_correction_kl": False}
    with_policy = adapter.grpo_loss(_tiny_batch(adapter, config, advantage=1.0, ratio=[[0.0]]), **config)
    without_vllm = adapter.grpo_loss(_tiny_batch(adapter, plain, advantage=1.0, ratio=[[0.0]]), **plain)
    assert with_policy["loss"] == pytest.approx(0.04 * k3, rel=1e-5)
    assert without_vllm["loss"] == pytest.approx(-1 + 0.04 * k3, rel=1e-5)


def test_minimal_repro_rejected_tokens_count_in_the_denominator(adapter):
    """bnpo divides by _compute_loss's mask.sum() (:3159), the loss mask before any correction: with
    A = 1 on-policy (PPO token loss -1) and token weights [0, 1], the loss is (0*-1 + 1*-1) / 2 = -0.5,
    not -1 (the mean over the kept token). OPSM is the same multiplication (:3140-3141)."""
    config = dict(loss_type="bnpo", beta=0.0, **VLLM)
    run = adapter.grpo_loss(_tiny_batch(adapter, config, advantage=1.0, ratio=[[0.0, 1.0]]), **config)
    assert run["loss"] == pytest.approx(-0.5, rel=1e-5)
    np.testing.assert_allclose(run["grad_logp"][run["mask"]].numpy(), [0.0, -0.5], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Spec v1.1 entropy terms and controllers: get_high_entropy_mask (core row and over simulated ranks),
# the bonus's aggregation, the adaptive entropy controller of _compute_loss
# ---------------------------------------------------------------------------------------------


def test_entropy_top_mask_row_passes_with_partition(adapter):
    """TRL's get_high_entropy_mask with the batch's pool gathered (SimulatedRanks): canonical, and the
    parts of a batch (each given the pool) give the whole batch's mask: the quantile is global."""
    record = BY_FUNCTION["entropy_top_mask"]
    row = check_row(record, adapter, seeds=seeds_for("entropy_top_mask", 0, 8), golden=golden_cases(record))
    assert row.status == "pass", row.message
    assert row.checks.get("invariant:partition") == "pass" and row.checks.get("property") == "pass", row.checks


def test_simulated_ranks_pad_and_gather_like_accelerate(adapter):
    from conformance.frameworks.trl.adapter import SimulatedRanks

    ranks = SimulatedRanks([torch.tensor([5.0, 6.0, 7.0])], rank=1)
    mine = ranks.pad_across_processes(torch.tensor([1.0]), dim=0, pad_index=-1e9)
    assert mine.tolist() == [1.0, -1e9, -1e9]
    assert ranks.gather(mine).tolist() == [5.0, 6.0, 7.0, 1.0, -1e9, -1e9]  # rank order: the other rank first


def test_per_rank_quantile_is_told_apart():
    """The multi-rank batches are built so that the ranks' own quantiles differ from the batch's: a
    per-rank implementation cannot pass the trl.get_high_entropy_mask rows."""
    for rho in trl_checks.ENTROPY_MASK_RHOS:
        for s in seeds_for(f"trl.get_high_entropy_mask[ranks=3,rho={rho:g}]", 0, trl_checks.N_MASK_SEEDS):
            H, m = trl_checks.entropy_mask_batch(s, rho)
            whole = oracle.entropy_top_mask(H, m, rho=rho)
            per_rank = np.concatenate([oracle.entropy_top_mask(H[a:b], m[a:b], rho=rho) for a, b in trl_checks.MASK_RANKS])
            assert not np.array_equal(whole, per_rank), (rho, s)


ENTROPY_ROWS = {  # trl_checks entropy rows -> status (trl 1.16.0)
    # the all-gather makes the quantile the batch's: canonical on every rank
    "trl.get_high_entropy_mask[ranks=3,rho=0.2]": "pass",
    "trl.get_high_entropy_mask[ranks=3,rho=0.5]": "pass",
    "trl.get_high_entropy_mask[ranks=3,rho=0.8]": "pass",
    # finding: torch.quantile refuses more than 2**24 elements, so a batch with more valid tokens over all
    # ranks raises (grpo_trainer.py:1413)
    "trl.get_high_entropy_mask[pool>2^24]": "error",
    # _compute_loss's adaptive entropy control (:3206-3240) = entropy_coef_update / entropy_coef_applied
    "trl.adaptive_entropy[rises,applied]": "pass",
    "trl.adaptive_entropy[falls,first step]": "pass",
    "trl.adaptive_entropy[rises to coef_max,applied]": "pass",
    "trl.adaptive_entropy[falls to coef_min,applied]": "pass",
    "trl.adaptive_entropy[falls,not applied]": "pass",
    "trl.adaptive_entropy[top_entropy_quantile=0.2]": "pass",
}


def _entropy_rows(adapter):
    rows = [trl_checks.entropy_mask_row(adapter, rho, 0) for rho in trl_checks.ENTROPY_MASK_RHOS]
    rows.append(trl_checks.entropy_mask_pool_limit_row(adapter))
    rows += [trl_checks.adaptive_entropy_row(adapter, case, 0) for case in trl_checks.adaptive_entropy_cases()]
    return {row.id: row for row in rows}


def test_entropy_rows(adapter):
    rows = _entropy_rows(adapter)
    assert set(rows) == set(ENTROPY_ROWS)
    for row_id, status in ENTROPY_ROWS.items():
        assert rows[row_id].status == status, f"{row_id}: {rows[row_id].message}"
    assert "quantile() input tensor is too large" in rows["trl.get_high_entropy_mask[pool>2^24]"].message
    for row_id in ENTROPY_ROWS:
        if row_id.startswith("trl.adaptive_entropy"):
            assert set(rows[row_id].checks) == {"measured entropy", "entropy_coef after the step", "entropy_coef applied"}


def test_adaptive_rows_tell_the_gate_and_the_clamps_apart(adapter):
    """Each adaptive row fails against the mutants of the controller: a gate that always applies, an update
    without its clamps (the case that reaches a bound)."""
    import conformance.mutants.entropy_coef_applied_above_target as gate

    by_label = {c.label: c for c in trl_checks.adaptive_entropy_cases()}
    original = oracle.entropy_coef_applied
    try:
        oracle.entropy_coef_applied = gate.entropy_coef_applied
        assert trl_checks.adaptive_entropy_row(adapter, by_label["falls,first step"], 0).status == "fail"
    finally:
        oracle.entropy_coef_applied = original
    original_update = oracle.entropy_coef_update

    def unclamped(coef, H, *, target=0.2, delta=0.005, coef_min=0.0, coef_max=1.0):
        return coef + delta if H <= target else coef - delta

    try:
        oracle.entropy_coef_update = unclamped
        assert trl_checks.adaptive_entropy_row(adapter, by_label["rises to coef_max,applied"], 0).status == "fail"
        assert trl_checks.adaptive_entropy_row(adapter, by_label["falls to coef_min,applied"], 0).status == "fail"
    finally:
        oracle.entropy_coef_update = original_update


def test_entropy_bonus_is_a_token_mean_whatever_loss_type(adapter, monkeypatch):
    """grpo reduces its policy term seq_mean_token_mean; the bonus aggregated that way too would not match
    TRL's gradient w.r.t. the entropies (the batch's rows hold 5, 2, 1 and 3 loss tokens)."""
    cfg = CONFIGS["trl.grpo_loss[grpo,entropy_coef=0.01,beta=0]"]
    run = trl_checks.run_loss_config(adapter, cfg, seed=0)
    comp = trl_checks.compositions(run, on_policy=False)[0]
    assert trl_checks.compare_run(run, comp).ok
    real_bonus, real_grad = oracle.entropy_bonus, oracle.entropy_bonus_grad
    monkeypatch.setattr(oracle, "entropy_bonus", lambda H, m, **kw: real_bonus(H, m, **{**kw, "mode": "seq_mean_token_mean"}))
    monkeypatch.setattr(oracle, "entropy_bonus_grad",
                        lambda H, m, u, **kw: real_grad(H, m, u, **{**kw, "mode": "seq_mean_token_mean"}))
    result = trl_checks.compare_run(run, comp)
    assert not result.ok and result.checks["grad[entropy]"] == "fail"


def test_top_entropy_mask_multiplies_the_policy_term(adapter):
    """Without the keep mask the composition does not match TRL's top_entropy_quantile=0.2 run (the mask
    drops 80% of the policy tokens; they still count in num_items_in_batch)."""
    run = trl_checks.run_loss_config(adapter, CONFIGS["trl.grpo_loss[dapo,top_entropy_quantile=0.2,beta=0]"], seed=0)
    comp = trl_checks.compositions(run, on_policy=False)[0]
    assert trl_checks.compare_run(run, comp).ok
    H, keep = trl_checks.entropy_terms(run)
    assert 0 < keep.sum() < run["mask"].sum()
    unmasked = dict(run, top_entropy_quantile=1.0)
    assert not trl_checks.compare_run(unmasked, trl_checks.compositions(unmasked, on_policy=False)[0]).ok


# ---------------------------------------------------------------------------------------------
# Spec v1.1 reward.overlong: trl.rewards.get_soft_overlong_punishment (a reward function)
# ---------------------------------------------------------------------------------------------


def test_soft_overlong_docstring_example(adapter):
    """other_rewards.py:107-110: max_completion_len 100, soft_punish_cache 20, 90 tokens -> -0.5; DAPO eq. 13
    by hand around both boundaries (80: 0, 81: -1/20, 100: -1, 101: -1)."""
    ids = [[1] * n for n in (90, 80, 81, 100, 101, 0)]
    assert adapter.soft_overlong_punishment(ids, 100, 20) == [-0.5, 0.0, -0.05, -1.0, -1.0, 0.0]
    # soft_punish_cache 0: the hard step at max_completion_len
    assert adapter.soft_overlong_punishment([[1] * 8, [1] * 9], 8, 0) == [0.0, -1.0]


def test_soft_overlong_row_is_the_floor_form(adapter):
    row = trl_checks.soft_overlong_row(adapter)
    assert row.status == "pass", row.message
    assert row.spec_id == "reward.overlong" and "not 'the no-floor line'" in row.message


def test_overlong_penalty_core_row(adapter):
    """Canonical (the floor beyond max_completion_len) wherever factor = 1; TRL has no factor, so the other
    cases are "not implemented", named."""
    record = BY_FUNCTION["overlong_penalty"]
    row = check_row(record, adapter, seeds=seeds_for("overlong_penalty", 0, 12), golden=golden_cases(record))
    assert row.status == "pass" and row.matched_kwargs is None, row.message
    assert row.not_implemented_cases and all("has no factor" in c for c in row.not_implemented_cases)
    assert not row.precision_findings
