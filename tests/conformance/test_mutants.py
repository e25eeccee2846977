"""The mutation catalogue: every known-bug mutant is caught by the suite, fails exactly the checks it
declares, and is diagnosed as itself; the refimpl has no false positive; a new mutant is one file;
the diagnosis generalises to independently written buggy adapters (torch and NumPy)."""

from __future__ import annotations

import json
import sys
import textwrap
import types

import numpy as np
import pytest
import torch

import oracle
import refimpl
from conformance import cli
from conformance.runner.builtin import oracle_adapter, refimpl_adapter
from conformance.commands import mutants as mutants_cmd
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions
from conformance.runner.diagnosis import PATTERN_ONLY, signature_fits
from conformance.mutants import all_mutants, by_name, discover, mutants_table_markdown
from conformance.records import BY_FUNCTION
from conformance.runner import report as reports
from conformance.runner.rows import RowResult

MUTANTS = all_mutants()
NAMES = [m.name for m in MUTANTS]

# bug-catalogue classes expressible on the core API (the others need a model, a sampler, packing or
# a distributed run: 5, 17, 18, 24; 19 is covered through GAE, 23 and 25 through log-probs)
EXPRESSIBLE_CLASSES = {1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 19, 20, 21, 22, 23, 25, 26, 27,
                       28, 29, 30, 31, 32}


@pytest.fixture(scope="module")
def results() -> dict[str, mutants_cmd.MutantResult]:
    report = mutants_cmd.run_mutants(refimpl=False)
    return {r.name: r for r in report.results}


# ---------------------------------------------------------------------------------------------
# The catalogue itself
# ---------------------------------------------------------------------------------------------


def test_at_least_30_mutants_covering_every_expressible_class():
    assert len(MUTANTS) >= 30
    assert EXPRESSIBLE_CLASSES <= {m.catalogue for m in MUTANTS}


@pytest.mark.parametrize("name", NAMES)
def test_mutant_is_documented_and_well_formed(name):
    m = by_name(name)
    assert len(m.doc) > 80, "the module docstring says what the bug is and where it happened"
    assert m.cites and all(isinstance(c, str) and c for c in m.cites)
    assert set(m.signature) <= set(m.replace) and m.signature, "declares which checks fail"
    for fn in m.replace:
        assert fn in BY_FUNCTION
    adapter = m.adapter()
    assert adapter.name == f"mutant:{name}"
    untouched = set(refimpl.__all__) - set(m.replace)
    assert all(getattr(adapter, fn) is getattr(refimpl_adapter(), fn) for fn in untouched)


def test_bug_class_sentences_are_unique():
    classes = [m.bug_class for m in MUTANTS]
    assert len(set(classes)) == len(classes)


def test_table_lists_every_mutant():
    table = mutants_table_markdown()
    assert table.count("\n") == len(MUTANTS) + 2
    for m in MUTANTS:
        assert f"`{m.name}`" in table


# ---------------------------------------------------------------------------------------------
# Caught, as declared, diagnosed (the reference run: seed 0, 8 seeds)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_mutant_is_caught_as_declared_and_diagnosed(results, name):
    r = results[name]
    assert r.caught, f"{name} MISSED: rows {r.rows}"
    assert r.as_declared, f"{name}: declared {r.declared}, observed {r.observed}"
    assert r.diagnosed, f"{name}: its own class is not among consistent_with"
    assert not r.other_classes, f"{name}: also consistent with {r.other_classes}"


def test_refimpl_has_no_false_positives():
    fps = mutants_cmd.refimpl_false_positives(seed=0, n_seeds=8, timeout=120.0)
    assert fps == [], "refimpl rows that fail: " + json.dumps(fps, indent=1)


def test_cli_prints_the_summary_and_writes_json(tmp_path, capsys):
    path = tmp_path / "mutants.json"
    code = cli.main(["mutants", "--only", "kl_*", "--only", "agg_local*", "--no-refimpl", "--json", str(path)])
    out = capsys.readouterr().out
    n = len([m for m in NAMES if m.startswith("kl_") or m.startswith("agg_local")])
    assert f"caught {n}/{n}, diagnosed {n}/{n}" in out
    assert code == 0
    data = json.loads(path.read_text())
    assert data["schema"] == "mutants-v1" and data["total"] == n and data["ok"]
    assert all(m["caught"] and m["diagnosed"] and m["as_declared"] for m in data["mutants"])
    assert cli.main(["mutants", "--only", "no-such-mutant*", "--no-refimpl"]) == 2


