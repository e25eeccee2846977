"""Real frameworks under test that run in their own environments (verl, OpenRLHF): install recipes
(``requirements-*.txt``, ``nodeps-*.txt``), the worker operations (``*_ops.py``, loaded by path inside
those environments), the spec-side conversions (``spec_io``) and the framework rows (``*_checks.py``).
See ``README.md`` beside this file."""
