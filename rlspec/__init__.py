"""rlspec's public trainer-side API: :mod:`rlspec.trace` records a trainer's optimizer steps for
``rlspec replay``. It imports only torch and safetensors, so it runs in any trainer's environment."""
