"""AReaL 1.0.4 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install
areal``): ``ops.py`` runs inside it (``areal/utils/functional/``, ``areal/utils/data.py`` and the PPO actor's
advantage and loss code in ``areal/trainer/ppo/actor.py``), ``adapter.py`` and ``checks.py`` here. See
``README.md``."""

ADAPTER = "ArealAdapter"
