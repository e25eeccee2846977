"""A per-row time limit for checks run in process (the isolated worker kills a hung row instead)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from conformance.runner.rows import RowResult


def run_with_timeout(fn: Callable[[], RowResult], timeout: float, on_timeout: Callable[[], RowResult]) -> RowResult:
    """Run one row in a daemon thread; a row that outlives `timeout` seconds becomes an error row
    (the thread is abandoned, the run goes on)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["row"] = fn()
        except BaseException as exc:  # noqa: BLE001 - any adapter failure becomes an error row
            box["exc"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return on_timeout()
    if "exc" in box:
        row = on_timeout()
        row.message = f"{type(box['exc']).__name__}: {box['exc']}"
        return row
    return box["row"]
