"""Every finding's no-rlspec reproduction, run in its framework's environment: it prints exactly the
``Actual:`` block of its docstring; and every citation of the findings file names a line of the installed
framework (``frameworks`` marker: skipped with a reason where the framework is not installed)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conformance.frameworks import findings as fs
from conformance.frameworks import subprocess_worker as sw

ALL = [(name, f) for name in fs.homes_with_findings() for f in fs.load(name).findings
       if fs.load(name).repro(f).exists()]
HOMES = fs.homes_with_findings()


def _python(name: str) -> str:
    python, _ = sw.python_for(name)
    if python is None:
        pytest.skip(f"{name} is not installed: run `rlspec frameworks install {name}`")
    return python


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put rlspec's checkout on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME")}
    env["PYTHONWARNINGS"] = "ignore"
    return env


@pytest.mark.frameworks
@pytest.mark.parametrize("name,finding", ALL, ids=[f"{n}:{f.id}" for n, f in ALL])
def test_repro_prints_what_its_docstring_says(name, finding, tmp_path):
    python = _python(name)
    script = fs.load(name).repro(finding)
    _, actual = fs.repro_docstring(script)
    # -I (isolated): neither the script's folder nor the working directory nor PYTHON* variables reach sys.path
    proc = subprocess.run([python, "-I", str(script)], cwd=tmp_path, env=_clean_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{script.name} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.strip("\n") == actual, (
        f"{script.name} printed\n{proc.stdout}\nbut its docstring's Actual: block says\n{actual}")


@pytest.mark.frameworks
@pytest.mark.parametrize("name", HOMES)
def test_citations_name_lines_of_the_installed_framework(name):
    python = _python(name)
    home = fs.load(name)
    code = ("import importlib.util, json, sys; s = importlib.util.find_spec(sys.argv[1]); "
            "print(json.dumps(list(s.submodule_search_locations)))")
    proc = subprocess.run([python, "-I", "-c", code, home.source_root], capture_output=True, text=True,
                          env=_clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    roots = [Path(p) for p in json.loads(proc.stdout)]
    bad = []
    for f in home.findings:
        for cite in f.where:
            m = fs.CITATION.match(cite)
            path = next((r / m["path"] for r in roots if (r / m["path"]).exists()), None)
            if path is None:
                bad.append(f"{f.id}: {cite}: no such file under {home.source_root}/")
                continue
            n = len(path.read_text(errors="replace").splitlines())
            if int(m["last"] or m["first"]) > n or int(m["first"]) > int(m["last"] or m["first"]):
                bad.append(f"{f.id}: {cite}: {m['path']} has {n} lines")
    assert not bad, "\n".join(bad)
