"""The findings files (``conformance/frameworks/<name>/findings.toml``): every entry follows the schema, names
rows the committed report holds and tests that exist, and has a no-rlspec reproduction whose docstring gives
the expected and the actual output. (That the scripts print their ``Actual:`` block, and that the citations
name lines of the installed framework, is checked in the framework environments:
tests/frameworks/test_finding_repros.py.)"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conformance.frameworks import findings as fs
from conformance.records import presets

ROOT = Path(__file__).resolve().parents[2]
HOMES = fs.homes_with_findings()
ALL = [(name, f) for name in HOMES for f in fs.load(name).findings]


def test_every_framework_with_an_adapter_has_a_findings_file():
    with_adapter = sorted(p.parent.name for p in fs.HOMES.glob("*/adapter.py"))
    assert list(HOMES) == with_adapter


@pytest.mark.parametrize("name", HOMES)
def test_findings_file_version_is_the_presets_version(name):
    assert fs.load(name).version == presets.version(name)


@pytest.mark.parametrize("name,finding", ALL, ids=[f"{n}:{f.id}" for n, f in ALL])
def test_rows_are_in_the_committed_report(name, finding):
    report = json.loads((ROOT / "conformance" / "reports" / f"{name}.json").read_text())
    ids = {row["id"] for row in report["checks"]}
    missing = [r for r in finding.rows if r not in ids]
    assert not missing, f"{name}:{finding.id} names rows the report does not hold: {missing}"


@pytest.mark.parametrize("name,finding", ALL, ids=[f"{n}:{f.id}" for n, f in ALL])
def test_pinning_tests_exist(name, finding):
    module = ROOT / "tests" / "frameworks" / f"test_{name}_adapter.py"
    defined = {n.name for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.FunctionDef)}
    defined |= {t.id for n in ast.walk(ast.parse(module.read_text())) if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    missing = [t for t in finding.tests if t not in defined]
    assert not missing, f"{name}:{finding.id} names tests {module.name} does not define: {missing}"


@pytest.mark.parametrize("name,finding", ALL, ids=[f"{n}:{f.id}" for n, f in ALL])
def test_repro_script_stands_alone(name, finding):
    home = fs.load(name)
    script = home.repro(finding)
    if finding.kind == "packaging" and not script.exists():
        return  # a packaging finding is shown by the install recipe (its README says how)
    assert script.exists(), f"{name}:{finding.id} has no reproduction {script.relative_to(ROOT)}"
    assert fs.rlspec_imports(script) == [], f"{script.name} imports rlspec's own code"
    expected, actual = fs.repro_docstring(script)
    assert expected and actual
    assert home.version in ast.get_docstring(ast.parse(script.read_text())), f"{script.name} must name the version it shows"


def test_every_repro_script_belongs_to_a_finding():
    for name in HOMES:
        home = fs.load(name)
        ids = {f.id for f in home.findings}
        orphans = sorted(p.stem for p in (home.path.parent / "repro").glob("*.py") if p.stem not in ids)
        assert not orphans, f"{name}/repro/ holds scripts of no finding: {orphans}"


BAD = {
    "kind": ('kind = "oops"', "kind 'oops' is not one of bug, convention, precision, packaging"),
    "citation": ('where = ["ppo.py"]', "'ppo.py' is not 'path/to/file.py:LINE'"),
    "unknown field": ('severity = "high"', "unknown field(s) severity"),
    "no rows or tests": ("rows = []", "neither rows nor tests"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_malformed_entry_is_refused_naming_the_field(case, tmp_path):
    line, message = BAD[case]
    base = {"id": '"x"', "kind": '"bug"', "title": '"t"', "claim": '"c"', "where": '["a/b.py:3-4"]',
            "config": '"defaults"', "upstream": '"not reported"', "rows": '["r@x"]'}
    key = line.split(" = ")[0]
    base[key] = line.split(" = ", 1)[1]
    body = "\n".join(f"{k} = {v}" for k, v in base.items())
    path = tmp_path / "fw" / "findings.toml"
    path.parent.mkdir()
    path.write_text(f'framework = "fw"\nversion = "1"\nsource_root = "fw"\n[[finding]]\n{body}\n')
    with pytest.raises(fs.FindingsError, match=__import__("re").escape(message)):
        fs.parse(path)


def test_a_repro_importing_rlspec_is_named(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("import numpy\nfrom oracle import gae\nfrom conformance.records import RECORDS\nfrom . import y\n")
    assert fs.rlspec_imports(script) == ["oracle", "conformance.records", "."]


def test_repro_docstring_needs_expected_and_actual(tmp_path):
    script = tmp_path / "x.py"
    script.write_text('"""t\n\nExpected (spec): [0.0]\n\nActual:\n    [nan]\n    done\n"""\nprint("[nan]")\n')
    assert fs.repro_docstring(script) == ("Expected (spec): [0.0]", "[nan]\ndone")
    script.write_text('"""t\n\nActual:\n    [nan]\n"""\n')
    with pytest.raises(fs.FindingsError, match="needs an 'Expected"):
        fs.repro_docstring(script)
