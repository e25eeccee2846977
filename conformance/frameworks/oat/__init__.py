"""oat: a framework read from its source (sail-sg/oat @ 08379c6 (oat/algorithms/ppo.py)), not run: its home holds only the presets read
there (`presets.py`); it has no adapter, so `rlspec check` has no column for it."""
