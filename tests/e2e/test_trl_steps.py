"""Trainer-level conformance of TRL (``rlspec e2e --trainer trl``): TRL's GRPOTrainer trained a few steps on the
tiny Llama and digit task with the TRL recorder, its trace replayed (one row per link).

The defaults cover a fresh batch (ratio 1) and a reused one (num_iterations 2: TRL's recomputed pi_old in use),
beta > 0 (the reference model and TRL's default KL form, K3 x ratio) and a temperature != 1. Three steps: step 2
generates with the weights of two updates, so pi_old and the reference (the initial model) differ there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

from conformance.cli import main as cli_main  # noqa: E402
from conformance.trace.replay import replay  # noqa: E402

CHECKED = ("sampling", "mask", "logp", "old_logp", "ref_logp", "entropy", "advantages", "grad", "loss", "probe")


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict, Path]:
    d = tmp_path_factory.mktemp("e2e_trl")
    code = cli_main(["e2e", "--trainer", "trl", "--steps", "3", "--seed", "1", "--json", str(d / "e2e.json"),
                     "--trace", str(d / "trace")])
    return code, json.loads((d / "e2e.json").read_text()), d / "trace" / "e2e"


def test_every_link_is_checked_and_conforms(e2e):
    code, report, trace = e2e
    assert code == 0 and report["ok"] and report["adapters"][0]["name"] == "trl"
    by_id = {c["id"]: c for c in report["checks"]}
    for link in CHECKED:
        assert by_id[f"trl.trace.{link}"]["status"] == "pass", (link, by_id[f"trl.trace.{link}"])
    manifest = json.loads((trace / "step-000001" / "manifest.json").read_text())
    assert manifest["config"]["kl_gradient"] == "bias_corrected" and manifest["config"]["kl_coef"] == 0.04
    assert manifest["config"]["sampling"]["temperature"] == 0.7


def test_the_replay_sees_a_wrong_temperature(e2e, tmp_path):
    """The trace claimed at temperature 1 (what an implementation that forgot the temperature would compute):
    every forward link and the sampler's fail."""
    import shutil

    _, _, trace = e2e
    edited = tmp_path / "t1"
    shutil.copytree(trace, edited)
    for manifest in edited.glob("step-*/manifest.json"):
        data = json.loads(manifest.read_text())
        data["config"]["temperature"] = 1.0
        manifest.write_text(json.dumps(data))
    rows = {r.function: r for r in replay(str(edited))[1]}
    for link in ("sampling", "logp", "old_logp", "ref_logp", "entropy", "probe"):
        assert rows[f"trace.{link}"].status == "fail", link
    assert "sampling temperature 0.7, log-probs at temperature 1.0" in rows["trace.sampling"].message


def test_the_replay_names_reference_log_probs_used_as_old_ones(e2e, tmp_path):
    """Step 2's old_logp overwritten with its ref_logp (the classic swap): the old_logp link names it."""
    import shutil

    from safetensors.numpy import load_file, save_file

    _, _, trace = e2e
    edited = tmp_path / "swapped"
    shutil.copytree(trace, edited)
    for f in (edited / "step-000002").glob("*-mb*.safetensors"):
        t = load_file(str(f))
        t["old_logp"] = t["ref_logp"].copy()
        save_file(t, str(f))
    row = next(r for r in replay(str(edited))[1] if r.function == "trace.old_logp")
    assert row.status == "fail" and "step 2" in row.message, row.message
    assert "old_logp are the log-probs of the reference policy" in row.message, row.message


def test_cli_one_iteration_has_no_recomputed_old_policy(tmp_path, capsys):
    path = tmp_path / "e2e.json"
    assert cli_main(["e2e", "--trainer", "trl", "--steps", "1", "--num-iterations", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "trl.trace.grad" in out and "spec id" in out
    by_id = {c["id"]: c for c in json.loads(path.read_text())["checks"]}
    # num_iterations = 1: TRL uses the loss forward's own log-probs as pi_old (no forward of its own)
    assert by_id["trl.trace.old_logp"]["status"] == "not_implemented"
    assert by_id["trl.trace.grad"]["status"] == "pass"


def test_cli_inexpressible_configuration_is_a_clear_error(capsys):
    code = cli_main(["e2e", "--trainer", "trl", "--steps", "1", "--importance-sampling-level", "sequence",
                     "--use-bias-correction-kl", "true"])
    assert code == 2
    err = capsys.readouterr().err
    assert "rlspec e2e: trl: use_bias_correction_kl: with importance_sampling_level='sequence'" in err, err
