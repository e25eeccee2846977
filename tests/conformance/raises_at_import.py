"""A user adapter module that raises while it is imported (a missing CUDA library, a bad config):
`rlspec check --adapter tests.conformance.raises_at_import:Adapter` must exit 2 with one line."""

raise RuntimeError("CUDA driver not found (raised at import by the adapter module)")
