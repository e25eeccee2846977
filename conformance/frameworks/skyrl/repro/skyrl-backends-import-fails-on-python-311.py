"""`import skyrl.backends` fails on Python 3.11 (skyrl 0.3.0, finding skyrl-backends-import-fails-on-python-311).

skyrl 0.3.0 declares `Requires-Python >=3.11`. `skyrl/backends/__init__.py` imports skyrl/tinker/types.py, whose
pydantic model `RenderedModelInput` has a field typed `MultiModalKwargs | None` with
`class MultiModalKwargs(TypedDict)` imported from `typing` (skyrl/tinker/types.py:9, :132-139); pydantic refuses
`typing.TypedDict` on Python < 3.12 ("Please use `typing_extensions.TypedDict` instead"), so the import raises
`PydanticUserError`, and with it every module of the skyrl-train backend (ppo_utils, the workers, the trainer's
generators). Reached by any use of the skyrl-train backend on Python 3.11.

Run: on Python 3.11, pip install skyrl==0.3.0 (with its skyrl-train backend's imports: ray, omegaconf, loguru,
jaxtyping, transformers, datasets; see rlspec's conformance/frameworks/skyrl/requirements.txt); python
skyrl-backends-import-fails-on-python-311.py

Expected (the package metadata): a release that declares Python >= 3.11 imports on Python 3.11:
"import skyrl.backends: ok".

Actual:
    python 3.11
    import skyrl.backends: PydanticUserError (asks for typing_extensions.TypedDict)
"""

import sys

print(f"python {sys.version_info[0]}.{sys.version_info[1]}")
try:
    import skyrl.backends  # noqa: F401
except Exception as exc:  # pydantic.errors.PydanticUserError
    hint = " (asks for typing_extensions.TypedDict)" if "typing_extensions.TypedDict" in str(exc) else f": {exc}"
    print(f"import skyrl.backends: {type(exc).__name__}{hint}")
else:
    print("import skyrl.backends: ok")
