"""OpenRLHF 0.11.2 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks
install openrlhf``): ``ops.py`` runs inside it with the GPU-only imports stubbed, ``adapter.py`` and
``checks.py`` here. See ``README.md``."""

ADAPTER = "OpenRLHFAdapter"
