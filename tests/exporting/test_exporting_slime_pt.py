"""export --format slime-pt: replayable dumps that convert back to byte-identical shards."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import SAMPLE_DATA, copts, make_sample, read_rows, write_jsonl
from slime_sample import SAMPLE_FIELDS, Sample

from rollout_cli.core.errors import IntegrityError, OutputExistsError, OutputError, UsageError
from rollout_cli.run.convert import convert

import torch
from rollout_cli.exporting.slime_pt import MARKER, export_slime_pt  # noqa: E402


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for top in ("data", "eval", "mmap") for p in sorted((out / top).rglob("*")) if p.is_file()}


def replay(dest: Path, again: Path) -> None:
    """What slime's --load-debug-rollout-data does with each file (torch.load, Sample.from_dict),
    then the samples dumped again as slime's save would (Sample.to_dict)."""
    again.mkdir()
    for f in sorted(dest.glob("*.pt")):
        payload = torch.load(str(f), weights_only=True)
        samples = [Sample.from_dict(d) for d in payload["samples"]]
        torch.save({"rollout_id": payload["rollout_id"], "samples": [s.to_dict() for s in samples]}, str(again / f.name))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "pt"])
def test_round_trip_gives_byte_identical_shards(tmp_path, fmt):
    opts = dict(shards=2, keep_text=True, mmap=True)
    convert([str(SAMPLE_DATA / fmt / "rollout_data")], str(tmp_path / "out"), copts(**opts))
    res = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    assert sorted(f["path"] for f in res["files"]) == ["1.pt", "2.pt", "3.pt", "eval_3.pt"]
    assert res["samples"] == 16 + 15 + 15 + 7
    replay(tmp_path / "dest", tmp_path / "again")
    convert([str(tmp_path / "again")], str(tmp_path / "out2"), copts(**opts))
    first, second = shard_bytes(tmp_path / "out"), shard_bytes(tmp_path / "out2")
    assert len(first) == 16 and first == second


def test_files_are_slime_dumps(tmp_path):
    convert([str(SAMPLE_DATA / "pt" / "rollout_data")], str(tmp_path / "out"), copts(shards=3))
    export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    payload = torch.load(str(tmp_path / "dest" / "3.pt"), weights_only=True)
    assert set(payload) == {"rollout_id", "samples"} and payload["rollout_id"] == 3
    samples = payload["samples"]
    assert all(list(s) == SAMPLE_FIELDS for s in samples)
    assert all(isinstance(s["status"], str) for s in samples)
    # input order (the shards interleave it), assigned ids made explicit
    assert [s["index"] for s in samples] == list(range(31, 46))
    assert [s["rollout_id"] for s in samples] == [1, 3, 4, 5, 2, 2, 0, 0, 6, 8, 9, 10, 7, 7, 7]
    rexp = samples[0]["rollout_routed_experts"]
    assert rexp.dtype == torch.int32 and list(rexp.shape) == [len(samples[0]["tokens"]) - 1, 2, 2]
    assert samples[0]["rollout_top_p_token_offsets"].dtype == torch.int32
    one = torch.load(str(tmp_path / "dest" / "1.pt"), weights_only=True)["samples"]
    # the reward before post-processing; sample 10 had remove_sample: its mask comes back zeroed,
    # with the flag (as slime keeps it), and no other sample has it
    assert [s["reward"] for s in one] == [float(r["reward"]) for r in _pt_samples(1)]
    assert one[10]["loss_mask"] == [0] * one[10]["response_length"] and one[10]["remove_sample"] is True
    assert [k for k, s in enumerate(one) if s["remove_sample"] is not False] == [10]
    two = torch.load(str(tmp_path / "dest" / "2.pt"), weights_only=True)["samples"]
    orig = _pt_samples(2)
    # metadata.raw_reward only where it differs from the reward (what conversion reads is the same)
    assert [s["metadata"].get("raw_reward", s["reward"]) for s in two] == [float(o["metadata"].get("raw_reward", o["reward"])) for o in orig]
    assert sum("raw_reward" in s["metadata"] for s in two) == 2
    assert [s["metadata"]["round_number"] for s in two] == [o["metadata"]["round_number"] for o in orig]
    assert [s["train_metadata"] for s in two] == [o["train_metadata"] for o in orig]


def _pt_samples(step: int) -> list[dict]:
    return torch.load(str(SAMPLE_DATA / "pt" / "rollout_data" / f"{step}.pt"), weights_only=True)["samples"]


def test_skipped_rollouts_are_left_out_and_round_trip(tmp_path):
    samples = [make_sample(index=i, group_index=i // 2, reward=float(i % 2)) for i in range(6)]
    samples[3]["loss_mask"] = [1]  # invalid: its rollout is rejected
    write_jsonl(tmp_path / "in" / "5.jsonl", samples)
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(on_error="skip"))
    export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    got = torch.load(str(tmp_path / "dest" / "5.pt"), weights_only=True)["samples"]
    assert [s["index"] for s in got] == [0, 1, 2, 4, 5]
    replay(tmp_path / "dest", tmp_path / "again")
    convert([str(tmp_path / "again")], str(tmp_path / "out2"), copts())
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "out2")


