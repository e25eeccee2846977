"""SkyRL 0.3.0 (``skyrl/backends/skyrl_train``, the skyrl-train backend) in its own environment
(``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install skyrl``): ``ops.py`` runs inside it,
``adapter.py`` and ``checks.py`` here. See ``README.md``."""

ADAPTER = "SkyRLAdapter"