# ---------------------------------------------------------------------------------------------
# Adding a mutant is one file: discovery, checks and diagnosis need nothing else
# ---------------------------------------------------------------------------------------------

NEW_MUTANT = '''
"""A test-only mutant: the policy-gradient loss with the advantage's sign flipped (+A·logp), as when
a reward is used where a cost was expected. Written for test_mutants.py; cites a made-up place."""

import refimpl
from conformance.mutants.base import Mutant


def pg_token_loss(logp, advantages, mask):
    return -refimpl.pg_token_loss(logp, advantages, mask)


MUTANT = Mutant(
    name="zz_test_pg_sign",
    bug_class="test-only: policy-gradient loss with the advantage sign flipped",
    catalogue=7,
    cites=("tests/conformance/test_mutants.py",),
    signature={"pg_token_loss": ("property", "golden")},
    replace={"pg_token_loss": pg_token_loss},
)
'''


def test_a_new_mutant_file_is_discovered_checked_and_diagnosed(tmp_path, monkeypatch):
    import conformance.mutants as package

    (tmp_path / "zz_test_pg_sign.py").write_text(textwrap.dedent(NEW_MUTANT))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    try:
        found = discover()
        assert [m.name for m in found] == sorted(NAMES + ["zz_test_pg_sign"])
        new = next(m for m in found if m.name == "zz_test_pg_sign")
        result = mutants_cmd.evaluate(new, seed=0, n_seeds=4, timeout=60.0)
        assert result.caught and result.first_failure == "pg_token_loss: property"
        # the packaged catalogue does not know it: the row is diagnosed against all_mutants()
        report = run([new.adapter()], select_records(["loss.pg"]), RunOptions(seed=0, n_seeds=4, timeout=60.0))
        assert report.rows[0].status == "fail"
        from conformance.runner.diagnosis import diagnose

        assert diagnose(BY_FUNCTION["pg_token_loss"], report.rows[0], found) == [new.label()]
    finally:
        sys.modules.pop("conformance.mutants.zz_test_pg_sign", None)


def test_malformed_mutant_is_rejected(tmp_path, monkeypatch):
    import conformance.mutants as package

    bad = NEW_MUTANT.replace('name="zz_test_pg_sign"', 'name="zz_bad"').replace(
        '{"pg_token_loss": ("property", "golden")}', '{"ppo_token_loss": ("property",)}')
    (tmp_path / "zz_bad.py").write_text(textwrap.dedent(bad))
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match="declares failures of 'ppo_token_loss'"):
            discover()
    finally:
        sys.modules.pop("conformance.mutants.zz_bad", None)


