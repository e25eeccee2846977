"""Golden vectors: hand-built cases of every spec'd quantity with the oracle's float64 outputs.

- `catalogue`: the cases (`<function>/<slug>` ids, one behaviour each) and their builders;
- `generate`: builds a vector from a catalogue case with the oracle; `rlspec vectors --write/--check`;
- `golden`: the file format, the SHA-256 manifest, loading, and `check_vector` (an adapter against a
  stored vector);
- `v1/`: the published files (never edited or renamed; a semantic change goes to `v2/`);
- `INTERPRETING.md`: the contract for consumers of the files.
"""

from pathlib import Path

VECTORS_DIR = Path(__file__).resolve().parent
V1_ROOT = VECTORS_DIR / "v1"

__all__ = ["VECTORS_DIR", "V1_ROOT"]
