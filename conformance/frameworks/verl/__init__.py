"""verl 0.9.1 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install
verl``): ``ops.py`` runs inside it, ``adapter.py`` and ``checks.py`` here. See ``README.md``."""

ADAPTER = "VerlAdapter"
