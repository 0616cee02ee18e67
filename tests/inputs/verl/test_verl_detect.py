"""verl's rollout-skip cache is told by its path; the step is the `{step}` folder, N the config
folder's; the files beside gen_batch.dp are left out with a note."""
from __future__ import annotations

from rollout_cli.inputs.verl import detect

CFG = "exp_proj/GBS16_N8_in512_out1024"


def test_gen_batch_step_and_rollouts_per_prompt(tmp_path):
    p = tmp_path / CFG / "7" / "gen_batch.dp"
    assert detect.claims(str(p)) and detect.skip_note(str(p)) is None
    assert detect.step_and_split(str(p)) == (7, "train")
    assert detect.rollouts_per_prompt(str(p)) == 8
    loose = tmp_path / "gen_batch.dp"  # claimed anywhere; without the folders it has no step or N
    assert detect.claims(str(loose))
    assert detect.step_and_split(str(loose)) is None and detect.rollouts_per_prompt(str(loose)) is None


def test_files_beside_the_batch_are_claimed_and_skipped(tmp_path):
    meta = tmp_path / CFG / "7" / "meta.json"
    assert detect.claims(str(meta))
    assert "verl rollout-skip step metadata" in detect.skip_note(str(meta))
    tq = tmp_path / CFG / "7" / "0" / "tq_batch.pt"
    assert detect.claims(str(tq))
    assert "TransferQueue" in detect.skip_note(str(tq))
    assert not detect.claims(str(tmp_path / "other" / "7" / "meta.json"))
    assert not detect.claims(str(tmp_path / "other" / "7" / "0" / "tq_batch.pt"))
    assert not detect.claims(str(tmp_path / CFG / "step7" / "meta.json"))


def test_version_lag_counts_from_the_step_s_own_policy():
    assert detect.version_lag(5, "4") == 0  # synchronous: step 5 generated with the weights of step 4
    assert detect.version_lag(5, "2") == 2
    assert detect.version_lag(5, "5") == -1
    assert detect.version_lag(5, "v4") is None
