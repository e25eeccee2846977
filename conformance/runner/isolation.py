"""Crash isolation for `rlspec check --isolate`: every row of one adapter runs in a worker process.

An adapter that calls `os._exit`, segfaults in a native kernel or is killed by a signal would take the
whole in-process run with it (no table, no report). Here one persistent worker per adapter (started
with the `spawn` method: no forked torch or thread state; `spawn` gives the child the parent's
`sys.path` and working directory) loads the adapter itself from the string the user gave and runs
rows one at a time on request. The messages on its pipe are JSON (never pickles: adapters need not
be picklable). Before each adapter call the worker sends the trial's description, so when it dies the
parent can say what was running. A death or a per-row timeout costs that row (an `error` row) and the
worker, not the run: the next row gets a fresh worker. Unlike the in-process path, which can only
abandon a hung thread, a timed-out worker is killed. Every part of the run is served so: the core rows
one request each, the `agg.partition` rows and the adapter's own rows one request per part
(`conformance.runner.run.run_part`, the same function the in-process path calls).
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import signal
import sys
import time
from dataclasses import asdict
from multiprocessing.connection import Connection, wait
from typing import Any

from conformance.records import BY_FUNCTION, Quantity
from conformance.runner.loading import BUILTIN_ADAPTERS, AdapterLoadError, load_adapter
from conformance.runner.partition import MODES
from conformance.runner.rows import RowResult, error_row
from conformance.runner.options import RunOptions
from conformance.runner.parts import core_error_row, run_part

# A worker's start-up (spawning Python, importing torch and the adapter) is not the first row's time:
# it gets the per-row limit, but at least this many seconds.
MIN_START_S = 60.0
# The partition and framework parts time out inside the worker first (error rows); the worker is killed
# only this long after.
PART_GRACE_S = 10.0


def isolates(mode: str, ref: str, *, given_as_object: bool) -> bool:
    """Whether the adapter named `ref` runs its rows in a worker under `--isolate mode`. An adapter
    object passed programmatically cannot be re-loaded in a child: always in process. `auto`
    isolates third-party code (entry points, `module:attribute`), where native crashes happen, and
    keeps in process rlspec's own built-ins (verl and OpenRLHF already run their framework in a
    subprocess) and a module built in memory (no `__spec__`: a fresh interpreter cannot import it)."""
    if given_as_object or mode == "never":
        return False
    if mode == "always":
        return True
    if ref in BUILTIN_ADAPTERS:
        return False
    module_name, colon, _ = ref.partition(":")
    return not colon or getattr(sys.modules.get(module_name), "__spec__", None) is not None


def _send(conn: Connection, message: Any) -> None:
    conn.send_bytes(json.dumps(message).encode())


def _serve(conn: Connection, ref: str, options: dict[str, Any]) -> None:
    """The worker: load the adapter, then run the requested rows until told to stop (None) or the
    parent goes away. Ctrl-C is the parent's to handle (it kills the worker); faulthandler prints the
    Python stack of a native crash on stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()
    run_options = RunOptions(**options)
    try:
        adapter = load_adapter(ref)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the parent reports it per row
        reason = str(exc) if isinstance(exc, AdapterLoadError) else f"{type(exc).__name__}: {exc}"
        _send(conn, {"load_error": reason.splitlines()[0]})
        return
    _send(conn, {"ready": True})
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except EOFError:  # the parent is gone
            return
        if request is None:
            return
        records = [BY_FUNCTION[f] for f in request["functions"]]
        try:
            rows = run_part(request["part"], adapter, ref, records, run_options,
                            on_trial=lambda d: _send(conn, {"trial": d}))
            _send(conn, {"rows": [row.to_json() for row in rows]})
        except BaseException as exc:  # noqa: BLE001 - as in process: the row is an error row
            _send(conn, {"raised": f"{type(exc).__name__}: {exc}"})


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"process died with signal {-exitcode} ({name})"
    return f"process exited with code {exitcode}"


