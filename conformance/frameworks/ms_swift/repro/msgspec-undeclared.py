"""msgspec is imported but not declared (ms-swift 4.6.0, finding msgspec-undeclared).

`swift/rlhf_trainers/utils.py:18` runs `from msgspec import field`, and the GRPO trainer imports that module, but
ms-swift 4.6.0's metadata does not list msgspec among its requirements (nor under any extra). `pip install
ms-swift==4.6.0` into an environment without msgspec therefore cannot import the GRPO trainer. The script hides the
installed msgspec (`sys.modules["msgspec"] = None`, what an environment without it looks like to `import`).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python msgspec-undeclared.py

Expected (packaging, by hand): every module a package imports at import time is a declared requirement, so
msgspec would be in `importlib.metadata.requires("ms-swift")` and the import would not depend on it being installed
by chance.

Actual:
    msgspec declared by ms-swift 4.6.0: False
    import swift.rlhf_trainers.grpo_trainer without msgspec: ImportError (msgspec)
"""

import importlib.metadata
import re
import sys
import warnings

warnings.filterwarnings("ignore")

requirements = importlib.metadata.requires("ms-swift") or []
names = {re.split(r"[\s;<>=!~\[]", r, maxsplit=1)[0].lower() for r in requirements}
print(f"msgspec declared by ms-swift {importlib.metadata.version('ms-swift')}:", "msgspec" in names)
sys.modules["msgspec"] = None  # as in an environment without msgspec
try:
    import swift.rlhf_trainers.grpo_trainer  # noqa: F401
    print("import swift.rlhf_trainers.grpo_trainer without msgspec: ok")
except ImportError as exc:
    print(f"import swift.rlhf_trainers.grpo_trainer without msgspec: ImportError ({exc.name})")
