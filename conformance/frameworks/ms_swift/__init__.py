"""ms-swift 4.6.0 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install
ms_swift``): ``ops.py`` runs inside it (``swift/rl_core/advantage.py``, the ``GRPOTrainer`` loss methods on a
stand-in trainer, ``swift/rewards/orm.py``), ``adapter.py`` and ``checks.py`` here. See ``README.md``."""

ADAPTER = "MsSwiftAdapter"
PACKAGE = "swift"
