"""pytest plugin: run the conformance suite inside a framework's own test session.

    pytest --pyargs conformance --rlspec-adapter mypkg.rlspec_adapter:Adapter

Registered through the `pytest11` entry point, so the options exist wherever rlspec is installed;
the tests themselves live in `conformance/test_adapter_conformance.py` and are collected only with
`--pyargs conformance`. One test per (quantity, adapter), judged like `rlspec check`: a row with a
finding of a kind in `--rlspec-fail-on` (default as `rlspec check --fail-on`: fail, error, precision)
fails with the full report; any other row passes and prints its preset, precision and
not-implemented notes; a function the adapter lacks is skipped as not implemented.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rlspec", "rlspec conformance suite")
    group.addoption("--rlspec-adapter", action="append", default=[], metavar="NAME|module:attr",
                    help="adapter to check (repeatable)")
    group.addoption("--rlspec-only", action="append", default=[], metavar="GLOB",
                    help="spec id or function glob (repeatable)")
    group.addoption("--rlspec-seed", type=int, default=0, help="base seed of the property cases")
    group.addoption("--rlspec-n-seeds", type=int, default=8, help="property cases per quantity")
    group.addoption("--rlspec-fail-on", default=None, metavar="KINDS",
                    help="comma-separated finding kinds that fail a test (as `rlspec check --fail-on`; "
                    "default fail,error,precision)")
    group.addoption("--rlspec-strict-precision", action="store_true",
                    help="judge every case at its input dtype's tolerance (as `rlspec check --strict-precision`)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rlspec_unit" not in metafunc.fixturenames:
        return
    from conformance.adapters import load_adapter
    from conformance.commands.check import selected_records

    names = metafunc.config.getoption("--rlspec-adapter")
    if not names:
        raise pytest.UsageError(
            "rlspec: no adapter given; run e.g. "
            "`pytest --pyargs conformance --rlspec-adapter refimpl` or "
            "`--rlspec-adapter mypkg.rlspec_adapter:Adapter`"
        )
    from conformance.adapters import AdapterLoadError
    from conformance.errors import BrokenRun

    try:
        adapters = [(load_adapter(n), n) for n in names]
        records = selected_records(metafunc.config.getoption("--rlspec-only") or None)
    except (AdapterLoadError, BrokenRun) as exc:
        raise pytest.UsageError(f"rlspec: {exc}") from None
    units = [(r, a, ref) for a, ref in adapters for r in records]
    metafunc.parametrize("rlspec_unit", units, ids=[f"{a.name}-{r.function}" for r, a, _ in units])
