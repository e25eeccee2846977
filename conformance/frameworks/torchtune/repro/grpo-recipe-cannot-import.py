"""The wheel's GRPO recipe cannot be imported: torchtune/dev is not shipped (torchtune 0.6.1, finding grpo-recipe-cannot-import).

The wheel ships recipes/dev/grpo_full_finetune_distributed.py, which imports `torchtune.dev.grpo.generation`,
`.rewards` and `.types` (its lines 23-25), but no file under torchtune/dev (its RECORD lists none): in the
repository torchtune/dev has no `__init__.py`, so setuptools' `packages.find` (regular packages only) leaves it
out. GRPOLoss, GRPOSimpleLoss and GRPOCompletionLoss (torchtune/dev/grpo/loss.py in the repository) cannot be
imported from the release.

Run: pip install torchtune==0.6.1 torchao==0.15.0 (with torch); python grpo-recipe-cannot-import.py

Expected (the recipe's own imports): the module imports and defines its recipe class.

Actual:
    torchtune.dev: not installed
    recipes/dev/grpo_full_finetune_distributed.py: ModuleNotFoundError: No module named 'torchtune.dev'
"""
import importlib.util
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import torchtune

print("torchtune.dev:", "installed" if importlib.util.find_spec("torchtune.dev") else "not installed")
path = Path(torchtune.__file__).resolve().parent.parent / "recipes" / "dev" / "grpo_full_finetune_distributed.py"
spec = importlib.util.spec_from_file_location("grpo_recipe", path)
try:
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print("recipes/dev/grpo_full_finetune_distributed.py: imported")
except ModuleNotFoundError as exc:
    print(f"recipes/dev/grpo_full_finetune_distributed.py: ModuleNotFoundError: {exc}")
