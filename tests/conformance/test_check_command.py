"""`rlspec check`, its reports, `list`, `explain`, `repro` and the pytest plugin."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conformance.runner import report as reports
from conformance.cli import main
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions
from conformance.runner.partition import MODES as PARTITION_MODES
from conformance.records import RECORDS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = "tests.conformance.example_adapters"


@pytest.fixture(scope="module")
def builtin_outputs(tmp_path_factory):
    out = tmp_path_factory.mktemp("check")
    code = main([
        "check", "--adapter", "oracle", "--adapter", "refimpl", "--n-seeds", "3", "--no-progress",
        "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md"),
    ])
    return code, out


def test_builtin_adapters_all_pass(builtin_outputs):
    code, out = builtin_outputs
    data = json.loads((out / "r.json").read_text())
    statuses = {(c["function"], c["adapter"]): c["status"] for c in data["checks"]}
    assert code == 0
    assert len(statuses) == 2 * (len(RECORDS) + len(PARTITION_MODES))  # + the agg.partition[<mode>] rows
    assert set(statuses.values()) == {"pass"}, {k: v for k, v in statuses.items() if v != "pass"}


def test_json_report_validates_against_schema(builtin_outputs):
    _, out = builtin_outputs
    schema = json.loads(reports.SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    data = json.loads((out / "r.json").read_text())
    jsonschema.validate(data, schema)
    assert data["suite_version"] and data["spec_version"] == "v1"
    assert {a["name"] for a in data["adapters"]} == {"oracle", "refimpl"}
    assert all(c["seeds"] for c in data["checks"]), "every row records the seeds that reproduce it"


def test_junit_report_is_well_formed(builtin_outputs):
    _, out = builtin_outputs
    root = ET.parse(out / "r.xml").getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert {s.get("name") for s in suites} == {"rlspec.oracle", "rlspec.refimpl"}
    for suite in suites:
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases) == len(RECORDS) + len(PARTITION_MODES)
        assert int(suite.get("failures")) == int(suite.get("errors")) == 0
        for case in cases:
            assert case.get("classname") and case.get("name") and float(case.get("time")) >= 0


def test_markdown_report_has_the_table(builtin_outputs):
    _, out = builtin_outputs
    text = (out / "r.md").read_text()
    # each cell: the verdict, then the cases it rests on (property/golden/invariant/preset)
    (line,) = [x for x in text.splitlines() if x.startswith("| `adv.grpo` | `grpo_advantages` |")]
    cells = [c.strip() for c in line.strip("|").split("|")][2:]
    assert len(cells) == 2 and all(re.fullmatch(r"pass \[\d+/\d+/\d+/\d+\]", c) for c in cells), cells
    assert "[cases: property/golden/invariant/preset]" in text


def test_broken_adapter_fails_with_a_useful_message():
    records = select_records(["logprob.token", "adv.grpo"])
    rep = run([f"{EXAMPLES}:broken"], records, RunOptions(seed=0, n_seeds=4, timeout=60))
    rows = {r.function: r for r in rep.rows}
    assert rows["grpo_advantages"].status == "pass"
    bad = rows["token_logprobs"]
    assert bad.status == "fail"
    # names the quantity, spec id, adapter, dtype, shapes, errors with index, and a repro command
    for fragment in ("token_logprobs", "spec logprob.token", "adapter=broken", "inputs: logits=[",
                     "greatest absolute difference", "at index", "Reproduce: rlspec repro token_logprobs --"):
        assert fragment in bad.message, fragment
    assert not rep.ok
    assert "FAIL" in reports.render_table(rep)


def test_missing_functions_are_not_implemented_never_pass():
    rep = run([f"{EXAMPLES}:partial"], select_records(["adv.*"]), RunOptions(seed=0, n_seeds=2, timeout=60))
    rows = {r.function: r.status for r in rep.rows}
    assert rows["grpo_advantages"] == "pass"
    assert rows["rloo_advantages"] == rows["reinforce_advantages"] == rows["gae"] == "not_implemented"
    assert rep.ok


def test_misbehaving_adapter_gets_error_rows_and_the_run_completes():
    records = select_records(["adv.rloo", "adv.reinforce", "adv.grpo", "loss.pg"])
    rep = run([f"{EXAMPLES}:misbehaving"], records, RunOptions(seed=0, n_seeds=2, timeout=2))
    rows = {r.function: r for r in rep.rows}
    assert rows["rloo_advantages"].status == "error" and "adapter exploded" in rows["rloo_advantages"].message
    assert rows["reinforce_advantages"].status == "error" and "timed out" in rows["reinforce_advantages"].message
    assert rows["grpo_advantages"].status == "fail" and "shape" in rows["grpo_advantages"].message
    assert rows["pg_token_loss"].status == "not_implemented"


def test_unknown_adapter_is_reported_not_crashing():
    rep = run(["no_such_module_xyz:Adapter"], select_records(["adv.grpo"]), RunOptions(seed=0, n_seeds=1, timeout=5))
    assert rep.adapters[0].status == "not_installed"
    assert rep.rows == []


def test_list_and_explain(capsys):
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    for q in RECORDS:
        assert q.spec_id in listed and q.function in listed
    assert main(["explain", "adv.gae"]) == 0
    text = capsys.readouterr().out
    assert "## Equation" in text and "## Edge cases" in text
    assert main(["explain", "agg.token_mean"]) == 0
    assert main(["explain", "nope.nothing"]) == 2


def test_repro_reruns_one_comparison(capsys):
    assert main(["repro", "grpo_advantages", "--seed", "7", "--dtype", "float32"]) == 0
    assert "status: pass" in capsys.readouterr().out
    assert main(["repro", "token_logprobs", "--seed", "3", "--adapter", f"{EXAMPLES}:broken", "--kw", "temperature=0.5"]) == 1


def test_pytest_plugin_runs_the_suite_against_an_adapter(tmp_path):
    def run(*extra):
        return subprocess.run(
            [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-q", "-p", "no:cacheprovider",
             "--rlspec-only", "adv.grpo", "--rlspec-only", "logprob.token", "--rlspec-n-seeds", "2", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )

    good = run("--rlspec-adapter", "refimpl")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "2 passed" in good.stdout
    bad = run("--rlspec-adapter", f"{EXAMPLES}:broken")
    assert bad.returncode == 1
    assert "1 failed, 1 passed" in bad.stdout
    missing = run()
    assert missing.returncode != 0 and "no adapter given" in (missing.stdout + missing.stderr)


def _plugin_and_check_rows(tmp_path: Path, adapter: str, only: tuple[str, ...]) -> tuple[dict, dict]:
    """The JSON rows (id -> (status, matched preset, precision findings)) that the pytest plugin and
    `rlspec check` give for the same adapter, quantities and seeds."""
    selection = [a for glob in only for a in ("--only", glob)]
    plugin_json, check_json = tmp_path / "plugin.json", tmp_path / "check.json"
    plugin = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "conformance", "-q", "-p", "no:cacheprovider",
         "--rlspec-adapter", adapter, "--rlspec-n-seeds", "3", "--rlspec-json", str(plugin_json),
         *[a for glob in only for a in ("--rlspec-only", glob)]],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert plugin_json.exists(), plugin.stdout + plugin.stderr
    check = subprocess.run([sys.executable, "-m", "conformance.cli", "check", "--adapter", adapter, "--n-seeds", "3",
                            "--no-progress", "--json", str(check_json), *selection],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert check.returncode in (0, 1), check.stdout + check.stderr
    assert (plugin.returncode == 0) == (check.returncode == 0), (plugin.stdout, check.stdout)

    def rows(path: Path) -> dict:
        return {r["id"]: (r["status"], r["matched_preset"], len(r["precision_findings"]))
                for r in json.loads(path.read_text())["checks"]}

    return rows(plugin_json), rows(check_json)


def test_the_pytest_plugin_and_rlspec_check_give_the_same_rows(tmp_path):
    """refimpl: every row kind of the selection (property and golden rows, the invariants, the
    agg.partition rows) the same in both, row by row."""
    plugin, check = _plugin_and_check_rows(tmp_path, "refimpl", ("adv.grpo", "loss.ppo", "agg.*"))
    assert any(i.startswith("agg.partition[") for i in check) and len(check) > 5
    assert plugin == check


@pytest.mark.frameworks
def test_the_pytest_plugin_and_rlspec_check_agree_on_a_subprocess_framework(tmp_path):
    """tinker-cookbook, in its own environment behind the JSON-lines worker: its core row, its partial
    and precision findings and its own rows (`extra_rows`, FAILs included) the same in both."""
    from conformance.frameworks import subprocess_worker

    if subprocess_worker.python_for("tinker_cookbook")[0] is None:
        pytest.skip("tinker_cookbook is not installed: run `rlspec frameworks install tinker_cookbook`")
    plugin, check = _plugin_and_check_rows(tmp_path, "tinker_cookbook", ("adv.*",))
    assert any(i.startswith("tinker_cookbook.") for i in check)
    assert any(status == "fail" for status, _, _ in check.values())
    assert plugin == check