class IsolatedRows:
    """The rows of one adapter, each run by a worker process under the per-row timeout. The worker
    starts at the first row; `close()` (or leaving the `with` block) ends it."""

    def __init__(self, ref: str, adapter_name: str, options: RunOptions) -> None:
        self.ref = ref
        self.adapter_name = adapter_name
        self.options = options
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._load_error: str | None = None  # set once: the worker cannot load the adapter

    def __enter__(self) -> IsolatedRows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, part: str, records: list[Quantity]) -> list[RowResult]:
        """The rows of one part of the run (`conformance.runner.run.PARTS`; for "core", of its one record):
        the worker's verdicts, or error rows when the worker died, timed out or cannot load the adapter. On
        any exception here (Ctrl-C) the worker is killed."""
        try:
            return self._run(part, records)
        except BaseException:
            self._kill()
            raise

    def _errors(self, part: str, records: list[Quantity], message: str) -> list[RowResult]:
        """What a part that could not complete reports: its rows as error rows."""
        if part == "core":
            return [core_error_row(records[0], self.adapter_name, self.options, message)]
        if part == "partition":
            return [error_row(f"agg.partition[{mode}]@{self.adapter_name}", f"agg.{mode}", f"agg.partition[{mode}]",
                              self.adapter_name, message) for mode in MODES]
        return [error_row(f"{self.adapter_name}.extra_rows", "-", f"{self.adapter_name}.extra_rows", self.adapter_name,
                          message)]

    def _run(self, part: str, records: list[Quantity]) -> list[RowResult]:
        if self._proc is None and self._load_error is None:
            self._start()
        if self._load_error is not None:
            return self._errors(part, records, self._load_error)
        assert self._conn is not None
        try:
            _send(self._conn, {"part": part, "functions": [r.function for r in records]})
        except OSError:  # it died since the last row: reported below, as any death
            pass
        timeout = self.options.timeout
        # a core row has the per-row limit; the other parts keep their own limits inside the worker (each
        # partition row, the framework's rows as one call) and are killed only past them
        limit = timeout if part == "core" else timeout * (len(MODES) if part == "partition" else 1) + PART_GRACE_S
        deadline = time.monotonic() + limit
        what = records[0].function if part == "core" else f"the {part} rows"
        where = f"during {what}"
        while True:
            message = self._receive(deadline)
            if "trial" in message:
                where = f"during {what}, {message['trial']}"
            elif "rows" in message:
                return [RowResult.from_json(row) for row in message["rows"]]
            elif "raised" in message:
                return self._errors(part, records, message["raised"])
            else:  # died or timed out: this worker is done, the next row gets a fresh one
                self._kill()
                cause = message.get("died") or f"timed out after {limit:g}s (per-row limit, --timeout)"
                return self._errors(part, records, f"{cause} {where}")

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._proc = context.Process(target=_serve, args=(child_conn, self.ref, asdict(self.options)),
                                     name=f"rlspec-isolate[{self.ref}]")
        self._proc.start()
        child_conn.close()  # only the child holds its end: its death is an EOF here
        limit = max(self.options.timeout, MIN_START_S)
        message = self._receive(time.monotonic() + limit)
        if "ready" in message:
            return
        self._kill()
        if "load_error" in message:
            self._load_error = f"cannot load the adapter in the worker process: {message['load_error']}"
        elif "died" in message:
            self._load_error = f"{message['died']} while loading the adapter in the worker process"
        else:
            self._load_error = f"the worker process did not load the adapter within {limit:g}s"

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The worker's next message; `{"died": why}` when it died, `{}` past the deadline."""
        assert self._conn is not None and self._proc is not None
        ready = wait([self._conn, self._proc.sentinel], timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            return {}
        if self._conn.poll():  # read what it sent before looking at whether it is still alive
            try:
                return json.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                pass
        self._proc.join(5.0)  # its end of the pipe closed: it is exiting
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        return {"died": _death(self._proc.exitcode)}

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._proc.close()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        """Stop the worker: asked politely (it exits normally, so an adapter's own subprocesses are
        cleaned up by its exit handlers), killed if it does not within 5 s."""
        if self._proc is not None and self._conn is not None:
            try:
                _send(self._conn, None)
            except OSError:
                pass
            self._proc.join(5.0)
        self._kill()
