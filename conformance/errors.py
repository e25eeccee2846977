"""The one exception a command raises when the run itself is broken (exit code 2)."""

from __future__ import annotations


class BrokenRun(Exception):
    """The command cannot do what it was asked (an adapter that cannot be loaded, a usage error, a
    missing file): `rlspec` prints the message as one line and exits 2, with no traceback unless
    `--debug`. Findings about an adapter are never a BrokenRun: they are rows of the report."""
