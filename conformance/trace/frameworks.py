"""The real trainers' recorders: ``conformance/frameworks/<name>/recorder.py``, a script run in the framework's
own environment (``rlspec frameworks install``; TRL in rlspec's) with the repository on ``PYTHONPATH``, which
trains the framework's real trainer a few steps on a tiny random-weight model and writes one trace per
scenario. Its command line is the contract: ``--list`` prints the scenario names as a JSON list;
``--out DIR --scenario NAME [--scenario ...] --steps N --seed S`` writes ``DIR/<scenario>/``.

:func:`trace_rows` records and replays every scenario of a framework: the ``trace[<scenario>].<link>`` rows of
its report (``rlspec reports``), one per link a scenario could check.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from conformance.runner.discovery import framework_names
from conformance.runner.rows import RowResult
from conformance.trace.replay import replay

ROOT = Path(__file__).resolve().parents[2]
HOMES = ROOT / "conformance" / "frameworks"


class RecorderUnavailable(RuntimeError):
    """The framework has no recorder, or its environment is not installed."""


def with_recorder() -> list[str]:
    """The frameworks whose home holds a recorder."""
    return [n for n in framework_names() if (HOMES / n / "recorder.py").exists()]


def _python(name: str) -> str:
    if name == "trl":
        import sys

        return sys.executable
    from conformance.frameworks.subprocess_worker import python_for

    python, _ = python_for(name)
    if python is None:
        raise RecorderUnavailable(f"{name}: not installed (rlspec frameworks install {name})")
    return python


def _run(name: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    script = HOMES / name / "recorder.py"
    if not script.exists():
        raise RecorderUnavailable(f"{name}: no recorder (conformance/frameworks/{name}/recorder.py)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run([_python(name), str(script), *args], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise RuntimeError(f"{name} recorder {' '.join(args)}: exit {done.returncode}:\n{done.stderr[-4000:]}")
    return done


def scenarios(name: str) -> list[str]:
    """The recorder's scenario names."""
    return list(json.loads(_run(name, ["--list"], timeout=300).stdout.strip().splitlines()[-1]))


def record(name: str, out: str | Path, scenario_names: list[str], *, steps: int = 2, seed: int = 0,
           timeout: float = 1800) -> list[Path]:
    """Run the recorder for ``scenario_names``; the trace folders it wrote."""
    args = ["--out", str(out), "--steps", str(steps), "--seed", str(seed)]
    for s in scenario_names:
        args += ["--scenario", s]
    _run(name, args, timeout=timeout)
    return [Path(out) / s for s in scenario_names]


def scenario_rows(name: str, scenario: str, trace: Path) -> list[RowResult]:
    """The replay rows of one scenario's trace, named ``trace[<scenario>].<link>``; links it could not check
    are kept as "not implemented" rows (they say what the recorder does not capture)."""
    _, rows = replay(str(trace))
    for r in rows:
        link = r.function.removeprefix("trace.")
        r.function = f"trace[{scenario}].{link}"
        r.id = f"{name}.{r.function}"
        r.adapter = name
        if r.reproduce:
            r.reproduce = f"rlspec record {name} --scenario {scenario} --out DIR && rlspec replay DIR/{scenario}"
    return rows


def trace_rows(name: str, *, steps: int = 2, seed: int = 0) -> list[RowResult]:
    """Record and replay every scenario of ``name``'s recorder."""
    names = scenarios(name)
    with tempfile.TemporaryDirectory(prefix=f"rlspec-record-{name}-") as d:
        traces = record(name, d, names, steps=steps, seed=seed)
        return [row for s, t in zip(names, traces) for row in scenario_rows(name, s, t)]
