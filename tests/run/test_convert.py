"""End to end through rollout_cli.run.convert.convert: formats agree, the slime oracle, rejects,
--max-errors, exit codes, determinism."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

import slime_reference as ref
from conftest import SAMPLE_DATA, card_without_generations, copts, make_sample, read_jsonl, read_rows, shard_bytes, write_jsonl
from slime_cases import CASES, fresh_case
from rollout_cli.core import hashing
from rollout_cli.run.convert import convert
from rollout_cli.core.errors import InvalidInputError, OutputError
from rollout_cli.core.schema import SCHEMA_VERSION

F32 = np.float32
TOL = 2e-6


def _opts(**kw):
    kw.setdefault("mmap", False)
    return copts(**kw)


# ------------------------------------------------------------------------------ the three formats


@pytest.fixture(scope="module")
def sample_data_outputs(tmp_path_factory):
    outs = {}
    for fmt in ("pt", "jsonl", "parquet"):
        out = tmp_path_factory.mktemp(f"out_{fmt}") / "out"
        res = convert([str(SAMPLE_DATA / fmt / "rollout_data")], str(out), copts(shards=2, mmap=True))
        outs[fmt] = (out, res)
    return outs


def test_formats_give_identical_shard_bytes(sample_data_outputs):
    pt, js, pq_ = (shard_bytes(sample_data_outputs[f][0]) for f in ("pt", "jsonl", "parquet"))
    assert len(pt) == 2 * 4 * 2  # 4 step units x 2 shards x (parquet + arrow)
    assert sorted(pt) == sorted(js) == sorted(pq_)
    for rel in pt:
        assert pt[rel] == js[rel], rel
        assert pt[rel] == pq_[rel], rel


def test_formats_give_identical_rows(sample_data_outputs):
    rows = {f: read_rows(sample_data_outputs[f][0]) + read_rows(sample_data_outputs[f][0], "eval")
            for f in ("pt", "jsonl", "parquet")}
    assert len(rows["pt"]) == 53
    assert rows["pt"] == rows["jsonl"] == rows["parquet"]


def test_sample_data_counts(sample_data_outputs):
    for fmt, (out, res) in sample_data_outputs.items():
        c = res["counts"]
        assert c["input_samples"] == c["rows"] + c["rejected"] == 16 + 15 + 15 + 7, fmt
        m = json.loads((out / "manifest.json").read_text())
        assert m["counts"] == c


def test_sample_data_ids_follow_readme(sample_data_outputs):
    out = sample_data_outputs["jsonl"][0]

    def ids(step):
        return [r["rollout_id"] for r in sorted(read_rows(out, step=step), key=lambda r: r["sample_index"])]

    assert ids(1) == list(range(16))
    assert ids(2) == [16, 16, 16, 19, 19, 21, 22, 22, 24, 24, 26, 26, 26, 29, 30]
    assert ids(3) == [1, 3, 4, 5, 2, 2, 0, 0, 6, 8, 9, 10, 7, 7, 7]


def test_sample_data_matches_oracle_by_sample(sample_data_outputs):
    """Every train step against the oracle: ids, masks, mask sums, and rewards grouped by group_index."""
    out = sample_data_outputs["jsonl"][0]
    for step in (1, 2, 3):
        samples = read_jsonl(SAMPLE_DATA / "jsonl" / "rollout_data" / f"{step}.jsonl")
        td = ref.convert_samples_to_train_data(samples, n_samples_per_prompt=1, rollout_batch_size=len(samples),
                                               advantage_estimator="ppo")
        rows = sorted(read_rows(out, step=step), key=lambda r: r["sample_index"])
        assert [r["sample_index"] for r in rows] == td["sample_indices"]
        assert [r["rollout_id"] for r in rows] == td["rollout_ids"]
        assert [r["loss_mask"] for r in rows] == td["loss_masks"]
        assert [r["rollout_mask_sum"] for r in rows] == td["rollout_mask_sums"]
        assert [r["tokens"] for r in rows] == td["tokens"]
        # rewards: each group_index normalised by the oracle as its own row
        groups: dict = {}
        for i, s in enumerate(samples):
            groups.setdefault(s["group_index"], []).append(i)
        expected = np.zeros(len(samples))
        for members in groups.values():
            sub = [samples[i] for i in members]
            _, r = ref.post_process_rewards(sub, n_samples_per_prompt=len(sub), rollout_batch_size=1)
            expected[members] = r
        np.testing.assert_allclose([r["reward"] for r in rows], expected, atol=TOL, rtol=0)


def test_reward_dict_with_reward_key_equals_plain(tmp_path):
    plain = tmp_path / "plain"
    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data" / "1.jsonl")], str(plain), _opts(mmap=True))
    for fmt in ("jsonl", "pt"):
        out = tmp_path / fmt
        convert([str(SAMPLE_DATA / "reward_dict" / fmt / "rollout_data")], str(out), _opts(mmap=True, reward_key="accuracy"))
        assert shard_bytes(out) == shard_bytes(plain), fmt


def test_reward_dict_without_key_is_invalid(tmp_path):
    with pytest.raises(InvalidInputError) as ei:
        convert([str(SAMPLE_DATA / "reward_dict" / "jsonl" / "rollout_data")], str(tmp_path / "out"), _opts())
    p = ei.value.problems[0]
    assert p.field == "reward" and "--reward-key" in p.message
    assert p.location.kind == "line" and p.location.number == 1
    assert not (tmp_path / "out" / "manifest.json").exists()


# ------------------------------------------------------------------------------ against the slime oracle


CORRECT = sorted(n for n, c in CASES.items() if c["slime_groups_correctly"])


def _convert_case(tmp_path, case, **extra):
    a = case["args"]
    inp = write_jsonl(tmp_path / "in" / "1.jsonl", case["samples"])
    out = tmp_path / ("out_compat" if extra.get("slime_compat") else "out")
    convert([str(inp)], str(out), _opts(
        advantage_estimator=a["advantage_estimator"],
        n_samples_per_prompt=a["n_samples_per_prompt"],
        reward_key=a.get("reward_key"),
        **extra,
    ))
    rows = read_rows(out)
    assert len(rows) == len(case["samples"])
    return rows


def _assert_columns_equal_oracle(rows, td):
    assert [r["rollout_id"] for r in rows] == td["rollout_ids"]
    assert [r["rollout_mask_sum"] for r in rows] == td["rollout_mask_sums"]
    assert [r["loss_mask"] for r in rows] == td["loss_masks"]
    assert [r["tokens"] for r in rows] == td["tokens"]
    assert [r["response_length"] for r in rows] == td["response_lengths"]
    assert [r["total_length"] for r in rows] == [len(t) for t in td["tokens"]]
    assert [int(r["truncated"]) for r in rows] == td["truncated"]
    assert [r["sample_index"] for r in rows] == td["sample_indices"]
    for r, raw in zip(rows, td["raw_reward"]):
        if isinstance(raw, (int, float)) and not isinstance(raw, bool):
            assert r["raw_reward"] == raw
    if "rollout_log_probs" in td:
        for r, lp in zip(rows, td["rollout_log_probs"]):
            assert r["rollout_log_probs"] == [float(F32(x)) for x in lp]
    if "teacher_log_probs" in td:
        for r, lp in zip(rows, td["teacher_log_probs"]):
            assert r["teacher_log_probs"] == [float(F32(x)) for x in lp]
    if "round_number" in td:
        assert [r["round_number"] for r in rows] == td["round_number"]
    if "source_names" in td:
        assert [r["source_name"] for r in rows] == td["source_names"]
    # the dtypes slime tensorises to hold the values exactly
    tz = ref.tensorize(td)
    assert [t.tolist() for t in tz["tokens"]] == [r["tokens"] for r in rows]
    assert tz["rollout_mask_sums"].tolist() == [float(r["rollout_mask_sum"]) for r in rows]


@pytest.mark.parametrize("name", CORRECT)
def test_case_default_mode_equals_oracle(tmp_path, name):
    case = fresh_case(name)
    td = ref.convert_samples_to_train_data(case["samples"], **case["args"])
    rows = _convert_case(tmp_path, case)
    _assert_columns_equal_oracle(rows, td)
    np.testing.assert_allclose([r["reward"] for r in rows], np.asarray(td["rewards"], dtype=np.float64), atol=TOL, rtol=0)


@pytest.mark.parametrize("name", CORRECT)
def test_case_slime_compat_equals_oracle_exactly(tmp_path, name):
    case = fresh_case(name)
    td = ref.convert_samples_to_train_data(case["samples"], **case["args"])
    rows = _convert_case(tmp_path, case, slime_compat=True, rollout_batch_size=case["args"]["rollout_batch_size"])
    _assert_columns_equal_oracle(rows, td)
    got = np.asarray([r["reward"] for r in rows], dtype=F32)
    exp = np.asarray(td["rewards"], dtype=np.float64).astype(F32)
    assert np.array_equal(got.view(np.uint32), exp.view(np.uint32)), (got, exp)


@pytest.mark.filterwarnings("ignore:std\\(\\):UserWarning")  # one-sample row: NaN, as slime
@pytest.mark.parametrize("name", sorted(n for n in CASES if n not in CORRECT))
def test_case_where_slime_groups_wrongly(tmp_path, name):
    """Ids, masks and mask sums still equal slime's; --slime-compat still replays slime's rewards bit
    for bit (whole-batch fallback, NaN included); the default mode never gives NaN."""
    case = fresh_case(name)
    td = ref.convert_samples_to_train_data(case["samples"], **case["args"])
    rows = _convert_case(tmp_path, case)
    _assert_columns_equal_oracle(rows, td)
    assert not np.isnan([r["reward"] for r in rows]).any()
    compat = _convert_case(tmp_path, case, slime_compat=True, rollout_batch_size=case["args"]["rollout_batch_size"])
    got = np.asarray([r["reward"] for r in compat], dtype=F32)
    exp = np.asarray(td["rewards"], dtype=np.float64).astype(F32)
    assert np.array_equal(got.view(np.uint32), exp.view(np.uint32)), (got, exp)


def test_interleaved_groups_default_mode_uses_group_index(tmp_path):
    # slime gives zeros here; grouping by group_index gives +-0.7071057558059692 (spec 3a)
    rows = _convert_case(tmp_path, fresh_case("interleaved_groups"))
    v = 0.7071057558059692
    np.testing.assert_allclose([r["reward"] for r in rows], [v, v, -v, -v], atol=TOL, rtol=0)


# ------------------------------------------------------------------------------ --on-error skip


def _skip_case():
    """11 records: rollout 10 (lines 3-5) has a bad middle sibling, line 7 a bad reward, line 10 bad JSON."""
    spec = [  # (group, explicit id)
        (0, None), (0, None), (1, 10), (1, 10), (1, 10), (1, None), (2, None), (2, None), (2, 11), (2, None), (2, None),
    ]
    rewards = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.5, 0.25]
    clean = [make_sample(index=i, group_index=g, rollout_id=r, reward=rewards[i], response_length=1 + i % 3)
             for i, (g, r) in enumerate(spec)]
    broken = [dict(s) for s in clean]
    broken[3] = dict(clean[3], status="bogus")
    broken[6] = dict(clean[6], reward="high")
    return clean, broken, {9: b'{"index": 9, "tokens": [1, 2'}


def test_skip_rejects_whole_rollout_and_keeps_ids(tmp_path):
    clean, broken, raw = _skip_case()
    write_jsonl(tmp_path / "clean" / "1.jsonl", clean)
    write_jsonl(tmp_path / "broken" / "1.jsonl", broken, raw_lines=raw)
    convert([str(tmp_path / "clean")], str(tmp_path / "out_clean"), _opts())
    res = convert([str(tmp_path / "broken")], str(tmp_path / "out"), _opts(on_error="skip"))
    clean_ids = {r["sample_index"]: r["rollout_id"] for r in read_rows(tmp_path / "out_clean")}
    rows = read_rows(tmp_path / "out")
    survivors = [0, 1, 5, 7, 8, 10]
    assert [r["sample_index"] for r in rows] == survivors
    # ids of survivors never shift because of the rejects
    assert {r["sample_index"]: r["rollout_id"] for r in rows} == {i: clean_ids[i] for i in survivors}
    # counts: input = rows + rejected
    c = res["counts"]
    assert (c["input_samples"], c["rows"], c["rejected"]) == (11, 6, 5)
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert m["counts"]["input_samples"] == m["counts"]["rows"] + m["counts"]["rejected"]
    assert m["rejects"]["count"] == 5
    # rejects.jsonl: one record per rejected sample, with location, field and reason
    rej = read_jsonl(tmp_path / "out" / "rejects.jsonl")
    assert [r["line"] for r in rej] == [3, 4, 5, 7, 10]
    by_line = {r["line"]: r for r in rej}
    assert all(r["file"].endswith("1.jsonl") and r["step"] == 1 and r["split"] == "train" for r in rej)
    assert by_line[4]["field"] == "status" and "bogus" in by_line[4]["reason"]
    assert by_line[7]["field"] == "reward"
    for sib in (3, 5):
        assert "sibling" in by_line[sib]["reason"] and "line 4" in by_line[sib]["reason"]
        assert by_line[sib]["rollout_id"] == 10
    assert "JSON" in by_line[10]["reason"]
    # and the id of the rule each broke, for tools to classify by
    assert {n: r["rule"] for n, r in by_line.items()} == {
        3: "rollout.sibling", 4: "status.unknown", 5: "rollout.sibling", 7: "reward.type", 10: "json.invalid"}


def test_skip_rewards_over_survivors(tmp_path):
    clean, broken, raw = _skip_case()
    write_jsonl(tmp_path / "broken" / "1.jsonl", broken, raw_lines=raw)
    convert([str(tmp_path / "broken")], str(tmp_path / "out"), _opts(on_error="skip"))
    rows = read_rows(tmp_path / "out")
    got = {r["sample_index"]: r["reward"] for r in rows}
    for members in ([0, 1], [5], [7, 8, 10]):
        sub = [clean[i] for i in members]
        _, exp = ref.post_process_rewards(sub, n_samples_per_prompt=len(sub), rollout_batch_size=1)
        if len(members) == 1:
            exp = [0.0]  # a one-sample group gives 0.0, never NaN
        np.testing.assert_allclose([got[i] for i in members], exp, atol=TOL, rtol=0)
    sums = {r["sample_index"]: r["rollout_mask_sum"] for r in rows}
    assert sums == {i: clean[i]["response_length"] for i in (0, 1, 5, 7, 8, 10)}


def test_no_rejects_file_without_rejects(tmp_path):
    clean, _, _ = _skip_case()
    write_jsonl(tmp_path / "in" / "1.jsonl", clean)
    res = convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip"))
    assert res["rejects"] is None
    assert not (tmp_path / "out" / "rejects.jsonl").exists()


def test_skip_pt_rejects_name_sample_positions(tmp_path):
    from conftest import write_pt

    samples = [make_sample(index=i, group_index=0, reward=float(i % 2)) for i in range(4)]
    samples[2]["loss_mask"] = [1]
    write_pt(tmp_path / "in" / "6.pt", samples, 6)
    res = convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip"))
    assert res["counts"]["rows"] == 3 and res["counts"]["rejected"] == 1
    (rej,) = read_jsonl(tmp_path / "out" / "rejects.jsonl")
    assert rej["sample"] == 2 and rej["field"] == "loss_mask" and rej["step"] == 6


# ------------------------------------------------------------------------------ --max-errors and exit code 3


def _bad_file(tmp_path, n_bad, n=30, name="1.jsonl"):
    samples = [make_sample(index=i, group_index=i // 3, reward=float(i % 2)) for i in range(n)]
    for i in range(n_bad):
        samples[i]["status"] = "nope"
    return write_jsonl(tmp_path / "in" / name, samples)


def test_fail_is_exit_3_with_located_problems_and_no_manifest(tmp_path):
    _bad_file(tmp_path, 2)
    with pytest.raises(InvalidInputError) as ei:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    e = ei.value
    assert e.exit_code == 3
    assert [(p.location.number, p.field) for p in e.problems] == [(1, "status"), (2, "status")]
    assert "1.jsonl:line 1" in str(e) and "status" in str(e)
    assert not (tmp_path / "out" / "manifest.json").exists()
    assert not (tmp_path / "out" / "data").exists()


@pytest.mark.parametrize("max_errors,n_bad,shown", [(None, 25, 20), (None, 3, 3), (3, 10, 3), (5, 2, 2), (1, 4, 1)])
def test_max_errors_under_fail_caps_reported_problems(tmp_path, max_errors, n_bad, shown):
    _bad_file(tmp_path, n_bad)
    with pytest.raises(InvalidInputError) as ei:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(max_errors=max_errors))
    assert len(ei.value.problems) == shown
    assert [p.location.number for p in ei.value.problems] == list(range(1, shown + 1))
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("max_errors,n_bad,ok", [(2, 3, False), (3, 3, True), (0, 1, False), (0, 0, True), (None, 12, True)])
def test_max_errors_under_skip_limits_rejected_samples(tmp_path, max_errors, n_bad, ok):
    # groups of 3 with distinct default ids: each bad sample is its own rollout
    _bad_file(tmp_path, n_bad)
    opts = _opts(on_error="skip", max_errors=max_errors)
    if ok:
        res = convert([str(tmp_path / "in")], str(tmp_path / "out"), opts)
        assert res["counts"]["rejected"] == n_bad and res["counts"]["rows"] == 30 - n_bad
    else:
        with pytest.raises(InvalidInputError) as ei:
            convert([str(tmp_path / "in")], str(tmp_path / "out"), opts)
        assert ei.value.exit_code == 3
        assert ei.value.problems and ei.value.problems[0].field == "status"
        assert not (tmp_path / "out" / "manifest.json").exists()


def test_max_errors_under_skip_counts_rejected_siblings(tmp_path):
    samples = [make_sample(index=i, group_index=0, rollout_id=4, reward=float(i % 2)) for i in range(3)]
    samples += [make_sample(index=3 + i, group_index=1, reward=float(i % 2)) for i in range(3)]
    samples[1]["status"] = "nope"
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    with pytest.raises(InvalidInputError):
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip", max_errors=2))
    res = convert([str(tmp_path / "in")], str(tmp_path / "out2"), _opts(on_error="skip", max_errors=3))
    assert res["counts"]["rejected"] == 3 and res["counts"]["rows"] == 3


def test_max_errors_under_skip_counts_across_steps(tmp_path):
    _bad_file(tmp_path, 2, name="1.jsonl")
    _bad_file(tmp_path, 2, name="2.jsonl")
    with pytest.raises(InvalidInputError):
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip", max_errors=3))
    assert not (tmp_path / "out" / "manifest.json").exists()
    res = convert([str(tmp_path / "in")], str(tmp_path / "out2"), _opts(on_error="skip", max_errors=4))
    assert res["counts"]["rejected"] == 4


def test_missing_group_index_needs_n(tmp_path):
    samples = [make_sample(index=i, group_index=None, reward=float(i % 2)) for i in range(4)]
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    with pytest.raises(InvalidInputError) as ei:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    assert "group_index" in str(ei.value) and "--n-samples-per-prompt" in str(ei.value)
    convert([str(tmp_path / "in")], str(tmp_path / "out2"), _opts(n_samples_per_prompt=2))
    v = 0.7071057558059692  # rewards [0, 1, 0, 1]: chunks [0, 1] and [0, 1]
    np.testing.assert_allclose([r["reward"] for r in read_rows(tmp_path / "out2")], [-v, v, -v, v], atol=TOL, rtol=0)


# ------------------------------------------------------------------------------ determinism


def test_converting_twice_gives_identical_bytes(tmp_path):
    src = [str(SAMPLE_DATA / "jsonl" / "rollout_data")]
    convert(src, str(tmp_path / "a"), copts(shards=4, mmap=True))
    convert(src, str(tmp_path / "b"), copts(shards=4, mmap=True))
    a, b = shard_bytes(tmp_path / "a"), shard_bytes(tmp_path / "b")
    assert a and a == b
    ma = json.loads((tmp_path / "a" / "manifest.json").read_text())
    mb = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert ma["steps"] == mb["steps"]


def test_worker_pool_gives_identical_bytes(tmp_path):
    src = [str(SAMPLE_DATA / "jsonl" / "rollout_data")]
    convert(src, str(tmp_path / "one"), copts(shards=2, mmap=True, workers=1))
    convert(src, str(tmp_path / "two"), copts(shards=2, mmap=True, workers=2))
    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "two")


@pytest.mark.parametrize("compression", ["none", "zstd", "lz4", "snappy"])
def test_every_compression_reads_back_identically(tmp_path, compression):
    src = [str(SAMPLE_DATA / "jsonl" / "rollout_data" / "2.jsonl")]
    convert(src, str(tmp_path / "z"), _opts(compression="zstd"))
    convert(src, str(tmp_path / "c"), _opts(compression=compression))
    assert read_rows(tmp_path / "c") == read_rows(tmp_path / "z")


def test_output_is_one_dataset(tmp_path):
    import pyarrow.dataset as ds

    convert([str(SAMPLE_DATA / "jsonl" / "rollout_data")], str(tmp_path / "out"), copts(shards=3))
    t = ds.dataset(str(tmp_path / "out" / "data"), format="parquet").to_table()
    assert t.num_rows == 46
    assert sorted(set(t.column("step").to_pylist())) == [1, 2, 3]
    # siblings share their id and mask sum; mask sums add up
    rows = t.to_pylist()
    by = {}
    for r in rows:
        by.setdefault((r["step"], r["rollout_id"]), []).append(r)
    for sibs in by.values():
        total = sum(sum(r["loss_mask"]) for r in sibs)
        assert all(r["rollout_mask_sum"] == total for r in sibs)
    assert Path(tmp_path / "out" / "manifest.json").exists()


# ------------------------------------------------------------------------------ Parquet inputs


def _write_parquet(path, recs):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(recs), path)
    return path


def test_parquet_struct_reward_with_reward_key(tmp_path):
    recs = [make_sample(index=i, group_index=0, reward={"acc": float(i % 2), "fmt": 0.5}) for i in range(4)]
    for r in recs:
        r["metadata"] = "{}"
    _write_parquet(tmp_path / "in" / "1.parquet", recs)
    write_jsonl(tmp_path / "js" / "1.jsonl", [dict(r, metadata={}) for r in recs])
    convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(reward_key="acc"))
    convert([str(tmp_path / "js")], str(tmp_path / "out_js"), _opts(reward_key="acc"))
    assert read_rows(tmp_path / "out") == read_rows(tmp_path / "out_js")
    assert [r["raw_reward"] for r in read_rows(tmp_path / "out")] == [0.0, 1.0, 0.0, 1.0]


def test_parquet_struct_metadata_with_raw_reward_on_some_rows(tmp_path):
    """A native struct column has every key on every row, null where a sample lacks it: a null
    metadata.raw_reward means "absent" (raw_reward = the selected reward), not an invalid sample."""
    recs = [make_sample(index=i, group_index=0, reward=float(i % 2), metadata={"source_name": "math"}) for i in range(4)]
    recs[0]["metadata"] = {"raw_reward": 2.0, "source_name": "math"}
    _write_parquet(tmp_path / "in" / "1.parquet", recs)
    convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    rows = read_rows(tmp_path / "out")
    assert [r["raw_reward"] for r in rows] == [2.0, 1.0, 0.0, 1.0]
    assert [r["source_name"] for r in rows] == ["math"] * 4


def test_parquet_problem_row_beyond_first_batch(tmp_path):
    recs = [make_sample(index=i, group_index=i // 4, reward=float(i % 2), response_length=1, prompt_len=1)
            for i in range(1500)]
    for r in recs:
        r["metadata"] = "{}"
    recs[1234]["status"] = "weird"
    _write_parquet(tmp_path / "in" / "1.parquet", recs)
    with pytest.raises(InvalidInputError) as ei:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    (p,) = ei.value.problems
    assert (p.location.kind, p.location.number, p.field) == ("row", 1234, "status")


# ------------------------------------------------------------------------------ more reject cases


def test_skip_strict_conflict_rejects_all_members(tmp_path):
    samples = [make_sample(index=i, group_index=i // 2, rollout_id=(0 if i in (0, 2) else None), reward=float(i % 2))
               for i in range(4)]
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    res = convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip"))
    assert res["counts"]["rejected"] == 2
    assert [r["sample_index"] for r in read_rows(tmp_path / "out")] == [1, 3]
    rej = read_jsonl(tmp_path / "out" / "rejects.jsonl")
    assert [r["line"] for r in rej] == [1, 3] and all(r["field"] == "rollout_id" for r in rej)


def test_skip_every_sample_of_a_step(tmp_path):
    write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=i, status="x") for i in range(3)])
    write_jsonl(tmp_path / "in" / "2.jsonl", [make_sample(index=i, group_index=0, reward=float(i)) for i in range(2)])
    res = convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(on_error="skip"))
    c = res["counts"]
    assert (c["input_samples"], c["rows"], c["rejected"]) == (5, 2, 3)
    assert read_rows(tmp_path / "out", step=1) == []
    assert len(read_rows(tmp_path / "out", step=2)) == 2


# ------------------------------------------------------------------------------ one step split into byte ranges


@pytest.fixture
def split_inline(monkeypatch):
    """Make convert split even tiny JSONL files into byte ranges, and run the parts in this process."""
    import rollout_cli.run.convert as conv
    import rollout_cli.inputs.jsonl.reader as rj
    from rollout_cli.run.engines.local import InlineEngine

    real = rj.split_ranges
    monkeypatch.setattr(rj, "split_ranges", lambda path, parts, min_bytes=1: real(path, parts, min_bytes=1))
    monkeypatch.setattr(conv, "make_engine", lambda *a, **k: InlineEngine())


def _many(n=40):
    samples = []
    for i in range(n):
        rid = 1000 + i // 3 if (i // 3) % 2 else None  # every other triple is a compact rollout
        samples.append(make_sample(index=i, group_index=i // 6, rollout_id=rid, reward=float(i % 3 == 0),
                                   response_length=1 + i % 4))
    return samples


def test_split_step_gives_identical_bytes(tmp_path, split_inline):
    write_jsonl(tmp_path / "in" / "1.jsonl", _many())
    convert([str(tmp_path / "in")], str(tmp_path / "one"), _opts(workers=1, shards=2, mmap=True))
    convert([str(tmp_path / "in")], str(tmp_path / "four"), _opts(workers=4, shards=2, mmap=True))
    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "four")


def test_split_step_problem_line_numbers(tmp_path, split_inline):
    samples = _many()
    samples[33]["status"] = "bogus"  # line 34, in the last byte range
    write_jsonl(tmp_path / "in" / "1.jsonl", samples)
    with pytest.raises(InvalidInputError) as ei:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts(workers=4))
    (p,) = ei.value.problems
    assert (p.location.number, p.field) == (34, "status")


def test_split_step_rejects_and_ids(tmp_path, split_inline):
    samples = _many()
    samples[33]["status"] = "bogus"  # sample 33 is in rollout 1011 (samples 33-35)
    samples[20]["reward"] = "x"  # a default sample
    write_jsonl(tmp_path / "in" / "1.jsonl", samples, raw_lines={26: b'{"broken'})
    convert([str(tmp_path / "in")], str(tmp_path / "one"), _opts(workers=1, on_error="skip"))
    convert([str(tmp_path / "in")], str(tmp_path / "four"), _opts(workers=4, on_error="skip"))
    assert read_rows(tmp_path / "four") == read_rows(tmp_path / "one")
    rej = read_jsonl(tmp_path / "four" / "rejects.jsonl")
    assert [r["line"] for r in rej] == [21, 27, 34, 35, 36]
    assert rej == read_jsonl(tmp_path / "one" / "rejects.jsonl")


def test_the_converting_process_imports_no_arrow_numpy_or_torch():
    """The driver only plans, schedules and commits: the pool's workers (whose fork server
    preloads the stages) start while it sets up, and `rollout-cli convert` starts fast."""
    import subprocess
    import sys

    code = ("import sys, rollout_cli.cli.app, rollout_cli.run.convert, rollout_cli.core.options, rollout_cli.run.tasks; "
            "print(sorted(m for m in ('pyarrow', 'numpy', 'torch', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------------------ a step in one task


def _staged_path_only(monkeypatch):
    """Force every step through parse tasks and a separate finish (staged rows)."""
    from rollout_cli.run.scheduler import Scheduler

    monkeypatch.setattr(Scheduler, "_whole", lambda self, task: False)


@pytest.mark.parametrize("fmt", ["pt", "parquet"])
def test_a_step_in_one_task_stages_nothing_and_gives_the_same_shards(tmp_path, monkeypatch, fmt):
    import rollout_cli.run.stages as stages

    src = SAMPLE_DATA / fmt / "rollout_data"
    with monkeypatch.context() as m:
        _staged_path_only(m)
        staged = shard_bytes(convert([str(src)], str(tmp_path / "staged"), copts(shards=2, mmap=True))["out"])

    def refuse(path):
        raise AssertionError(f"staged {path}")

    monkeypatch.setattr(stages, "_Staged", refuse)
    whole = shard_bytes(convert([str(src)], str(tmp_path / "whole"), copts(shards=2, mmap=True))["out"])
    assert whole and whole == staged


def test_as_many_steps_as_workers_are_one_task_each_and_stage_nothing(tmp_path, monkeypatch):
    import rollout_cli.run.stages as stages

    def refuse(path):
        raise AssertionError(f"staged {path}")

    src = SAMPLE_DATA / "jsonl" / "rollout_data"
    with monkeypatch.context() as m:
        _staged_path_only(m)
        staged = shard_bytes(convert([str(src)], str(tmp_path / "staged"), copts(shards=2, mmap=True))["out"])
    monkeypatch.setattr(stages, "_Staged", refuse)
    whole = shard_bytes(convert([str(src)], str(tmp_path / "whole"), copts(shards=2, mmap=True))["out"])
    assert whole and whole == staged


@pytest.mark.parametrize("whole", [True, False])
def test_a_step_in_one_task_stops_at_the_problem_budget(tmp_path, monkeypatch, whole):
    samples = [make_sample(index=i, group_index=i) for i in range(30)]
    for s in samples:
        s["status"] = "bogus"
    src = write_jsonl(tmp_path / "in" / "4.jsonl", samples)
    import gzip

    gz = tmp_path / "gz" / "4.jsonl.gz"  # not split, not handed over: one task per step
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(src.read_bytes()))
    if not whole:
        _staged_path_only(monkeypatch)
    with pytest.raises(InvalidInputError) as e:
        convert([str(gz)], str(tmp_path / "o"), copts(max_errors=5))
    assert "invalid samples in 1 file (the first 5 listed; stopped at --max-errors 5)" in str(e.value)
    assert str(e.value).startswith("at least ")
    assert [p.location.number for p in e.value.problems] == [1, 2, 3, 4, 5]
    assert not (tmp_path / "o" / "manifest.json").exists()


# --- object stores ------------------------------------------------------------------------------


def _s3_jsonl(s3, tmp_path, prefix: str) -> str:
    from pyarrow import fs as pafs

    samples = [make_sample(index=i, group_index=i // 2, reward=float(i % 2)) for i in range(6)]
    write_jsonl(tmp_path / prefix / "1.jsonl", samples)
    write_jsonl(tmp_path / prefix / "2.jsonl", [make_sample(index=10 + i, group_index=5, reward=float(i)) for i in range(3)])
    write_jsonl(tmp_path / prefix / "3.jsonl", [make_sample(index=20 + i, group_index=7, reward=float(i)) for i in range(4)])
    pafs.copy_files(str(tmp_path / prefix), f"bkt/{prefix}", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    return f"s3://bkt/{prefix}"


def _objects(s3, prefix: str) -> dict[str, bytes]:
    """Every object under bkt/prefix by its layout path (generation folder left out), with its bytes."""
    from pyarrow import fs as pafs

    from rollout_cli.core import layout

    out = {}
    for i in s3.get_file_info(pafs.FileSelector(f"bkt/{prefix}", recursive=True)):
        if i.type == pafs.FileType.File and not i.path.endswith("manifest.json"):
            with s3.open_input_stream(i.path) as f:
                out[layout.split_generation(i.path[len(f"bkt/{prefix}/"):])[1]] = card_without_generations(f.read())
    return out


def test_object_store_output_uploads_each_file_once(s3, tmp_path, monkeypatch):
    """Each shard and IPC copy is PUT once, where the manifest lists it; nothing is staged and
    copied, and a local engine plans its parsed parts in a local folder."""
    from conftest import crashing_s3
    from rollout_cli.output import manifest
    from rollout_cli.run import convert as convert_mod

    src = _s3_jsonl(s3, tmp_path, "once-in")
    handler = crashing_s3(monkeypatch, s3)
    convert([src], "s3://bkt/once-out", copts(shards=2, mmap=True))
    uploads = [p for name, p in handler.writes if name == "open_output_stream"]
    assert len(uploads) == len(set(uploads))
    assert not any(name in ("copy_file", "move") for name, _ in handler.writes)
    m = manifest.read("s3://bkt/once-out")
    listed = {f"bkt/once-out/{sh['path']}" for s in m["steps"] for sh in s["shards"]}
    listed |= {f"bkt/once-out/{sh['mmap']['path']}" for s in m["steps"] for sh in s["shards"]}
    data = [p for p in uploads if "/data/" in p or "/mmap/" in p or "/eval/" in p]
    assert sorted(data) == sorted(listed) and len(listed) == 12
    # the rest is bookkeeping: the run's pointer, its finished-step records and the manifest
    assert all(p.endswith(("/.staging/run.json", "/manifest.json", "/README.md")) or "/done/" in p for p in set(uploads) - listed)
    # with a pool, an input parsed in pieces stages its parts in a local folder, removed after the run
    monkeypatch.undo()
    from rollout_cli.inputs.jsonl import reader as jsonl

    monkeypatch.setattr(jsonl.split_ranges, "__defaults__", (64,))  # pieces of 64 bytes and up
    planned = []
    real = convert_mod._plan_parts
    monkeypatch.setattr(convert_mod, "_plan_parts", lambda *a: planned.extend(real(*a)) or planned)
    convert([f"{src}/1.jsonl"], "s3://bkt/once-pool", copts(shards=2, workers=2))
    monkeypatch.undo()
    assert len(planned) == 2 and all(t.stage_path.startswith(tempfile.gettempdir()) for t in planned)
    assert not any(os.path.exists(t.stage_path) for t in planned)
    convert([f"{src}/1.jsonl"], "s3://bkt/once-whole", copts(shards=2))
    assert _objects(s3, "once-pool") == _objects(s3, "once-whole")


def test_object_store_inputs_are_fingerprinted_without_a_second_download(s3, tmp_path, monkeypatch):
    """An input on an object store is fingerprinted by the size and mtime the store reports (the
    manifest says so); a local one by its XXH3-128 digest."""
    from conftest import crashing_s3
    from rollout_cli.output import manifest

    src = _s3_jsonl(s3, tmp_path, "fp-in")
    handler = crashing_s3(monkeypatch, s3)
    fp = manifest.file_fingerprint(f"{src}/1.jsonl")
    assert handler.reads == [] and fp["fingerprint"] == "size+mtime" and not set(fp) & set(hashing.INPUT_KEYS)
    assert fp["size"] == (tmp_path / "fp-in" / "1.jsonl").stat().st_size and fp["mtime_ns"] > 0
    convert([src], "s3://bkt/fp-out", copts())
    with_fp = sorted(p for p in handler.reads if p.startswith("bkt/fp-in/"))
    monkeypatch.undo()
    # the inputs are opened as often as in a run that takes no fingerprints (by discovery's
    # peek at the first record, and by the reader)
    handler = crashing_s3(monkeypatch, s3)
    monkeypatch.setattr(manifest, "file_fingerprint", lambda path: {})
    convert([src], "s3://bkt/fp-none", copts())
    monkeypatch.undo()
    assert with_fp == sorted(p for p in handler.reads if p.startswith("bkt/fp-in/")) and with_fp
    m = manifest.read("s3://bkt/fp-out")
    assert all(i["fingerprint"] == "size+mtime" and not set(i) & set(hashing.INPUT_KEYS) for i in m["inputs"])
    local = manifest.file_fingerprint(str(tmp_path / "fp-in" / "1.jsonl"))
    assert set(local) == {"size", "mtime_ns", "xxh3_128"}


def test_object_store_resume_after_a_crash_gives_the_uninterrupted_bytes(s3, tmp_path, monkeypatch):
    """A run on an object store killed part-way is finished by --resume: the steps it finished
    are reused in place (not uploaded again), the shards are those of an uninterrupted run; an
    input rewritten since is converted again."""
    from pyarrow import fs as pafs

    from conftest import crashing_s3
    from rollout_cli.output import manifest

    src = _s3_jsonl(s3, tmp_path, "resume-in")
    convert([src], "s3://bkt/resume-ref", copts(shards=2, mmap=True))
    ref = _objects(s3, "resume-ref")
    count = crashing_s3(monkeypatch, s3)
    convert([src], "s3://bkt/resume-count", copts(shards=2, mmap=True))
    monkeypatch.undo()
    writes = count.writes
    done = [k for k, (name, p) in enumerate(writes) if "/done/" in p]
    put = next(k for k, (name, p) in enumerate(writes) if p.endswith("/manifest.json"))
    for k in (1, done[0] + 1, done[1] + 1, put):  # nothing written, one or two steps done, all but the manifest
        out = f"resume-{k}"
        crashing_s3(monkeypatch, s3, k)
        with pytest.raises(OutputError, match="cannot write the output"):
            convert([src], f"s3://bkt/{out}", copts(shards=2, mmap=True))
        monkeypatch.undo()
        assert not s3.get_file_info(f"bkt/{out}/manifest.json").is_file
        again = crashing_s3(monkeypatch, s3)  # the dead run's writer lease outlives it: wait for it to expire
        convert([src], f"s3://bkt/{out}", copts(shards=2, mmap=True, resume=True, wait=30))
        monkeypatch.undo()
        redone = {p.split("/gen/", 1)[-1].split("/", 1)[-1] for name, p in again.writes if p.endswith(".parquet")}
        assert len(redone) == 2 * (3 - sum(1 for d in done if d < k)), (k, redone)
        assert _objects(s3, out) == ref, f"crash at write {k}"
    # an input rewritten after the commit: only its step is converted again
    s3.delete_file("bkt/resume-in/2.jsonl")
    write_jsonl(tmp_path / "two.jsonl", [make_sample(index=30 + i, group_index=9, reward=float(i)) for i in range(2)])
    pafs.copy_files(str(tmp_path / "two.jsonl"), "bkt/resume-in/2.jsonl", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=s3)
    again = crashing_s3(monkeypatch, s3)
    convert([src], "s3://bkt/resume-ref", copts(shards=2, mmap=True, resume=True))
    monkeypatch.undo()
    assert {p.rsplit("/", 2)[-2] for name, p in again.writes if p.endswith(".parquet")} == {"step-000002"}
    assert manifest.read("s3://bkt/resume-ref")["counts"]["input_samples"] == 6 + 2 + 4


def test_resume_compares_inputs_with_the_algorithm_their_manifest_recorded(tmp_path):
    """Inputs are fingerprinted with XXH3-128; a manifest that recorded BLAKE3 (0.2) is compared
    by hashing the input with BLAKE3: an unchanged step is reused, a changed one converted again."""
    from blake3 import blake3

    src, out = tmp_path / "in", tmp_path / "out"
    write_jsonl(src / "1.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(4)])
    write_jsonl(src / "2.jsonl", [make_sample(index=10 + i, group_index=5) for i in range(3)])
    convert([str(src)], str(out), copts())
    mpath = out / "manifest.json"
    m = json.loads(mpath.read_text())
    assert all(set(i) & set(hashing.INPUT_KEYS) == {"xxh3_128"} for i in m["inputs"])
    for i in m["inputs"]:
        assert i.pop("xxh3_128") == hashing.file_digest(i["path"], "xxh3_128")
        i["blake3"] = blake3(Path(i["path"]).read_bytes()).hexdigest()
    mpath.write_text(json.dumps(m))
    shard = lambda step: out / "data" / f"step-{step:06d}" / "shard-00000-of-00001.parquet"
    before = {step: os.stat(shard(step)).st_ino for step in (1, 2)}
    write_jsonl(src / "2.jsonl", [make_sample(index=10 + i, group_index=5) for i in range(5)])
    convert([str(src)], str(out), copts(resume=True))
    after = {step: os.stat(shard(step)).st_ino for step in (1, 2)}
    assert after[1] == before[1] and after[2] != before[2]
    inputs = {Path(i["path"]).name: i for i in json.loads(mpath.read_text())["inputs"]}
    assert inputs["1.jsonl"]["blake3"] == blake3((src / "1.jsonl").read_bytes()).hexdigest()
    assert inputs["2.jsonl"]["blake3"] == blake3((src / "2.jsonl").read_bytes()).hexdigest()
    assert json.loads(mpath.read_text())["counts"]["rows"] == 9


def test_local_resume_copies_where_hard_links_are_refused(tmp_path, monkeypatch):
    """--resume reuses committed steps by hard links; on a file system without them (EPERM,
    EXDEV, ENOTSUP) it copies them, with the same result."""
    import errno
    import os as os_mod

    from conftest import tree_digest

    src = tmp_path / "in"
    write_jsonl(src / "1.jsonl", [make_sample(index=i, group_index=i // 2) for i in range(4)])
    write_jsonl(src / "2.jsonl", [make_sample(index=10 + i, group_index=5) for i in range(3)])
    linked, copied = tmp_path / "linked", tmp_path / "copied"
    for out in (linked, copied):
        convert([str(src)], str(out), copts(shards=2, mmap=True))
    write_jsonl(src / "3.jsonl", [make_sample(index=20 + i, group_index=7) for i in range(2)])
    convert([str(src)], str(linked), copts(shards=2, mmap=True, resume=True))
    for code in (errno.EPERM, errno.EXDEV, errno.ENOTSUP):
        def refuse(a, b, code=code):
            raise OSError(code, os_mod.strerror(code), a)

        monkeypatch.setattr(os_mod, "link", refuse)
        convert([str(src)], str(copied), copts(shards=2, mmap=True, resume=True))
        monkeypatch.undo()
        assert shard_bytes(copied) == shard_bytes(linked), code
        assert json.loads((copied / "manifest.json").read_text())["steps"] == json.loads((linked / "manifest.json").read_text())["steps"]
        assert not (copied / ".staging").exists()
    # a copy, not a link: the reused file is a file of its own
    assert all(st[0] for st in tree_digest(copied).values())
    assert os_mod.stat(copied / "data" / "step-000001" / "shard-00000-of-00002.parquet").st_nlink == 1


# ------------------------------------------------------------------------------ remove_sample


def _removed_rows(out) -> list[tuple[int, int, bool, int]]:
    """(step, rollout_position, remove_sample, loss-mask total) of every train row."""
    rows = read_rows(out)
    return sorted((r["step"], r["rollout_position"], r["remove_sample"], sum(r["loss_mask"])) for r in rows)


def test_remove_sample_is_a_column_true_where_the_dump_sets_it(sample_data_outputs):
    """sample_data step 1, sample 10 has remove_sample: true (sample_data/README.md): its row
    keeps the flag, as slime's Sample does, with its loss mask zeroed; every other row is false."""
    for fmt, (out, _) in sample_data_outputs.items():
        rows = _removed_rows(out)
        assert [(s, p) for s, p, rm, _ in rows if rm] == [(1, 10)], fmt
        assert all(total == 0 for s, p, rm, total in rows if rm), fmt
        assert all(total > 0 for s, p, rm, total in rows if (s, p) == (1, 9)), fmt  # a neighbour keeps its mask
        assert not any(r["remove_sample"] for r in read_rows(out, "eval")), fmt


