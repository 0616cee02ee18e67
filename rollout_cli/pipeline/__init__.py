"""Stages 2-5, the conversion rules: validate and coerce raw chunks into Arrow batches
(`validate`), assign rollout ids (`ids`), post-process rewards (`rewards`), compute per-rollout
fields (`fields`), run them for one step (`step`) and plan the shards (`plan`). Pure functions
of their inputs: no files are written here."""