def test_mutant_loads_as_an_adapter_by_path(capsys):
    code = cli.main(["check", "--adapter", "conformance.mutants.adapters:kl_sign_flipped", "--only", "loss.policy",
                     "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "consistent with: " + by_name("kl_sign_flipped").label() in out


# ---------------------------------------------------------------------------------------------
# Diagnosis of independently written buggy adapters (not the mutants' code)
# ---------------------------------------------------------------------------------------------


def _torch_adapter(name: str, **functions) -> types.SimpleNamespace:
    base = vars(refimpl_adapter()).copy()
    base.update(name=name, accepts_variants=False, **functions)
    return types.SimpleNamespace(**base)


def _row(adapter, spec_glob: str) -> RowResult:
    report = run([adapter], select_records([spec_glob]), RunOptions(seed=0, n_seeds=8, timeout=60.0))
    return report.rows[0]


def test_diagnoses_an_independent_torch_implementation_without_temperature():
    def token_logprobs(logits, input_ids, mask, *, temperature=1.0):  # a trainer's own code
        m = mask.bool()
        work = torch.float64 if logits.dtype == torch.float64 else torch.float32
        z = torch.where(m[:, 1:].unsqueeze(-1), logits[:, :-1].to(work), 0.0)  # rows predicting a valid token
        ids = torch.where(m[:, 1:], input_ids[:, 1:], 0)
        picked = torch.log_softmax(z, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        out = torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)
        return torch.where(m, out, 0.0).to(logits.dtype)

    row = _row(_torch_adapter("my-trainer", token_logprobs=token_logprobs), "logprob.token")
    assert row.status == "fail"
    assert row.consistent_with == [by_name("logprob_temperature_missing").label()]


def test_diagnoses_an_independent_numpy_implementation_with_miswired_scales():
    wiring = {"group": "none", "none": "group", "batch": "group"}
    base = vars(oracle_adapter()).copy()

    def grpo_advantages(rewards, group_size, *, scale="group"):  # a NumPy framework's own code
        r = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
        centered = r - r.mean(axis=1, keepdims=True)
        if wiring[scale] == "none":
            return centered.reshape(-1)
        std = r.std(axis=1, ddof=1, keepdims=True) if group_size > 1 else np.zeros_like(r)
        return (centered / (std + 1e-6)).reshape(-1)

    base.update(name="np-framework", accepts_variants=False, grpo_advantages=grpo_advantages)
    row = _row(types.SimpleNamespace(**base), "adv.grpo")
    assert row.status == "fail"
    assert row.consistent_with == [by_name("grpo_scale_miswired").label()]


def test_unknown_bug_gets_pattern_only_hints_or_nothing():
    def gae(token_rewards, values, mask, *, gamma=1.0, lam=1.0):  # off by a constant: no known bug
        A, R = refimpl.gae(token_rewards, values, mask, gamma=gamma, lam=lam)
        m = mask.bool()
        return (torch.where(m, A + 0.5, 0.0).detach(), torch.where(m, R + 0.5, 0.0).detach())

    row = _row(_torch_adapter("odd", gae=gae), "adv.gae")
    assert row.status == "fail"
    assert row.consistent_with == []  # nothing reproduces the outputs: no diagnosis shown
    assert row.pattern_hints and all(c.endswith(PATTERN_ONLY) for c in row.pattern_hints)
    assert by_name("gae_reset_at_tool_mask").label() + PATTERN_ONLY in row.pattern_hints
    shown, explained = reports.row_details(row), reports.row_details(row, explain=True)
    assert not any(PATTERN_ONLY in line for line in shown)
    assert any("rlspec check --explain" in line for line in shown)
    assert any(by_name("gae_reset_at_tool_mask").label() in line for line in explained)


def test_signature_fit_compares_metamorphic_checks_exactly():
    row = RowResult(id="f@a", spec_id="s", function="f", adapter="a", status="fail",
                    checks={"property": "fail", "invariant:mask": "pass", "golden": "pass"})
    assert signature_fits(row, ("property", "golden"))
    assert signature_fits(row, ("golden", "invariant:on_policy"))  # which value check fails depends on inputs
    assert not signature_fits(row, ("property", "invariant:mask"))  # mask leak declared, not observed
    assert not signature_fits(row, ("invariant:partition",))  # partition did not run here: no value failure
    row.checks["invariant:mask"] = "error"
    assert signature_fits(row, ("property", "invariant:mask"))


# ---------------------------------------------------------------------------------------------
# The new checks
# ---------------------------------------------------------------------------------------------


def test_partition_check_is_not_implemented_for_an_aggregate_without_global_counts():
    def aggregate(token_loss, mask, *, mode, norm_length=None):
        return refimpl.aggregate(token_loss, mask, mode=mode, norm_length=norm_length)

    row = _row(_torch_adapter("no-counts", aggregate=aggregate), "agg")
    assert row.checks["invariant:partition"] == "not_implemented"
    assert row.status == "pass"


def test_detached_check_runs_for_torch_adapters_only():
    checks = {r.adapter: r.checks for r in run(["oracle", "refimpl"], select_records(["loss.value"]), RunOptions(seed=0, n_seeds=2, timeout=60.0)).rows}
    assert "invariant:detached" not in checks["oracle"]
    assert checks["refimpl"]["invariant:detached"] == "pass"


def test_new_quantities_agree_with_hand_values():
    m = torch.tensor([[False, True, True, True, True]])
    d = torch.tensor([[0.0, np.log(1.5), -np.log(2.0), -np.log(2.0), np.log(1.5)]], dtype=torch.float64)
    old = torch.full((1, 5), -3.0, dtype=torch.float64)
    A = torch.tensor([[0.0, 1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    assert refimpl.ppo_clipped_mask(old + d, old, A, m).tolist() == [[0.0, 1.0, 0.0, 1.0, 0.0]]
    assert oracle.ppo_clipped_mask((old + d).numpy(), old.numpy(), A.numpy(), m.numpy()).tolist() == [[0, 1, 0, 1, 0]]
    # kl added, not subtracted: A = 0 and ratio 1 leave kl_coef * mean k3 > 0
    ref = old - torch.tensor([[0.0, -1.0, 1.0, 0.5, -0.5]], dtype=torch.float64)
    loss = refimpl.policy_loss(old, old, ref, torch.zeros(1, dtype=torch.float64), m, kl_coef=1.0)
    dd = np.array([-1.0, 1.0, 0.5, -0.5])
    assert float(loss) == pytest.approx(float(np.mean(np.expm1(-dd) + dd)), rel=1e-12)
