"""Integrity: no pickle anywhere; golden vectors are checked against their manifest before use (a
tampered vector is reported, never used); reports carry what reproduces a run exactly."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from conformance import SPEC_VERSION, SUITE_VERSION
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions
from conformance.runner.rows import seeds_for
from conformance.vectors import V1_ROOT, golden

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("oracle", "refimpl", "conformance")
SKIP_DIRS = {".git", ".hypothesis", ".pytest_cache", ".benchmarks", "__pycache__", ".venv", "venv", "build", "dist"}

PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
# torch.distributed collectives that pickle Python objects
PICKLING_CALLS = {"all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list",
                  "send_object_list", "recv_object_list"}


def python_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts) or path == Path(__file__).resolve():
            continue
        out.append(path)
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    return ""


def _keyword_is(call: ast.Call, name: str, value: bool) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is value for k in call.keywords)


def pickle_findings(path: Path) -> list[str]:
    """Every pickle use in one file: imports of pickle-family modules, `allow_pickle=True`,
    `torch.load` without `weights_only=True`, `np.load` without `allow_pickle=False`, and in the
    packages `torch.save` and the object-pickling torch.distributed collectives."""
    rel = path.relative_to(ROOT).as_posix() if ROOT in path.parents else path.name
    in_package = rel.split("/")[0] in PACKAGES
    tree = ast.parse(path.read_text(), filename=rel)
    found = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names if a.name.split(".")[0] in PICKLE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PICKLE_MODULES:
            found.append(f"{where}: from {node.module} import ...")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if _keyword_is(node, "allow_pickle", True):
                found.append(f"{where}: allow_pickle=True")
            if name.endswith("torch.load") and not _keyword_is(node, "weights_only", True):
                found.append(f"{where}: torch.load without weights_only=True")
            if name in ("np.load", "numpy.load") and not _keyword_is(node, "allow_pickle", False):
                found.append(f"{where}: {name} without allow_pickle=False")
            if in_package and name.endswith("torch.save"):
                found.append(f"{where}: torch.save (a pickle) in package code: use safetensors")
            if in_package and name.split(".")[-1] in PICKLING_CALLS:
                found.append(f"{where}: {name} pickles Python objects")
    return found


def test_no_pickle_anywhere():
    files = python_files()
    assert len(files) > 50
    findings = [f for path in files for f in pickle_findings(path)]
    assert not findings, "pickle in the repository:\n" + "\n".join(findings)


def test_no_pickled_data_files():
    suffixes = {".pkl", ".pickle", ".pt", ".pth", ".ckpt", ".joblib", ".npy", ".npz"}
    found = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
             if p.suffix in suffixes and not any(part in SKIP_DIRS for part in p.relative_to(ROOT).parts)]
    assert not found, found


def test_the_pickle_scan_finds_what_it_should(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import pickle\nimport numpy as np, torch\nnp.load('x', allow_pickle=True)\n"
                   "torch.load('x')\ntorch.load('x', weights_only=False)\nnp.load('y')\n"
                   "torch.load('x', weights_only=True)\nnp.load('y', allow_pickle=False)\n")
    found = pickle_findings(bad)
    assert len(found) == 6, found  # the two last loads are fine


# ---------------------------------------------------------------------------------------------
# golden vectors against their manifest
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def tampered_root(tmp_path, monkeypatch):
    """A copy of the published vectors with one grpo_advantages vector edited (a digit of its
    expectation), used as the vector root of `rlspec check`."""
    root = tmp_path / "v1"
    shutil.copytree(V1_ROOT, root)
    target = sorted((root / "grpo_advantages").glob("*.json"))[0]
    vector = json.loads(target.read_text())
    data = vector["expected"]["data"]
    data[0] = (data[0] + 1.0) if isinstance(data[0], float) else 1.0
    target.write_text(golden.dumps(vector))
    monkeypatch.setattr(golden, "V1_ROOT", root)
    return root, target.relative_to(root).as_posix()


def test_a_tampered_vector_is_reported_and_not_used(tampered_root):
    root, name = tampered_root
    with pytest.raises(golden.ManifestError, match=name):
        golden.cases_for("grpo_advantages")
    assert golden.cases_for("rloo_advantages"), "the other functions' vectors are still used"
    rep = run(["refimpl"], select_records(["adv.grpo", "adv.rloo"]), RunOptions(seed=0, n_seeds=1, timeout=60, diagnose=False))
    rows = {r.function: r for r in rep.rows}
    assert rows["grpo_advantages"].status == "error"
    assert name in rows["grpo_advantages"].message and "not used" in rows["grpo_advantages"].message
    assert rows["rloo_advantages"].status == "pass" and rows["rloo_advantages"].checks.get("golden") == "pass"
    assert not rep.ok


def test_an_unlisted_vector_is_reported(tmp_path, monkeypatch):
    root = tmp_path / "v1"
    shutil.copytree(V1_ROOT, root)
    source = sorted((root / "whiten").glob("*.json"))[0]
    shutil.copy(source, root / "whiten" / "smuggled.json")
    monkeypatch.setattr(golden, "V1_ROOT", root)
    with pytest.raises(golden.ManifestError, match="whiten/smuggled.json: not listed"):
        golden.cases_for("whiten")


def test_the_published_vectors_match_their_manifest():
    assert golden.manifest_problems(V1_ROOT) == []


# ---------------------------------------------------------------------------------------------
# reports reproduce their run
# ---------------------------------------------------------------------------------------------


def test_reports_carry_versions_seeds_and_a_reproduce_command():
    records = select_records(["adv.grpo", "loss.ppo"])
    first = run(["refimpl"], records, RunOptions(seed=5, n_seeds=2, timeout=60)).to_json()
    again = run(["refimpl"], records, RunOptions(seed=5, n_seeds=2, timeout=60)).to_json()
    assert first["suite_version"] == SUITE_VERSION and first["spec_version"] == SPEC_VERSION == "v1"
    assert first["seed"] == 5 and first["n_seeds"] == 2
    assert first["reproduce"] == "rlspec check --seed 5 --n-seeds 2 --adapter refimpl"
    assert set(first["environment"]) >= {"python", "numpy", "torch"}
    for row in first["checks"]:
        assert row["seeds"] == seeds_for(row["function"], 5, 2)
    strip = lambda rep: [{k: v for k, v in c.items() if k != "seconds"} for c in rep["checks"]]  # noqa: E731
    assert strip(first) == strip(again), "the same seed reproduces every row exactly"
