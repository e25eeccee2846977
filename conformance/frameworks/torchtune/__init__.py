"""torchtune 0.6.1 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks install
torchtune``): ``ops.py`` runs inside it, ``adapter.py`` and ``checks.py`` here. The release wheel ships
``torchtune/rlhf`` (PPO rewards, GAE, whitening, ``PPOLoss``) and the PPO recipe; it does not ship
``torchtune/dev`` (GRPO's losses), which the wheel's own GRPO recipe imports. See ``README.md``."""

ADAPTER = "TorchtuneAdapter"