def test_remove_sample_round_trips(tmp_path):
    """A removed sample is exported with remove_sample: True and its zeroed mask; converting the
    export (directly, and after slime's replay) gives the same rows, the flag included."""
    samples = [make_sample(index=i, group_index=i // 2, reward=float(i % 2), response_length=3) for i in range(6)]
    samples[3]["remove_sample"] = True
    write_jsonl(tmp_path / "in" / "5.jsonl", samples)
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts(shards=2))
    export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    got = torch.load(str(tmp_path / "dest" / "5.pt"), weights_only=True)["samples"]
    assert [s["remove_sample"] for s in got] == [i == 3 for i in range(6)]
    assert got[3]["loss_mask"] == [0, 0, 0] and got[2]["loss_mask"] == [1, 1, 1]
    convert([str(tmp_path / "dest")], str(tmp_path / "direct"), copts(shards=2))
    replay(tmp_path / "dest", tmp_path / "again")
    convert([str(tmp_path / "again")], str(tmp_path / "replayed"), copts(shards=2))
    rows = sorted(read_rows(tmp_path / "out"), key=lambda r: r["rollout_position"])
    assert [r["remove_sample"] for r in rows] == [i == 3 for i in range(6)]
    for again in ("direct", "replayed"):
        assert sorted(read_rows(tmp_path / again), key=lambda r: r["rollout_position"]) == rows, again
        assert shard_bytes(tmp_path / again) == shard_bytes(tmp_path / "out"), again


def test_an_output_of_schema_version_2_exports_remove_sample_false(tmp_path):
    """An output written before the column cannot say which sample was removed: the export gives
    remove_sample: False with the zeroed mask (the same train data)."""
    from old_outputs import as_schema_version_2

    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    as_schema_version_2(tmp_path / "out")
    export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    one = torch.load(str(tmp_path / "dest" / "1.pt"), weights_only=True)["samples"]
    assert not any(s["remove_sample"] for s in one)
    assert one[10]["loss_mask"] == [0] * one[10]["response_length"]


_ROUND_TRIP = dict(max_examples=15, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(**_ROUND_TRIP)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.booleans(), st.booleans()), min_size=1, max_size=12),
       st.integers(1, 3))
def test_convert_export_convert_keeps_remove_sample(tmp_path_factory, spec, shards):
    """Property: for any step (prompt groups, response lengths, which samples are removed, masks
    null or given), convert -> export -> convert gives the same rows, and remove_sample is the
    input's flag on every row, its mask zeros."""
    d = tmp_path_factory.mktemp("rt")
    samples = []
    for i, (group, rl, removed, null_mask) in enumerate(spec):
        s = make_sample(index=i, group_index=group, response_length=rl, reward=float(i % 3), remove_sample=removed,
                        loss_mask=None if null_mask else [(i + j) % 2 for j in range(rl)])
        samples.append(s)
    write_jsonl(d / "in" / "4.jsonl", samples)
    convert([str(d / "in")], str(d / "out"), copts(shards=shards))
    export_slime_pt(str(d / "out"), str(d / "dest"))
    convert([str(d / "dest")], str(d / "out2"), copts(shards=shards))
    first = sorted(read_rows(d / "out"), key=lambda r: r["rollout_position"])
    assert sorted(read_rows(d / "out2"), key=lambda r: r["rollout_position"]) == first
    assert [r["remove_sample"] for r in first] == [s["remove_sample"] for s in samples]
    assert all(not any(r["loss_mask"]) for r in first if r["remove_sample"])


def test_reward_key_exports_the_selected_number(tmp_path):
    convert([str(SAMPLE_DATA / "reward_dict" / "pt" / "rollout_data")], str(tmp_path / "out"), copts(reward_key="accuracy"))
    res = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    assert any("replay without --reward-key" in n for n in res["notes"])
    got = torch.load(str(tmp_path / "dest" / "1.pt"), weights_only=True)["samples"]
    assert [s["reward"] for s in got] == [float(s["reward"]["accuracy"]) for s in torch.load(
        str(SAMPLE_DATA / "reward_dict" / "pt" / "rollout_data" / "1.pt"), weights_only=True)["samples"]]
    convert([str(tmp_path / "dest")], str(tmp_path / "out2"), copts())
    assert shard_bytes(tmp_path / "out") == shard_bytes(tmp_path / "out2")


def test_steps_and_split_select(tmp_path):
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    res = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "a"), steps="2:3", split="train")
    assert [f["path"] for f in res["files"]] == ["2.pt", "3.pt"]
    res = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "b"), split="eval")
    assert [f["path"] for f in res["files"]] == ["eval_3.pt"] and sorted(os.listdir(tmp_path / "b")) == [MARKER, "eval_3.pt"]
    with pytest.raises(UsageError, match="no train steps in --steps 7:9"):
        export_slime_pt(str(tmp_path / "out"), str(tmp_path / "c"), steps="7:9", split="train")
    assert not (tmp_path / "c").exists()


