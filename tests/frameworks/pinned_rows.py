"""The tests the verl and OpenRLHF adapter modules share (``test_verl_adapter.py``, ``test_openrlhf_adapter.py``),
made for each module's framework and pins and bound there under their usual names, e.g.
``test_core_row = pinned_rows.core_row_test(CORE)`` (so the test ids stay ``test_verl_adapter.py::test_core_row[gae]``).

The ``adapter`` and ``extra`` fixtures they use are in ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from conformance.frameworks import subprocess_worker as sw
from conformance.runner.parts import golden_cases
from conformance.runner.run import load_adapters
from conformance.records import BY_FUNCTION
from conformance.runner.verdict import check_row
from conformance.runner.rows import seeds_for


def skip_reason(display_name: str, framework: str) -> str:
    """Why the module's ``frameworks`` tests skip when ``rlspec frameworks install <framework>`` was not run."""
    return (f"{display_name} is not installed: run `rlspec frameworks install {framework}` (environments under "
            f"{sw.frameworks_dir()}, $RLSPEC_FRAMEWORKS_DIR)")


def missing_environment_test(framework: str) -> Callable[..., None]:
    def test_missing_environment_is_a_not_installed_row(monkeypatch, tmp_path):
        monkeypatch.setenv("RLSPEC_FRAMEWORKS_DIR", str(tmp_path))
        monkeypatch.delenv(f"RLSPEC_{framework.upper()}_PYTHON", raising=False)
        monkeypatch.setattr(sw, "_WORKERS", {})
        monkeypatch.setattr(sw.importlib.util, "find_spec", lambda name, *a: None)
        adapters, infos = load_adapters([framework])
        assert adapters == []
        assert infos[0].status == "not_installed", infos[0]
        assert "cannot import" in infos[0].message and f"rlspec frameworks install {framework}" in infos[0].message

    return test_missing_environment_is_a_not_installed_row


def _split(pin: str) -> tuple[str, list[str]]:
    """A pinned status, "pass" or "pass + raises ValueError" (the cases that raise beside the verdict,
    each an error failure mode): (status, the error modes' labels)."""
    status, *raised = [p.strip() for p in pin.split(" + ")]
    return status, raised


def _raised(row) -> list[str]:
    return [m["label"] for m in row.failures if m["kind"] == "error" and row.status != "error"]


def core_row_test(core: dict[str, str]) -> Callable[..., None]:
    """``core``: core-API function -> its row's status as ``rlspec check --seed 0 --n-seeds 8`` runs it, with
    " + raises X" for each error mode beside the verdict."""

    @pytest.mark.frameworks
    @pytest.mark.parametrize("function", list(core))
    def test_core_row(adapter, function):
        record = BY_FUNCTION[function]
        row = check_row(record, adapter, seeds=seeds_for(function, 0, 8), golden=golden_cases(record))
        status, raised = _split(core[function])
        assert (row.status, _raised(row)) == (status, raised), row.message

    return test_core_row


def extra_row_tests(pins: dict[str, tuple[str, str | None]]) -> tuple[Callable[..., None], Callable[..., None]]:
    """``pins``: framework row id -> (status, matched preset); the status with " + raises X" for each error
    mode beside the verdict. (Every row is pinned, each row is as pinned.)"""

    @pytest.mark.frameworks
    def test_every_extra_row_is_pinned(extra):
        assert set(extra) == set(pins)

    @pytest.mark.frameworks
    @pytest.mark.parametrize("row_id", list(pins))
    def test_extra_row(extra, row_id):
        row = extra[row_id]
        pin, preset = pins[row_id]
        status, raised = _split(pin)
        assert (row.status, row.matched_preset, _raised(row)) == (status, preset, raised), row.message
        if status in ("pass", "preset", "variant") and "value" in row.checks:
            assert all(v == "pass" or (raised and v == "error") for v in row.checks.values()), row.checks

    return test_every_extra_row_is_pinned, test_extra_row


__all__ = ["skip_reason", "missing_environment_test", "core_row_test", "extra_row_tests"]
