"""open_instruct: a framework read from its source (allenai/open-instruct @ e6c3044 (grpo_fast)), not run: its home holds only the presets read
there (`presets.py`); it has no adapter, so `rlspec check` has no column for it."""
