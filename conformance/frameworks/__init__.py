"""The real frameworks under test, one folder each: ``conformance/frameworks/<name>/``.

A framework's folder holds everything about it:

- ``__init__.py``: a docstring (version, what is called) and ``ADAPTER``, the name of the adapter class
  in ``adapter.py`` that ``rlspec check --adapter <name>`` loads;
- ``adapter.py``: the core-API functions in spec conventions, calling the framework's own installed code;
- ``presets.py``: its presets (the keyword sets it computes quantities with, each with where it was read, and
  the version read), found by ``conformance.records.presets``; a framework read only from its source has a home
  with this file alone;
- ``checks.py`` (optional): its extra rows (the framework's own settings, losses and trainer paths as
  compositions of spec quantities, declared for the runner's engine), returned by the adapter's ``extra_rows``;
- ``ops.py``, ``requirements.txt`` and ``nodeps.txt`` for a framework that runs in an environment of its
  own: the operations its worker runs there, and the install recipe of ``rlspec frameworks install``;
- ``findings.toml`` and ``repro/``: what the runs found, as data (`conformance.frameworks.findings`), each
  finding with a reproduction that imports only the framework;
- ``README.md``: what is called, what is stubbed, what was found (generated from ``findings.toml``).

Beside them, the machinery they share: ``subprocess_worker.py`` / ``subprocess_adapter.py`` (the
isolated environments and the JSON-lines worker), ``shared_ops.py`` (what several ``ops.py`` share, loaded
by the worker), ``spec_io.py`` (spec-side argument checks and conversions) and ``loss_batch.py`` (the seeded loss
batch the loss rows share). The rows themselves are judged by the runner's engine (``conformance.runner.composite``). Adding a framework is adding one folder: the runner finds the homes by discovery
(`conformance.runner.discovery`).
"""
