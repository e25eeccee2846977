"""The entry point of every torchrun rank of a multi-process wiring-mutant run (``base.record``)."""

import sys

from conformance.mutants.wiring.base import rank_main
from refimpl.trainer._dist import exit_skipping_finalization

exit_skipping_finalization(rank_main(sys.argv[1:]))