@pytest.mark.parametrize("value, removed", [(True, True), (False, False), (None, False), ("absent", False)])
def test_remove_sample_values(tmp_path, value, removed):
    """true keeps the flag and zeroes the mask; false, null and an absent field give false."""
    s = make_sample(index=0, group_index=0, response_length=3, loss_mask=[1, 0, 1])
    if value == "absent":
        del s["remove_sample"]
    else:
        s["remove_sample"] = value
    write_jsonl(tmp_path / "in" / "1.jsonl", [s, make_sample(index=1, group_index=0)])
    convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    row = read_rows(tmp_path / "out")[0]
    assert row["remove_sample"] is removed
    assert row["loss_mask"] == ([0, 0, 0] if removed else [1, 0, 1])


def test_remove_sample_from_nemo_rl_and_prime_rl(tmp_path):
    """NeMo-RL: a row whose sample_loss_mask is 0; prime-rl (--prime-rl-subset all): an errored
    trace (status failed). Both are rows with remove_sample true and a zeroed mask."""
    nemo = tmp_path / "nemo"
    convert([str(SAMPLE_DATA / "nemo_rl")], str(nemo), _opts())
    keep = [json.loads(line)["sample_loss_mask"][0] for line in
            (SAMPLE_DATA / "nemo_rl" / "exp_001" / "train_data_step1.jsonl").read_text().splitlines()]
    step1 = [r for r in sorted(read_rows(nemo, step=1), key=lambda r: r["rollout_position"])]
    assert [r["remove_sample"] for r in step1] == [k == 0 for k in keep] and keep.count(0) == 2
    assert all(sum(r["loss_mask"]) == 0 for r in step1 if r["remove_sample"])
    assert not any(r["remove_sample"] for r in read_rows(nemo, step=2))
    prime = tmp_path / "prime"
    convert([str(SAMPLE_DATA / "prime_rl")], str(prime), _opts(prime_rl_subset="all"))
    rows = read_rows(prime)
    assert [(r["step"], r["status"]) for r in rows if r["remove_sample"]] == [(1, "failed")]
    assert all(sum(r["loss_mask"]) == 0 for r in rows if r["remove_sample"])


