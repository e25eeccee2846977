"""Hugging Face TRL 1.16.0, called in rlspec's own environment (rlspec depends on ``trl``; the pin is in
``.ci/constraints.txt``): ``adapter.py`` (core-API functions), ``checks.py`` (every GRPO/RLOO
``loss_type`` through ``_compute_loss``, reward functions, rollout corrections, entropy controls),
``e2e.py`` (``rlspec e2e trl``: real ``GRPOTrainer`` steps verified). See ``README.md``."""

ADAPTER = "TRLAdapter"
