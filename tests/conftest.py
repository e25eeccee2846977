"""Hypothesis profiles, chosen by HYPOTHESIS_PROFILE (default: `ci` under CI=true, else `dev`).

- `dev`: quick local runs (random, 25 examples);
- `ci`: derandomized, no example database, no deadline; sized so the default test run stays
  well under 15 minutes on 2 cores;
- `nightly`: thousands of examples, random, for scheduled runs.
Regressions are pinned with `@example(...)` in the tests, never through the database.
"""

import os

import torch
from hypothesis import HealthCheck, settings

torch.set_num_threads(min(2, torch.get_num_threads()))

_common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("dev", max_examples=25, **_common)
settings.register_profile("ci", max_examples=40, derandomize=True, database=None, print_blob=True, **_common)
settings.register_profile("nightly", max_examples=2000, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
