"""Fixtures of the verl and OpenRLHF adapter tests: each module names its framework in ``FRAMEWORK`` and
the reason its ``frameworks`` tests skip without it in ``SKIP_REASON`` (``pinned_rows.skip_reason``).
(``test_trl_adapter.py`` defines its own ``adapter``.)"""

from __future__ import annotations

import pytest

from conformance.runner.loading import load_adapter
from conformance.frameworks import subprocess_worker as sw


@pytest.fixture(scope="module")
def adapter(request):
    """The module's framework adapter (a skip with the module's ``SKIP_REASON`` when it is not installed)."""
    framework = request.module.FRAMEWORK
    if sw.python_for(framework)[0] is None:
        pytest.skip(request.module.SKIP_REASON)
    return load_adapter(framework)


@pytest.fixture(scope="module")
def extra(adapter):
    """The adapter's framework rows (``extra_rows(seed=0)``) by id."""
    return {row.id: row for row in adapter.extra_rows(0)}
