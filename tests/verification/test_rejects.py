"""rollout_cli.verification.rejects: rejects.jsonl must match the manifest, and be absent when nothing was
rejected.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations



from rollout_cli.verification.check import verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import convert_cli, fails, input_with_a_bad_sample


def test_rejects_file_must_match_the_manifest(tmp_path):
    out = tmp_path / "rej"
    convert_cli([input_with_a_bad_sample(tmp_path)], out, "--on-error", "skip")
    (out / "rejects.jsonl").write_bytes(b"")
    assert fails(verify_output(str(out))) == {("rejects.jsonl", "rejects"), ("rejects.jsonl", "checksum")}
    (out / "rejects.jsonl").unlink()
    assert ("rejects.jsonl", "file_present") in fails(verify_output(str(out)))


def test_rejects_file_without_rejected_samples_is_unexpected(out):
    (out / "rejects.jsonl").write_text('{"file": "x", "split": "train", "step": 1}\n')
    assert fails(verify_output(str(out))) == {("rejects.jsonl", "unexpected_file")}
