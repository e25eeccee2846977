"""The settings of a conformance run."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.runner.report import DEFAULT_FAIL_ON

PARTS = ("core", "partition", "framework")


@dataclass(frozen=True)
class RunOptions:
    """The settings of one conformance run (every row is checked under them).

    `seed` shifts every property case; `n_seeds` is the number of property cases per record; `timeout`
    the seconds a row may take (a framework's own rows share one limit); `diagnose` names the known bugs
    a failing row is consistent with; `strict_precision` judges every case at its input dtype's class;
    `isolate` is "auto" (third-party adapters in a worker process), "always" or "never"; `fail_on` the
    finding kinds that make the report not ok; `parts` which parts run; `progress` shows a progress bar."""

    seed: int = 0
    n_seeds: int = 8
    timeout: float = 120.0
    diagnose: bool = True
    strict_precision: bool = False
    isolate: str = "auto"
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    parts: tuple[str, ...] = PARTS
    progress: bool = False

    def __post_init__(self) -> None:
        if self.isolate not in ("auto", "always", "never"):
            raise ValueError(f"RunOptions: isolate: expected 'auto', 'always' or 'never', got {self.isolate!r}")
        unknown = [p for p in self.parts if p not in PARTS]
        if unknown:
            raise ValueError(f"RunOptions: parts: expected a subset of {PARTS}, got {unknown}")


__all__ = ["PARTS", "RunOptions"]
