"""Fixtures shared by the end-to-end trainer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """One local two-CPU Ray cluster for the whole module (the trainer's pipeline joins it instead of starting
    its own); a cluster the caller already started is left running."""
    ray = pytest.importorskip("ray", reason="asynchronous training needs Ray (the [async] extra, part of [test])")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()
