"""pytest plugin: run the conformance suite inside a framework's own test session.

    pytest --pyargs conformance --rlspec-adapter mypkg.rlspec_adapter:Adapter

Registered through the `pytest11` entry point, so the options exist wherever rlspec is installed; the tests
live in `conformance/test_adapter_conformance.py` and are collected only with `--pyargs conformance`.

The rows are the ones `rlspec check` gives for the same options, from the same call
(`conformance.runner.run`, made once per session for all the adapters named, with the same isolation):
one test per (quantity, adapter), one for an adapter's `agg.partition[<mode>]` rows (when `aggregate` is
selected) and one for its own framework rows (when it has `extra_rows`). A test fails, with the full
report of its rows, when one of them has a finding of a kind in `--rlspec-fail-on` (default as
`rlspec check --fail-on`: fail, error, precision); a test whose rows are all "not implemented" is skipped;
any other test passes and prints its presets, precision and not-implemented notes. `--rlspec-json PATH`
writes the session's report (schema report-v3), as `rlspec check --json` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rlspec", "rlspec conformance suite")
    group.addoption("--rlspec-adapter", action="append", default=[], metavar="NAME|module:attr",
                    help="adapter to check (repeatable)")
    group.addoption("--rlspec-only", action="append", default=[], metavar="GLOB",
                    help="spec id or function glob (repeatable)")
    group.addoption("--rlspec-seed", type=int, default=0, help="base seed of the property cases")
    group.addoption("--rlspec-n-seeds", type=int, default=8, help="property cases per quantity")
    group.addoption("--rlspec-timeout", type=float, default=120.0, help="seconds per (quantity, adapter) row")
    group.addoption("--rlspec-fail-on", default=None, metavar="KINDS",
                    help="comma-separated finding kinds that fail a test (as `rlspec check --fail-on`; "
                    "default fail,error,precision)")
    group.addoption("--rlspec-strict-precision", action="store_true",
                    help="judge every case at its input dtype's tolerance (as `rlspec check --strict-precision`)")
    group.addoption("--rlspec-isolate", choices=("auto", "always", "never"), default="auto",
                    help="run an adapter's rows in a worker process (as `rlspec check --isolate`)")
    group.addoption("--rlspec-json", metavar="PATH", help="write the session's report as JSON (as `rlspec check --json`)")


@dataclass(frozen=True)
class Unit:
    """One test: a part of the run for one adapter (and its one quantity, for a core row)."""

    part: str  # "core", "partition" or "framework"
    ref: str  # the adapter as named on the command line
    adapter: str  # its `name` (row ids are `<function>@<name>`)
    function: str = ""

    @property
    def id(self) -> str:
        return f"{self.adapter}-{self.function or self.part}"


@dataclass
class Session:
    """The session's one run, made when the first test asks for its rows."""

    names: list[str]
    records: list[Any]
    options: Any
    report: Any = None
    units: list[Unit] = field(default_factory=list)

    def run(self) -> Any:
        """The session's report (run on first use)."""
        if self.report is None:
            from conformance.runner.run import run

            self.report = run(self.names, self.records, self.options)
        return self.report

    def idle(self, unit: Unit) -> bool:
        """Whether nothing at all was checked for the unit's adapter (as `rlspec check`'s exit 2)."""
        return any(a.name == unit.adapter for a in self.run().idle_adapters())

    def rows(self, unit: Unit) -> list[Any]:
        rows = [r for r in self.run().rows if r.adapter == unit.adapter]
        core = [r for r in rows if r.id == f"{r.function}@{r.adapter}"]
        if unit.part == "core":
            return [r for r in core if r.function == unit.function]
        partition = [r for r in rows if r.function.startswith("agg.partition[")]
        if unit.part == "partition":
            return partition
        return [r for r in rows if r not in core and r not in partition]


def _session(config: pytest.Config) -> Session:
    from conformance.errors import BrokenRun
    from conformance.runner import partition
    from conformance.runner.loading import AdapterLoadError, load_adapter
    from conformance.runner.options import RunOptions
    from conformance.runner.protocol import LoadedAdapter
    from conformance.runner.report import DEFAULT_FAIL_ON, parse_fail_on
    from conformance.runner.run import select_records

    cached = getattr(config, "_rlspec_session", None)
    if cached is not None:
        return cached
    names = config.getoption("--rlspec-adapter")
    if not names:
        raise pytest.UsageError(
            "rlspec: no adapter given; run e.g. "
            "`pytest --pyargs conformance --rlspec-adapter refimpl` or "
            "`--rlspec-adapter mypkg.rlspec_adapter:Adapter`"
        )
    try:
        adapters = [(LoadedAdapter.of(load_adapter(n)), n) for n in names]
        records = select_records(config.getoption("--rlspec-only") or None)
        fail_on = parse_fail_on(config.getoption("--rlspec-fail-on") or ",".join(DEFAULT_FAIL_ON))
    except (AdapterLoadError, BrokenRun, ValueError) as exc:
        raise pytest.UsageError(f"rlspec: {exc}") from None
    options = RunOptions(seed=config.getoption("--rlspec-seed"), n_seeds=config.getoption("--rlspec-n-seeds"),
                         timeout=config.getoption("--rlspec-timeout"), isolate=config.getoption("--rlspec-isolate"),
                         strict_precision=config.getoption("--rlspec-strict-precision"), fail_on=fail_on)
    session = Session(list(names), records, options)
    for adapter, ref in adapters:
        session.units += [Unit("core", ref, adapter.name, r.function) for r in records]
        if partition.applies(records):
            session.units.append(Unit("partition", ref, adapter.name))
        if adapter.extra_rows is not None:
            session.units.append(Unit("framework", ref, adapter.name))
    config._rlspec_session = session  # type: ignore[attr-defined]
    return session


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rlspec_unit" not in metafunc.fixturenames:
        return
    session = _session(metafunc.config)
    metafunc.parametrize("rlspec_unit", session.units, ids=[u.id for u in session.units])


@pytest.fixture
def rlspec_rows(rlspec_unit: Unit, request: pytest.FixtureRequest) -> tuple[list[Any], tuple[str, ...], bool]:
    """The rows of this test's unit, the finding kinds that fail it, and whether nothing at all was
    checked for its adapter (then every test of the adapter fails: a run that checks nothing is broken)."""
    session = _session(request.config)
    return session.rows(rlspec_unit), session.options.fail_on, session.idle(rlspec_unit)


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = getattr(session.config, "_rlspec_session", None)
    path = session.config.getoption("--rlspec-json", None)
    if state is not None and state.report is not None and path:
        from conformance.runner.report import write_outputs

        write_outputs(state.report, json_path=str(Path(path)), junit_path=None, markdown_path=None)
