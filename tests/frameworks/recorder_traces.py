"""What the recorder tests share: recording a framework's scenarios in its own environment (through
``conformance.trace.frameworks.record``, the path of ``rlspec record``) and reading one step of a trace."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from conformance.trace import frameworks as fw


def record_or_skip(name: str, out: Path, scenarios: Sequence[str], *, steps: int, skip_reason: str) -> Path:
    """Record ``scenarios`` of ``name``'s recorder into ``out`` (skips with ``skip_reason`` when the framework's
    environment is not installed; a recorder that fails is an error with its stderr)."""
    t0 = time.perf_counter()
    try:
        fw.record(name, out, list(scenarios), steps=steps, seed=0, timeout=900)
    except fw.RecorderUnavailable:
        pytest.skip(skip_reason)
    print(f"{name} recorder: {time.perf_counter() - t0:.1f} s")
    return out


def load_step(traces: Path, scenario: str, step: int
              ) -> tuple[dict, dict, list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """(manifest, rank 0's part, its micro-batches' tensors, the step tensors) of one step of one scenario."""
    from safetensors.numpy import load_file

    folder = traces / scenario / f"step-{step:06d}"
    manifest = json.loads((folder / "manifest.json").read_text())
    part = json.loads((folder / "part-dp0-cp0.json").read_text())
    mbs = [load_file(str(folder / e["file"])) for e in part["micro_batches"]]
    return manifest, part, mbs, load_file(str(folder / "step.safetensors"))
