"""tinker-cookbook 0.6.1 in its own environment (``requirements.txt``, ``nodeps.txt``; ``rlspec frameworks
install tinker_cookbook``): what the cookbook computes locally before a batch goes to the Tinker service (the
group-centred advantages, the constant-reward group filter, the KL penalty folded into the advantages; the
losses themselves run on the service and cannot be called). ``ops.py`` runs inside that environment,
``adapter.py`` and ``checks.py`` here. See ``README.md``."""

ADAPTER = "TinkerCookbookAdapter"
