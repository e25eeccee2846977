"""`rlspec check --isolate`: an adapter that exits, segfaults or hangs costs one error row that says
what was running, not the run; workers never outlive the run."""

from __future__ import annotations

import json
import os
import signal
import sys
import types
from multiprocessing import resource_tracker
from pathlib import Path

import pytest

from conformance.runner import isolation
from conformance.cli import main
from conformance.runner.options import RunOptions
from conformance.runner.run import run, select_records
from conformance.records import BY_FUNCTION

CRASHING = "tests.conformance.crashing_adapters"
EXAMPLES = "tests.conformance.example_adapters"


def _children() -> set[int]:
    """This process's child processes, zombies included (Linux /proc). Multiprocessing's resource
    tracker, started with the first worker and kept for the life of the process, is started first."""
    resource_tracker.ensure_running()
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                pids.add(int(entry.name))
        except OSError:  # exited meanwhile
            continue
    return pids


def test_each_crash_costs_one_row_and_the_run_completes(tmp_path):
    before = _children()
    # default --isolate auto: an adapter named by module:attribute runs in a worker
    code = main(["check", "--adapter", f"{CRASHING}:crashes_three_ways", "--only", "adv.grpo", "--only", "logprob.token",
                 "--only", "adv.rloo", "--only", "adv.whiten", "--only", "adv.reinforce", "--n-seeds", "2",
                 "--timeout", "4", "--no-progress", "--json", str(tmp_path / "r.json")])
    assert code == 1
    assert _children() <= before, "no worker outlives the run, none is left a zombie"
    rows = {c["function"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert [rows[f]["status"] for f in ("token_logprobs", "whiten")] == ["pass", "pass"], "the other rows are checked"
    expected = {
        "grpo_advantages": "process exited with code 3 during grpo_advantages, property check, seed",
        "rloo_advantages": "process died with signal 11 (SIGSEGV) during rloo_advantages, property check, seed",
        "reinforce_advantages": "timed out after 4s (per-row limit, --timeout) during reinforce_advantages, "
                                "property check, seed",
    }
    for function, start in expected.items():
        row = rows[function]
        assert row["status"] == "error" and row["message"].startswith(f"{start} {row['seeds'][0]}, float"), row


def test_a_worker_that_cannot_load_the_adapter_gives_one_error_row_per_function():
    rep = run([f"{CRASHING}:parent_only"], select_records(["adv.grpo", "adv.rloo"]), RunOptions(seed=0, n_seeds=2, timeout=30))
    assert rep.adapters[0].name == "parent-only", "loaded in the parent: named in the report"
    assert [r.status for r in rep.rows] == ["error", "error"]
    for row in rep.rows:  # the one-line reason
        assert row.message.startswith("cannot load the adapter in the worker process: "), row.message
        assert row.message.endswith("RuntimeError: needs the state of the process that started the run"), row.message


def test_in_process_hang_still_times_out():
    rep = run([f"{CRASHING}:hangs"], select_records(["adv.reinforce", "adv.grpo"]), RunOptions(seed=0, n_seeds=2, timeout=2, isolate="never"))
    rows = {r.function: r for r in rep.rows}
    assert rows["reinforce_advantages"].status == "error"
    assert rows["reinforce_advantages"].message == "timed out after 2s (per-row limit, --timeout)"
    assert rows["grpo_advantages"].status == "pass"


def test_an_isolated_run_gives_the_in_process_verdicts():
    records = select_records(["logprob.token", "adv.grpo", "loss.pg", "kl.estimator"])
    runs = [run([f"{EXAMPLES}:broken"], records, RunOptions(seed=3, n_seeds=2, timeout=60, isolate=mode))
            for mode in ("never", "always")]
    keys = ("id", "status", "matched_preset", "matched_kwargs", "message", "consistent_with", "checks", "n_cases",
            "seeds")
    in_process, isolated = ([{k: r.to_json()[k] for k in keys} for r in rep.rows] for rep in runs)
    assert {r["status"] for r in in_process} == {"pass", "fail", "not_implemented"}
    assert isolated == in_process


def test_ctrl_c_kills_a_busy_worker():
    before = _children()

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    try:
        with isolation.IsolatedRows(f"{CRASHING}:hangs", "hangs", RunOptions(timeout=600)) as rows:
            with pytest.raises(KeyboardInterrupt):
                rows.run("core", [BY_FUNCTION["reinforce_advantages"]])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _children() <= before


def test_auto_isolates_third_party_adapters_that_a_worker_can_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "in_memory_adapter", types.ModuleType("in_memory_adapter"))
    auto = lambda ref, obj=False: isolation.isolates("auto", ref, given_as_object=obj)  # noqa: E731
    assert auto(f"{CRASHING}:hangs") and auto("some_entry_point")
    assert not auto("refimpl") and not auto("trl") and not auto("in_memory_adapter:Adapter")
    assert not auto("my-adapter", obj=True) and not isolation.isolates("always", "x", given_as_object=True)
    assert isolation.isolates("always", "refimpl", given_as_object=False)
    assert not isolation.isolates("never", f"{CRASHING}:hangs", given_as_object=False)
