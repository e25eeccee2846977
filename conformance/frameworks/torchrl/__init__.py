"""torchrl 0.14.1 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install
torchrl``): ``ops.py`` runs inside it, ``adapter.py`` and ``checks.py`` here. See ``README.md``."""

ADAPTER = "TorchRLAdapter"
