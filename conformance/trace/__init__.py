"""Training-step checking: read an rlspec trace (`rlspec.trace` records it; format in
``conformance/spec/v1/trace.md``) and replay every link of every step against the oracle
(``rlspec replay``). ``reader`` brings the step's micro-batches, ranks and shards to spec layout; ``links``
and ``gradient`` hold the checks; ``replay`` makes them report rows."""
