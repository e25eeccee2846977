"""`rlspec new-adapter`: the skeleton imports as written, has one stub per registry function with the
oracle's signature, is checked as "not implemented" everywhere (never a pass), and its generated
pytest file passes; existing files are never overwritten without --force."""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from conformance import spec
from conformance.cli import main
from conformance.commands.new_adapter import identifier
from conformance.records import RECORDS


def generate(tmp_path: Path, array_api: str) -> Path:
    """Write the skeleton of a framework named after `array_api`; returns the adapter file."""
    assert main(["new-adapter", f"My {array_api}-Framework", "--dir", str(tmp_path), "--array-api", array_api]) == 0
    return tmp_path / f"my_{array_api}_framework_rlspec_adapter.py"


def load(path: Path) -> types.ModuleType:
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("array_api", ["torch", "numpy"])
def test_skeleton_has_a_documented_stub_with_the_oracle_signature_per_function(tmp_path, array_api):
    path = generate(tmp_path, array_api)
    adapter = load(path).Adapter()
    assert (adapter.name, adapter.spec_version, adapter.array_api) == (f"My {array_api}-Framework", "v1", array_api)
    text = path.read_text()
    for record in RECORDS:
        method = getattr(adapter, record.function)
        assert inspect.signature(method) == inspect.signature(record.oracle), record.function
        doc = inspect.getdoc(method)
        assert doc.startswith(record.spec_id) and " ".join(spec.description(record.spec_id).split()) in " ".join(doc.split())
        for keyword, default in record.canonical_keywords().items():
            assert f"{keyword}={default!r}" in doc, (record.function, keyword)
        params = inspect.signature(record.oracle).parameters.values()
        positional = [None for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        required = {p.name: None for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
        with pytest.raises(NotImplementedError):
            method(*positional, **required)
        # gradients: a commented hint for a NumPy adapter, never a live method
        assert getattr(adapter, f"{record.function}_grad", None) is None
        hinted = f"# def {record.function}_grad(" in text
        assert hinted == (array_api == "numpy" and record.oracle_grad is not None), record.function


@pytest.mark.parametrize("array_api", ["torch", "numpy"])
def test_check_reports_every_row_of_the_skeleton_not_implemented_and_exits_2(tmp_path, array_api):
    module = generate(tmp_path, array_api).stem
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "check", "--adapter", f"{module}:Adapter", "--no-progress",
         "--n-seeds", "2", "--json", str(report)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    # a skeleton checks nothing: a broken run, with the report still written
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "implements none of the selected spec functions" in proc.stderr
    data = json.loads(report.read_text())
    assert [a["status"] for a in data["adapters"]] == ["ok"]
    statuses = {c["function"]: c["status"] for c in data["checks"]}
    assert {r.function for r in RECORDS} <= set(statuses)
    assert set(statuses.values()) == {"not_implemented"}, statuses


def _pytest(tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_torch_framework_rlspec.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )


def test_generated_test_file_fails_on_the_bare_skeleton_and_passes_once_a_function_is_written(tmp_path):
    adapter = generate(tmp_path, "torch")
    bare = _pytest(tmp_path)
    assert bare.returncode == 1 and "1 failed" in bare.stdout, bare.stdout + bare.stderr
    assert "implements none of the selected spec functions" in bare.stdout
    # the first function written (the verified refimpl's, standing in for the framework's own)
    adapter.write_text(adapter.read_text() + "\n\nimport refimpl\n\n"
                       "Adapter.reinforce_advantages = lambda self, *args, **kwargs: "
                       "refimpl.reinforce_advantages(*args, **kwargs)\n")
    written = _pytest(tmp_path)
    assert written.returncode == 0, written.stdout + written.stderr
    assert "1 passed" in written.stdout


def test_existing_files_are_not_overwritten_without_force(tmp_path, capsys):
    path = generate(tmp_path, "torch")
    path.write_text("# my work\n")
    capsys.readouterr()
    assert main(["new-adapter", "My torch-Framework", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--force" in err and str(path) in err
    assert path.read_text() == "# my work\n"
    assert main(["new-adapter", "My torch-Framework", "--dir", str(tmp_path), "--force"]) == 0
    assert "class Adapter" in path.read_text()
    out = capsys.readouterr().out
    assert f"wrote {path}" in out and f"rlspec check --adapter {path.stem}:Adapter" in out


@pytest.mark.parametrize(("name", "ident"), [("My-Framework 2", "my_framework_2"), ("3d", "_3d"), ("!!", "")])
def test_names_become_python_identifiers(name, ident):
    assert identifier(name) == ident


def test_a_name_without_letters_or_digits_is_refused(tmp_path):
    assert main(["new-adapter", "!!", "--dir", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []
