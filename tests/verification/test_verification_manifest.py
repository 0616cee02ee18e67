"""rollout_cli.verification.manifest: a manifest that is missing, foreign, malformed, laid out wrongly or whose
counts do not add up (on their own or against the data) is caught; pending steps are notes.

Each test damages a copy of a clean converted output in one way and checks that verify names the
damaged file and the broken invariant (verify_damage.py holds the tools).
"""
from __future__ import annotations

import pytest

from rollout_cli.verification.check import verify_output
from verify_damage import out  # noqa: F401 (the fixture)
from verify_damage import manifest, save_manifest, step_entry, fails


def test_edited_total_count_is_caught(out):
    m = manifest(out)
    m["counts"]["rows"] += 1
    save_manifest(out, m)
    res = verify_output(str(out), quick=True)
    assert fails(res) == {("manifest.json", "counts")}
    assert any("counts.rows" in f["detail"] for f in res["failures"])


@pytest.mark.parametrize("field", ["samples", "rejected", "rows"])
def test_edited_step_count_breaks_rows_plus_rejected_equals_samples(out, field):
    m = manifest(out)
    step_entry(m, 2)[field] += 1
    save_manifest(out, m)
    res = verify_output(str(out))
    assert ("manifest.json", "counts") in fails(res)
    assert any("step 2" in f["detail"] for f in res["failures"])


def test_consistently_edited_row_count_is_caught_against_the_data(out):
    """The manifest adds up, but one shard does not hold the rows it claims."""
    m = manifest(out)
    s = step_entry(m, 1)
    shard = s["shards"][0]
    for d in (shard, s):
        d["rows"] += 1
    s["samples"] += 1
    s["step_samples"] += 1
    m["counts"]["rows"] += 1
    m["counts"]["input_samples"] += 1
    next(i for i in m["inputs"] if i["step"] == 1 and i["split"] == "train")["samples"] += 1
    save_manifest(out, m)
    both = {(shard["path"], "rows"), (shard["mmap"]["path"], "rows")}  # the Parquet shard and its IPC copy
    # ... and every row's step_samples is the step's true row count, not the edited one
    step_rows = {(sh["path"], "step_fields") for sh in s["shards"]}
    assert fails(verify_output(str(out))) == both | step_rows
    assert fails(verify_output(str(out), quick=True)) == both  # footer row counts


def test_consistently_edited_token_count_is_caught_against_the_data(out):
    m = manifest(out)
    s = step_entry(m, 2)
    shard = s["shards"][1]
    shard["tokens"] += 5
    s["tokens"] += 5
    s["tokens_per_shard"][1] += 5
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {(shard["path"], "tokens")}


def test_unknown_schema_version_is_refused(out):
    m = manifest(out)
    m["schema_version"] = 999
    save_manifest(out, m)
    assert fails(verify_output(str(out))) == {("manifest.json", "schema_version")}


def test_missing_manifest_means_not_complete(out):
    (out / "manifest.json").unlink()
    res = verify_output(str(out))
    assert fails(res) == {("manifest.json", "manifest")} and "interrupted" in res["failures"][0]["detail"]


@pytest.mark.parametrize("text", ["", "{", "[]", '{"format": "something-else"}'])
def test_unreadable_or_foreign_manifest(out, text):
    (out / "manifest.json").write_text(text)
    assert fails(verify_output(str(out))) == {("manifest.json", "manifest")}


@pytest.mark.parametrize("path", ["../outside.parquet", "/etc/passwd", "data/../../x.parquet", "other/x.parquet"])
def test_manifest_paths_must_stay_inside_out(out, path):
    m = manifest(out)
    step_entry(m, 1)["shards"][0]["path"] = path
    save_manifest(out, m)
    res = verify_output(str(out))
    assert fails(res) == {("manifest.json", "manifest_structure")}


def test_malformed_manifest_fields_are_failures_not_crashes(out):
    m = manifest(out)
    m["steps"][0]["shards"][0]["rows"] = "eight"
    del m["steps"][1]["tokens"]
    m["counts"] = []
    save_manifest(out, m)
    res = verify_output(str(out))
    assert {inv for _, inv in fails(res)} == {"manifest_structure"} and len(res["failures"]) == 3


def test_duplicate_step_and_wrong_layout(out):
    m = manifest(out)
    m["steps"][1]["shards"][0]["path"], m["steps"][1]["shards"][1]["path"] = (
        m["steps"][1]["shards"][1]["path"], m["steps"][1]["shards"][0]["path"])
    save_manifest(out, m)
    assert ("manifest.json", "shard_layout") in fails(verify_output(str(out), quick=True))


def test_verify_keeps_the_layout_check_on_generation_paths():
    """A generation path must still be the layout's path inside it, and only a manifest that
    names a generation may use generation paths."""
    from rollout_cli.verification.manifest import laid_out as _laid_out

    want = "data/step-000001/shard-00000-of-00002.parquet"
    with_gen = {"generation": "ab" * 16}
    assert _laid_out(want, want, {}) and _laid_out(want, want, with_gen)
    assert _laid_out(f"gen/{'ab' * 16}/{want}", want, with_gen)
    assert not _laid_out(f"gen/{'ab' * 16}/{want}", want, {})
    assert not _laid_out(f"gen/{'ab' * 16}/data/step-000002/shard-00000-of-00002.parquet", want, with_gen)
    assert not _laid_out(f"gen/NOTHEX/{want}", want, with_gen)


def test_pending_steps_are_notes_and_a_malformed_pending_list_fails(out):
    """A step left out while its input was being written (convert --skip-incomplete) is a
    note, not a failure; a pending list verify cannot read is a manifest_structure failure."""
    m = manifest(out)
    entry = {"path": "run/4.jsonl", "format": "jsonl", "split": "train", "step": 4,
             "reason": "still being written? it ends inside line 9"}
    save_manifest(out, dict(m, pending=[entry]))
    r = verify_output(str(out))
    assert r["ok"] and r["pending"] == [entry]
    assert any(n.startswith("run/4.jsonl: train step 4 is pending") for n in r["notes"])
    save_manifest(out, dict(m, pending=[{"path": "run/4.jsonl", "split": "train", "step": "4"}]))
    assert fails(verify_output(str(out))) == {("manifest.json", "manifest_structure")}
