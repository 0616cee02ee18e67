"""Training data for the next run from a converted output: SFT, DPO, KTO and reward-model rows
by stated rules (rules.py), with provenance on every row (rows.py), written as a folder the
Hugging Face `datasets` library loads (run.py). docs/derive.md states the rules; the library
function is `rollout_cli.derive`."""
