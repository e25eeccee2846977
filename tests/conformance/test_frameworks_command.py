"""`rlspec frameworks install`: every environment is attempted, in parallel with --jobs, and a failure
names the framework and shows its log without stopping the others. (pip itself is replaced: the real
installs run in CI's `rlspec frameworks install all`.)"""

from __future__ import annotations

import argparse
import threading

from conformance.runner.discovery import framework_names
from conformance.commands import frameworks as command
from conformance.frameworks import subprocess_worker


def test_every_isolated_framework_folder_is_installable():
    """The install list is the framework folders with a recipe and worker ops (adding one is a folder)."""
    isolated = set(subprocess_worker.FRAMEWORKS)
    assert {"verl", "openrlhf"} <= isolated <= set(framework_names())
    for name in isolated:
        assert (command.FRAMEWORKS_HOME / name / "requirements.txt").exists()
        # nodeps.txt (the framework without its dependencies) is optional: vllm installs with its own
        assert (command.FRAMEWORKS_HOME / name / "nodeps.txt").exists() or name == "vllm"


def test_parallel_install_attempts_all_and_reports_the_failures(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RLSPEC_FRAMEWORKS_DIR", str(tmp_path))
    seen, threads = [], set()

    def fake_install_one(name, *, force=False, log=None):
        seen.append(name)
        threads.add(threading.get_ident())
        print(f"pip output of {name}", file=log)
        return 1 if name == "verl" else 0

    monkeypatch.setattr(command, "install_one", fake_install_one)
    args = argparse.Namespace(which="all", force=False, jobs=3)
    assert command.install(args) == 1
    assert sorted(seen) == sorted(subprocess_worker.FRAMEWORKS)
    err = capsys.readouterr().err
    assert "not installed: verl" in err and "pip output of verl" in err  # the failed one's log tail
    assert (tmp_path / "openrlhf.install.log").read_text().strip() == "pip output of openrlhf"


def test_serial_install_succeeds_when_all_do(monkeypatch):
    monkeypatch.setattr(command, "install_one", lambda name, *, force=False, log=None: 0)
    assert command.install(argparse.Namespace(which="all", force=False, jobs=1)) == 0


def _install_steps(monkeypatch, tmp_path, name):
    """The commands `install_one(name)` runs (pip stubbed; a fresh environment is made by the stub)."""
    monkeypatch.setenv("RLSPEC_FRAMEWORKS_DIR", str(tmp_path))
    ran = []

    def fake_run(cmd, log):
        ran.append(cmd)
        return 0

    class Started:
        def __init__(self, framework):
            self.version, self.hello = "x", {"info": {}}

        def close(self):
            pass

    monkeypatch.setattr(command, "_run", fake_run)
    monkeypatch.setattr(command, "Worker", Started)
    assert command.install_one(name) == 0
    return [" ".join(cmd[1:]) for cmd in ran]


def test_install_runs_nodeps_then_uninstall_only_where_the_folder_has_them(monkeypatch, tmp_path):
    verl = _install_steps(monkeypatch, tmp_path, "verl")
    assert [s.split()[-1].rsplit("/", 1)[-1] for s in verl[1:]] == ["requirements.txt", "nodeps.txt"]
    vllm = _install_steps(monkeypatch, tmp_path, "vllm")
    assert vllm[1].endswith("vllm/requirements.txt") and "nodeps.txt" not in " ".join(vllm)
    assert vllm[2].startswith("-m pip uninstall") and "-y" in vllm[2] and vllm[2].endswith("vllm/uninstall.txt")
