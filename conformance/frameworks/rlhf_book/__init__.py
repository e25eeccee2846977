"""rlhf_book: a framework read from its source (natolambert/rlhf-book @ a66b0bf (code/policy_gradients/)), not run: its home holds only the presets read
there (`presets.py`); it has no adapter, so `rlspec check` has no column for it."""
