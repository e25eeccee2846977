"""rlspec conformance suite: the spec, the registry of quantities, adapters, golden vectors, mutants
and the `rlspec` command line."""

SUITE_VERSION = "0.1.0"
SPEC_VERSION = "v1"