def test_resume_onto_an_output_of_schema_version_2_is_refused(tmp_path):
    """The shards of one output share one schema: --resume does not add version-3 steps to a
    version-2 output. It says so and changes neither the manifest nor a shard; --overwrite
    reconverts it."""
    from typer.testing import CliRunner

    from old_outputs import as_schema_version_2
    from rollout_cli.cli.app import app
    from rollout_cli.verification.check import verify_output

    src, out = tmp_path / "in", tmp_path / "out"
    write_jsonl(src / "1.jsonl", [make_sample(index=i, group_index=i // 2, remove_sample=i == 1) for i in range(4)])
    convert([str(src)], str(out), _opts())
    as_schema_version_2(out)
    assert verify_output(str(out))["ok"]
    write_jsonl(src / "2.jsonl", [make_sample(index=10 + i, group_index=5) for i in range(3)])
    before = (shard_bytes(out), (out / "manifest.json").read_bytes())
    res = CliRunner().invoke(app, ["convert", str(src), str(out), "--resume", "--workers", "1", "-q"])
    assert res.exit_code == 2, res.output
    assert "schema version 2" in res.output and "remove_sample" in res.output and "--overwrite" in res.output
    assert (shard_bytes(out), (out / "manifest.json").read_bytes()) == before
    res = CliRunner().invoke(app, ["convert", str(src), str(out), "--overwrite", "--workers", "1", "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "manifest.json").read_text())["schema_version"] == SCHEMA_VERSION
    assert verify_output(str(out))["ok"]
    assert [r["remove_sample"] for r in read_rows(out, step=1)] == [False, True, False, False]


def test_rewards_not_recorded_are_null_and_left_out_of_normalisation(tmp_path, monkeypatch):
    """A format that records no rewards: its rows' reward, raw_reward and selected_reward are
    null, and a prompt group is normalised over its recorded rewards; the output verifies."""
    from lineage_cases import VERSIONS, jsonl_without_rewards, write_unrecorded
    from rollout_cli.verification.check import verify_output

    write_unrecorded(tmp_path / "in")
    with pytest.raises(InvalidInputError, match="reward: expected a number, got null"):
        convert([str(tmp_path / "in")], str(tmp_path / "refused"), _opts())  # JSONL records rewards
    jsonl_without_rewards(monkeypatch)
    convert([str(tmp_path / "in")], str(tmp_path / "out"), _opts())
    rows = read_rows(tmp_path / "out", step=1)
    assert [r["raw_reward"] for r in rows] == [None, None, None, 1.0, None, 0.0]
    assert [r["selected_reward"] for r in rows] == [None, None, None, 1.0, None, 0.0]
    assert [r["reward"] for r in rows][:5] == [None, None, None, pytest.approx(0.70710, abs=1e-4), None]
    assert rows[5]["reward"] == pytest.approx(-0.70710, abs=1e-4)
    assert [r["weight_versions"] for r in rows] == VERSIONS
    res = verify_output(str(tmp_path / "out"))
    assert res["ok"], res["failures"]
