"""The entry point of every torchrun rank of a multi-process wiring-mutant run (``base.record``)."""

import sys

from conformance.mutants.wiring.base import rank_main

raise SystemExit(rank_main(sys.argv[1:]))