def test_dest_with_files_needs_overwrite_and_is_swapped_whole(tmp_path):
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    dest = tmp_path / "dest"
    dest.mkdir()
    export_slime_pt(str(tmp_path / "out"), str(dest), steps="1")  # an empty DEST is fine
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    with pytest.raises(OutputExistsError, match="holds an earlier export; pass --overwrite"):
        export_slime_pt(str(tmp_path / "out"), str(dest))
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    export_slime_pt(str(tmp_path / "out"), str(dest), overwrite=True)
    assert sorted(os.listdir(dest)) == [MARKER, "1.pt", "2.pt", "3.pt", "eval_3.pt"]
    assert sorted(os.listdir(tmp_path)) == ["dest", "out"]  # no staging or old copy left


def test_an_export_dest_holding_other_files_is_never_replaced(tmp_path):
    """An export's folder to which a file was added is no longer only export's: refused with
    --overwrite too (exit 5, no --overwrite suggested), and untouched."""
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    dest = tmp_path / "dest"
    export_slime_pt(str(tmp_path / "out"), str(dest), steps="1")
    (dest / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match="it holds notes.txt, which export does not write") as ei:
            export_slime_pt(str(tmp_path / "out"), str(dest), overwrite=overwrite)
        assert ei.value.exit_code == 5 and "--overwrite" not in str(ei.value)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before


def test_a_failed_export_leaves_dest_untouched(tmp_path, monkeypatch):
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    dest = tmp_path / "dest"
    export_slime_pt(str(tmp_path / "out"), str(dest), steps="1")
    before = {p.name: p.read_bytes() for p in dest.iterdir()}
    real, calls = torch.save, []

    def failing(obj, f, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", failing)
    with pytest.raises(OutputError, match=f"^{dest}: cannot write the output: No space left on device"):
        export_slime_pt(str(tmp_path / "out"), str(dest), overwrite=True)
    assert {p.name: p.read_bytes() for p in dest.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["dest", "out"]


def test_bad_sources_and_dest(tmp_path):
    with pytest.raises(IntegrityError, match="not a complete rollout-cli output"):
        export_slime_pt(str(tmp_path), str(tmp_path / "dest"))
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts())
    with pytest.raises(UsageError, match="must not contain or lie inside"):
        export_slime_pt(str(tmp_path / "out"), str(tmp_path / "out" / "dump"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a folder"):
        export_slime_pt(str(tmp_path / "out"), str(tmp_path / "file"))
    rows = read_rows(tmp_path / "out", step=1)
    assert [r["rollout_position"] for r in rows] == list(range(16))


def test_an_object_store_output_exports_as_the_local_one(s3, tmp_path):
    """export reads an s3:// output's shards through its manifest (a generation folder): the
    same .pt files as from the local output of the same input."""
    opts = dict(shards=2, keep_text=True)
    src = str(SAMPLE_DATA / "jsonl" / "rollout_data")
    convert([src], str(tmp_path / "out"), copts(**opts))
    convert([src], "s3://bkt/export-out", copts(**opts))
    local = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "local"))
    remote = export_slime_pt("s3://bkt/export-out", str(tmp_path / "remote"))
    assert remote["files"] == local["files"] and remote["samples"] == local["samples"] > 0
    for f in local["files"]:
        assert (tmp_path / "remote" / f["path"]).read_bytes() == (tmp_path / "local" / f["path"]).read_bytes()


def test_rewards_not_recorded_export_as_none_with_the_weight_versions(tmp_path, monkeypatch):
    """reward=None where the framework recorded none (slime's default), said in a note; the
    sample's weight_versions come back; an output of schema version 3 did not keep them."""
    from lineage_cases import REWARDS, VERSIONS, jsonl_without_rewards, write_unrecorded
    from old_outputs import schema_3_output

    jsonl_without_rewards(monkeypatch)
    convert([str(write_unrecorded(tmp_path / "in"))], str(tmp_path / "out"), copts())
    res = export_slime_pt(str(tmp_path / "out"), str(tmp_path / "dest"))
    one = torch.load(str(tmp_path / "dest" / "1.pt"), weights_only=True)["samples"]
    assert [s["reward"] for s in one] == REWARDS and [s["weight_versions"] for s in one] == VERSIONS
    assert all("raw_reward" not in s["metadata"] for s in one)
    assert "4 sample(s) whose reward the framework did not record: exported with reward=None" in " ".join(res["notes"])
    assert "weight_versions" not in res["notes"][0]
    res = export_slime_pt(str(schema_3_output(tmp_path / "v3")), str(tmp_path / "dest3"))
    old = torch.load(str(tmp_path / "dest3" / "3.pt"), weights_only=True)["samples"]
    assert [s["weight_versions"] for s in old] == [[]] * 6 and "weight_versions" in res["notes"][0]
    assert [s["reward"] for s in old] == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
