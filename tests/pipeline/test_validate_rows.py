"""The rules for one record (pipeline/validate/rows.py, through the entry normalize_chunk):
every validation rule gives a Problem naming the file, the line/row/sample position, the
field, expected vs got, and the rule's id; valid records are coerced."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_sample, write_pt
from rollout_cli.core.errors import Location
from rollout_cli.pipeline.validate import ID_EXPLICIT, ID_INVALID, ID_MISSING, normalize_chunk, parse_rollout_id
from rollout_cli.inputs.base import RawChunk

FILE = "runs/a/rollout_data/1.jsonl"
# line numbers of the three records of the chunk: the bad one is the middle record, line 6
LINES = [5, 6, 7]


def _chunk(records, kind="line", numbers=None, source=FILE):
    return RawChunk(source, kind, list(numbers or LINES), records)


def _norm(records, reward_key=None, keep_text=False, **kw):
    return normalize_chunk(_chunk(records, **kw), 0, reward_key=reward_key, keep_text=keep_text)


def _one_problem(bad: dict, reward_key=None):
    """Normalise [good, bad, good]; the bad record must be the only invalid one."""
    good0 = make_sample(index=0, group_index=0, reward=1.0)
    good2 = make_sample(index=2, group_index=0, reward=0.0)
    nc = _norm([good0, bad, good2], reward_key=reward_key)
    assert nc.valid == [True, False, True]
    assert len(nc.problems) == 1, nc.problems
    pos, prob = nc.problems[0]
    assert pos == 1
    assert prob.location == Location(FILE, "line", 6)
    assert str(prob).startswith(f"{FILE}:line 6: ")
    return prob


def _bad(**changes):
    s = make_sample(index=1, group_index=0, reward=0.5, response_length=2, prompt_len=3)
    for k, v in changes.items():
        if v is _DELETE:
            del s[k]
        else:
            s[k] = v
    return s


_DELETE = object()
BIG = 2**31  # one past int32


# (id, changes to a valid sample, field, substrings of the message: the expectation and what was got)
RULES = [
    # wrong types
    ("tokens_str", dict(tokens="1 2 3 4 5"), "tokens", ["expected a list of integers", "str"]),
    ("tokens_float", dict(tokens=[1, 2, 3.5, 4, 5]), "tokens", ["expected integers", "float"]),
    ("tokens_nested", dict(tokens=[[1, 2], [3, 4]]), "tokens", ["expected a flat list of integers", "2-D"]),
    ("tokens_empty", dict(tokens=[], response_length=0, loss_mask=[]), "tokens", ["non-empty", "[]"]),
    ("tokens_missing", dict(tokens=_DELETE), "tokens", ["missing"]),
    ("token_over_int32", dict(tokens=[1, 2, BIG, 4, 5]), "tokens", ["[0, 2147483647]", str(BIG)]),
    ("token_negative", dict(tokens=[1, -1, 3, 4, 5]), "tokens", ["[0, 2147483647]", "-1"]),
    ("response_length_str", dict(response_length="2"), "response_length", ["expected an integer", "str"]),
    ("response_length_bool", dict(response_length=True), "response_length", ["expected an integer", "bool"]),
    ("response_length_float", dict(response_length=2.0), "response_length", ["expected an integer", "float"]),
    ("response_length_missing", dict(response_length=_DELETE), "response_length", ["missing"]),
    ("response_length_gt_tokens", dict(response_length=6, loss_mask=[1] * 6), "response_length",
     ["len(tokens) = 5", "got 6"]),
    ("response_length_negative", dict(response_length=-1, loss_mask=None), "response_length", ["got -1"]),
    ("group_index_str", dict(group_index="g0"), "group_index", ["integer", "null", "str"]),
    ("index_float", dict(index=1.5), "index", ["integer", "null", "float"]),
    ("metadata_list", dict(metadata=[1, 2]), "metadata", ["expected a dict or null", "list"]),
    ("remove_sample_str", dict(remove_sample="yes"), "remove_sample", ["expected true/false", "str"]),
    ("train_metadata_str", dict(train_metadata="x"), "train_metadata", ["expected a dict or null", "str"]),
    # rollout ids: integers only
    ("rollout_id_bool", dict(rollout_id=True), "rollout_id", ["integer", "null", "bool"]),
    ("rollout_id_float", dict(rollout_id=3.0), "rollout_id", ["integer", "null", "float"]),
    ("rollout_id_str", dict(rollout_id="3"), "rollout_id", ["integer", "null", "str"]),
    ("rollout_id_list", dict(rollout_id=[3]), "rollout_id", ["integer", "null", "list"]),
    # loss mask
    ("loss_mask_too_long", dict(loss_mask=[1, 1, 1]), "loss_mask", ["expected length 2", "got 3"]),
    ("loss_mask_too_short", dict(loss_mask=[1]), "loss_mask", ["expected length 2", "got 1"]),
    ("loss_mask_value_2", dict(loss_mask=[1, 2]), "loss_mask", ["[0, 1]", "got 2"]),
    ("loss_mask_str", dict(loss_mask="11"), "loss_mask", ["expected a list of 0/1", "str"]),
    # rewards
    ("reward_nan", dict(reward=float("nan")), "reward", ["finite", "nan"]),
    ("reward_inf", dict(reward=float("inf")), "reward", ["finite", "inf"]),
    ("reward_neg_inf", dict(reward=float("-inf")), "reward", ["finite", "-inf"]),
    ("reward_none", dict(reward=None), "reward", ["expected a number", "null"]),
    ("reward_str", dict(reward="1.0"), "reward", ["expected a number", "str"]),
    ("reward_bool", dict(reward=True), "reward", ["expected a number", "bool"]),
    ("reward_missing", dict(reward=_DELETE), "reward", ["missing"]),
    ("reward_dict_without_key", dict(reward={"acc": 1.0, "fmt": 0.5}), "reward",
     ["--reward-key", "dict", "acc", "fmt"]),
    ("raw_reward_nan", dict(metadata={"raw_reward": float("nan")}), "metadata.raw_reward", ["finite", "nan"]),
    # log-probs
    ("log_probs_nan", dict(rollout_log_probs=[-0.5, float("nan")]), "rollout_log_probs", ["finite", "nan", "position 1"]),
    ("log_probs_inf", dict(rollout_log_probs=[float("-inf"), -0.5]), "rollout_log_probs", ["finite", "-inf", "position 0"]),
    ("log_probs_len", dict(rollout_log_probs=[-0.5]), "rollout_log_probs", ["expected length 2", "got 1"]),
    ("log_probs_str", dict(rollout_log_probs=["a", "b"]), "rollout_log_probs", ["expected a flat list of numbers"]),
    ("log_probs_text_item", dict(rollout_log_probs=[-0.5, "nan?"]), "rollout_log_probs",
     ["expected a flat list of numbers", "str 'nan?'", "position 1"]),
    ("log_probs_nested", dict(rollout_log_probs=[[-0.5], [-0.1]]), "rollout_log_probs", ["nested data"]),
    ("teacher_log_probs_nan", dict(teacher_log_probs=[float("nan"), -1.0]), "teacher_log_probs", ["finite", "nan"]),
    # status
    ("status_missing", dict(status=_DELETE), "status", ["missing"]),
    ("status_unknown", dict(status="done"), "status",
     ["pending, completed, truncated, aborted, failed", "'done'"]),
    ("status_int", dict(status=1), "status", ["pending, completed, truncated, aborted, failed", "int"]),
    ("status_upper", dict(status="COMPLETED"), "status", ["'COMPLETED'"]),
    # top-p replay fields (response_length 2: offsets need 3 entries, from 0 to len(ids))
    ("top_p_only_ids", dict(rollout_top_p_token_ids=[1, 2]), "rollout_top_p_token_offsets", ["both"]),
    ("top_p_only_offsets", dict(rollout_top_p_token_offsets=[0, 1, 2]), "rollout_top_p_token_ids", ["both"]),
    ("top_p_offsets_len", dict(rollout_top_p_token_ids=[1, 2], rollout_top_p_token_offsets=[0, 2]),
     "rollout_top_p_token_offsets", ["response_length + 1 = 3", "got 2"]),
    ("top_p_offsets_start", dict(rollout_top_p_token_ids=[1, 2, 3], rollout_top_p_token_offsets=[1, 2, 3]),
     "rollout_top_p_token_offsets", ["from 0", "got 1..3"]),
    ("top_p_offsets_end", dict(rollout_top_p_token_ids=[1, 2, 3], rollout_top_p_token_offsets=[0, 1, 2]),
     "rollout_top_p_token_offsets", ["len(rollout_top_p_token_ids) = 3", "0..2"]),
    ("top_p_ids_over_int32", dict(rollout_top_p_token_ids=[1, BIG], rollout_top_p_token_offsets=[0, 1, 2]),
     "rollout_top_p_token_ids", ["[0, 2147483647]", str(BIG)]),
    # routed experts: [len(tokens)-1, layers, topk]; tokens has 5 entries
    ("experts_rows", dict(rollout_routed_experts=np.zeros((3, 2, 2), dtype=np.int32).tolist()),
     "rollout_routed_experts", ["expected 4 rows", "got 3"]),
    ("experts_2d", dict(rollout_routed_experts=np.zeros((4, 2), dtype=np.int32).tolist()),
     "rollout_routed_experts", ["[len(tokens)-1, layers, topk]", "shape [4, 2]"]),
    ("experts_ragged", dict(rollout_routed_experts=[[[1, 2]], [[1]], [[1, 2]], [[1, 2]]]),
     "rollout_routed_experts", ["[len(tokens)-1, layers, topk]"]),
    ("experts_float", dict(rollout_routed_experts=np.full((4, 1, 2), 0.5).tolist()),
     "rollout_routed_experts", ["integer", "float"]),
    # weight versions: a list of strings (slime's type)
    ("weight_versions_str", dict(weight_versions="1"), "weight_versions", ["expected a list of strings", "str"]),
    ("weight_versions_int_entry", dict(weight_versions=["1", 2]), "weight_versions",
     ["expected a list of strings", "entry int"]),
]


@pytest.mark.parametrize("changes,field,parts", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_rule_gives_located_problem(changes, field, parts):
    prob = _one_problem(_bad(**changes))
    assert prob.field == field
    for part in parts:
        assert part in prob.message, (part, prob.message)
    # the message says what was expected and what it got
    if prob.message != "missing":
        assert "expected" in prob.message and "got" in prob.message, prob.message


# the rule id each RULES case breaks: `<field>.<check>`
RULE_IDS = {
    "tokens_str": "tokens.type", "tokens_float": "tokens.type", "tokens_nested": "tokens.type",
    "tokens_empty": "tokens.empty", "tokens_missing": "tokens.missing", "token_over_int32": "tokens.range",
    "token_negative": "tokens.range",
    "response_length_str": "response_length.type", "response_length_bool": "response_length.type",
    "response_length_float": "response_length.type", "response_length_missing": "response_length.missing",
    "response_length_gt_tokens": "response_length.range", "response_length_negative": "response_length.range",
    "group_index_str": "group_index.type", "index_float": "index.type", "metadata_list": "metadata.type",
    "remove_sample_str": "remove_sample.type", "train_metadata_str": "train_metadata.type",
    "rollout_id_bool": "rollout_id.type", "rollout_id_float": "rollout_id.type", "rollout_id_str": "rollout_id.type",
    "rollout_id_list": "rollout_id.type",
    "loss_mask_too_long": "loss_mask.length", "loss_mask_too_short": "loss_mask.length",
    "loss_mask_value_2": "loss_mask.range", "loss_mask_str": "loss_mask.type",
    "reward_nan": "reward.finite", "reward_inf": "reward.finite", "reward_neg_inf": "reward.finite",
    "reward_none": "reward.type", "reward_str": "reward.type", "reward_bool": "reward.type",
    "reward_missing": "reward.missing", "reward_dict_without_key": "reward.type",
    "raw_reward_nan": "metadata.raw_reward.finite",
    "log_probs_nan": "rollout_log_probs.finite", "log_probs_inf": "rollout_log_probs.finite",
    "log_probs_len": "rollout_log_probs.length", "log_probs_str": "rollout_log_probs.type",
    "log_probs_text_item": "rollout_log_probs.type", "log_probs_nested": "rollout_log_probs.type",
    "teacher_log_probs_nan": "teacher_log_probs.finite",
    "status_missing": "status.missing", "status_unknown": "status.unknown", "status_int": "status.unknown",
    "status_upper": "status.unknown",
    "top_p_only_ids": "rollout_top_p_token_offsets.pair", "top_p_only_offsets": "rollout_top_p_token_ids.pair",
    "top_p_offsets_len": "rollout_top_p_token_offsets.length", "top_p_offsets_start": "rollout_top_p_token_offsets.order",
    "top_p_offsets_end": "rollout_top_p_token_offsets.order", "top_p_ids_over_int32": "rollout_top_p_token_ids.range",
    "experts_rows": "rollout_routed_experts.length", "experts_2d": "rollout_routed_experts.shape",
    "experts_ragged": "rollout_routed_experts.shape", "experts_float": "rollout_routed_experts.shape",
    "weight_versions_str": "weight_versions.type", "weight_versions_int_entry": "weight_versions.type",
}


@pytest.mark.parametrize("name,changes", [(r[0], r[1]) for r in RULES], ids=[r[0] for r in RULES])
def test_rule_gives_its_rule_id(name, changes):
    assert _one_problem(_bad(**changes)).rule == RULE_IDS[name]


def test_every_rule_case_has_its_rule_id():
    assert set(RULE_IDS) == {r[0] for r in RULES}


def test_a_null_reads_as_null_and_text_in_numbers_is_named():
    assert _one_problem(_bad(reward=None)).message == "expected a number, got null"
    assert _one_problem(_bad(rollout_log_probs=[-0.5, "nan?"])).message == \
        "expected a flat list of numbers, got str 'nan?' at position 1"


def test_top_p_decreasing_offsets_are_rejected():
    # offsets start at 0 and end at len(ids) but go down in between
    prob = _one_problem(_bad(rollout_top_p_token_ids=[1, 2, 3], rollout_top_p_token_offsets=[0, 4, 3]))
    assert prob.field == "rollout_top_p_token_offsets"
    assert "non-decreasing" in prob.message


@pytest.mark.parametrize("reward,key,field,parts,rule", [
    ({"acc": 1.0}, "score", "reward", ["'score'", "acc"], "reward.key"),
    (0.5, "score", "reward", ["'score'", "float"], "reward.type"),
    ({"score": float("nan")}, "score", "reward.score", ["finite", "nan"], "reward.finite"),
    ({"score": "high"}, "score", "reward.score", ["expected a number", "str"], "reward.type"),
], ids=["key_missing", "not_a_dict", "nan_under_key", "str_under_key"])
def test_reward_key_rules(reward, key, field, parts, rule):
    good0 = make_sample(index=0, reward={"score": 1.0})
    good2 = make_sample(index=2, reward={"score": 0.0})
    nc = _norm([good0, _bad(reward=reward), good2], reward_key=key)
    assert nc.valid == [True, False, True]
    (pos, prob), = nc.problems
    assert pos == 1 and prob.location == Location(FILE, "line", 6)
    assert prob.field == field
    for part in parts:
        assert part in prob.message, (part, prob.message)
    assert prob.rule == rule  # the reward's rule, whatever key was picked


def test_reward_key_selects_value():
    nc = _norm([make_sample(reward={"score": 0.25, "fmt": 1.0})], reward_key="score", numbers=[1])
    assert nc.valid == [True]
    b = nc.batches[0]
    assert b.column("_reward_value").to_pylist() == [0.25]
    assert b.column("raw_reward").to_pylist() == [0.25]


def test_problem_location_uses_the_chunks_numbers():
    # record positions map to the chunk's own numbers (not 0..n-1)
    recs = [make_sample(index=i) for i in range(3)]
    recs[2]["status"] = "nope"
    nc = _norm(recs, numbers=[40, 41, 43])
    (pos, prob), = nc.problems
    assert pos == 2
    assert prob.location == Location(FILE, "line", 43)


def test_every_problem_of_a_chunk_is_reported():
    recs = [make_sample(index=i) for i in range(4)]
    recs[0]["status"] = None
    recs[1]["reward"] = float("nan")
    recs[3]["tokens"] = "x"
    nc = _norm(recs, numbers=[1, 2, 3, 4])
    assert nc.valid == [False, False, True, False]
    assert [(i, p.field) for i, p in nc.problems] == [(0, "status"), (1, "reward"), (3, "tokens")]
    assert [p.location.number for _, p in nc.problems] == [1, 2, 4]


def test_unparseable_record_keeps_its_reader_problem():
    from rollout_cli.core.errors import Problem

    chunk = _chunk([make_sample(index=0), None, make_sample(index=2)])
    chunk.problems[1] = Problem(Location(FILE, "line", 6), None, "invalid JSON: unexpected end")
    nc = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
    assert nc.valid == [True, False, True]
    (pos, prob), = nc.problems
    assert pos == 1 and prob.location == Location(FILE, "line", 6) and "invalid JSON" in prob.message


def test_a_reader_problem_keeps_its_rule_id(tmp_path):
    """A line that is not JSON, or not an object, is the reader's problem, with its rule id."""
    from rollout_cli.inputs.jsonl.reader import read_jsonl

    path = tmp_path / "1.jsonl"
    path.write_text("\n".join(['{"index": 0', "[1, 2]"]) + "\n")
    chunk = next(read_jsonl(str(path), "1.jsonl"))
    nc = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
    assert [(p.location.number, p.rule) for _, p in nc.problems] == [(1, "json.invalid"), (2, "record.type")]


def test_a_record_of_another_step_breaks_the_step_rule():
    recs = [make_sample(index=i) for i in range(3)]
    recs[1]["step"] = 4
    nc = normalize_chunk(_chunk(recs), 0, reward_key=None, keep_text=False, step=3)
    (pos, prob), = nc.problems
    assert (pos, prob.field, prob.rule) == (1, "step", "step.mismatch")
    assert prob.message == "expected 3 (this file's step), got int 4"


# ------------------------------------------------------------------------------ rollout ids


@pytest.mark.parametrize("value,state,parsed", [
    (None, ID_MISSING, None),
    (0, ID_EXPLICIT, 0),
    (7, ID_EXPLICIT, 7),
    (np.int64(12), ID_EXPLICIT, 12),
    (np.int32(3), ID_EXPLICIT, 3),
    (True, ID_INVALID, None),
    (False, ID_INVALID, None),
    (1.0, ID_INVALID, None),
    ("1", ID_INVALID, None),
    (2**63, ID_INVALID, None),
])
def test_parse_rollout_id(value, state, parsed):
    assert parse_rollout_id(value) == (state, parsed)


def test_chunk_summaries_for_ids_and_groups():
    recs = [
        make_sample(index=0, group_index=3, rollout_id=None),
        make_sample(index=1, group_index=3, rollout_id=9),
        make_sample(index=2, group_index=4, rollout_id=9.0),
        make_sample(index=3, group_index=None, rollout_id=np.int64(5)),
    ]
    recs[1]["status"] = "bogus"  # invalid sample: its id and group are still summarised
    nc = _norm(recs, numbers=[1, 2, 3, 4])
    assert nc.id_state == [ID_MISSING, ID_EXPLICIT, ID_INVALID, ID_EXPLICIT]
    assert nc.explicit_id[1] == 9 and nc.explicit_id[3] == 5
    assert nc.group_index == [3, 3, 4, None]
    assert nc.valid == [True, False, False, True]
    assert sorted(p.field for _, p in nc.problems) == ["rollout_id", "status"]


# ------------------------------------------------------------------------------ coercions


def test_valid_record_columns():
    s = make_sample(index=4, group_index=2, reward=1, response_length=3, prompt_len=2, loss_mask=[1, 0, 1],
                    status="truncated", log_probs=True, metadata={"round_number": 2, "source_name": "code"})
    nc = _norm([s], numbers=[1])
    assert nc.valid == [True] and not nc.problems
    row = pa.Table.from_batches(nc.batches).to_pylist()[0]
    assert row["_pos"] == 0
    assert row["sample_index"] == 4 and row["group_index"] == 2
    assert row["tokens"] == s["tokens"]
    assert row["response_length"] == 3 and row["total_length"] == 5
    assert row["loss_mask"] == [1, 0, 1] and row["_mask_total"] == 2
    assert row["_reward_value"] == 1.0 and row["raw_reward"] == 1.0
    assert row["truncated"] is True and row["status"] == "truncated"
    assert row["rollout_log_probs"] == [-0.5, -0.5, -0.5]
    assert row["teacher_log_probs"] is None
    assert row["round_number"] == 2
    assert row["source_name"] == "code"


@pytest.mark.parametrize("versions, column", [(["3", "4"], ["3", "4"]), (("5",), ["5"]), ([], None), (None, None),
                                              (np.array(["7"], dtype=object), ["7"])])
def test_weight_versions_are_carried_as_strings_null_where_none(versions, column):
    s = make_sample(weight_versions=versions)
    row = pa.Table.from_batches(_norm([s], numbers=[1]).batches).to_pylist()[0]
    assert row["weight_versions"] == column
    del s["weight_versions"]
    assert pa.Table.from_batches(_norm([s], numbers=[1]).batches).to_pylist()[0]["weight_versions"] is None


def test_a_reward_not_recorded_is_null_only_where_the_format_says_so():
    recs = [make_sample(index=0, reward=None), _bad(reward=_DELETE), make_sample(index=2, reward=0.5),
            make_sample(index=3, reward=None, metadata={"raw_reward": 2.0})]
    # slime-shaped input (every format that records rewards): invalid, as ever
    nc = _norm(recs, numbers=[1, 2, 3, 4])
    assert nc.valid == [False, False, True, False]
    assert [p.rule for _, p in nc.problems] == ["reward.type", "reward.missing", "reward.type"]
    # a format that records none: null reward and raw reward, a recorded one kept, a bad one still refused
    nc = normalize_chunk(_chunk(recs + [_bad(reward="x")], numbers=[1, 2, 3, 4, 5]), 0, reward_key=None,
                         keep_text=False, rewards_recorded=False)
    assert nc.valid == [True, True, True, True, False] and nc.problems[0][1].rule == "reward.type"
    rows = pa.Table.from_batches(nc.batches).to_pylist()
    assert [(r["_reward_value"], r["raw_reward"]) for r in rows] == [(None, None), (None, None), (0.5, 0.5), (None, 2.0)]


def test_numpy_inputs_as_from_pt_dumps():
    s = make_sample(index=0, response_length=2, prompt_len=2)
    s["tokens"] = np.array([5, 6, 7, 8], dtype=np.int32)
    s["loss_mask"] = np.array([1, 0], dtype=np.int64)
    s["rollout_top_p_token_ids"] = np.array([7, 8, 9], dtype=np.int32)
    s["rollout_top_p_token_offsets"] = np.array([0, 1, 3], dtype=np.int32)
    s["rollout_routed_experts"] = np.arange(3 * 2 * 2, dtype=np.int32).reshape(3, 2, 2)
    s["reward"] = np.float64(0.5)
    s["response_length"] = np.int64(2)
    nc = _norm([s], numbers=[0], kind="sample")
    assert nc.valid == [True], nc.problems
    row = pa.Table.from_batches(nc.batches).to_pylist()[0]
    assert row["tokens"] == [5, 6, 7, 8]
    assert row["loss_mask"] == [1, 0]
    assert row["rollout_top_p_token_offsets"] == [0, 1, 3]
    assert row["rollout_routed_experts"] == list(range(12))
    assert row["rollout_routed_experts_shape"] == [3, 2, 2]
    assert row["_reward_value"] == 0.5


def test_nan_in_numpy_log_probs():
    s = make_sample(index=0, response_length=2)
    s["rollout_log_probs"] = np.array([-0.1, np.nan], dtype=np.float32)
    nc = _norm([s], numbers=[0], kind="sample")
    (pos, prob), = nc.problems
    assert prob.field == "rollout_log_probs" and "finite" in prob.message
    assert prob.location == Location(FILE, "sample", 0)


def test_token_id_at_int32_max_is_accepted():
    s = make_sample(index=0)
    s["tokens"][0] = 2**31 - 1
    nc = _norm([s], numbers=[1])
    assert nc.valid == [True]
    assert pa.Table.from_batches(nc.batches).column("tokens").to_pylist()[0][0] == 2**31 - 1


# ------------------------------------------------------------------------------ locations per format


def test_parquet_problem_names_row(tmp_path):
    from rollout_cli.inputs.parquet.reader import read_parquet

    recs = [make_sample(index=i) for i in range(4)]
    recs[2]["status"] = "weird"
    for r in recs:
        r["metadata"] = "{}"
    path = tmp_path / "5.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path)
    problems = []
    base = 0
    for raw in read_parquet(str(path), "5.parquet"):
        nc = normalize_chunk(raw, base, reward_key=None, keep_text=False)
        base += len(raw)
        problems.extend(nc.problems)
    (pos, prob), = problems
    assert pos == 2
    assert prob.location == Location("5.parquet", "row", 2)
    assert prob.field == "status" and "'weird'" in prob.message


def test_pt_problem_names_sample_position(tmp_path):
    from types import SimpleNamespace

    from rollout_cli.inputs.slime_pt.reader import read

    recs = [make_sample(index=i) for i in range(3)]
    recs[1]["loss_mask"] = [1, 1, 1]
    path = write_pt(tmp_path / "dump_8.pt", recs, 8)
    info = SimpleNamespace()
    (chunk,) = read(SimpleNamespace(path=str(path), display="dump_8.pt"),
                    SimpleNamespace(trust_pickle=False, chunk_records=None), info)
    assert info.step == 8 and not info.train_dump
    nc = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
    (pos, prob), = nc.problems
    assert pos == 1
    assert prob.location == Location("dump_8.pt", "sample", 1)
    assert prob.field == "loss_mask" and "expected length 2" in prob.message and "got 3" in prob.message


def test_location_strings():
    assert str(Location("a.jsonl", "line", 3)) == "a.jsonl:line 3"
    assert Location("a.parquet", "row", 0).to_dict() == {"file": "a.parquet", "row": 0}


# the simdjson reader gives the long lists as int64/float64 arrays, whose value checks run once
# per batch; the results must be those of the per-record checks lists get
_ints = st.lists(st.sampled_from([0, 1, 7, 2**31 - 1, 2**31, -1, 2]), min_size=0, max_size=6)
_floats = st.lists(st.sampled_from([0.0, -0.5, 1e-45, 3.5e38, 1e39, -1e39, 7]), max_size=6)


@st.composite
def _record(draw):
    tokens = draw(_ints)
    rl = draw(st.integers(0, len(tokens)))
    rec = {"index": draw(st.integers(0, 9)), "group_index": 0, "tokens": tokens, "response_length": rl,
           "loss_mask": draw(st.one_of(st.none(), st.lists(st.sampled_from([0, 1, 1, 2, -1]), min_size=rl, max_size=rl))),
           "rollout_log_probs": draw(st.one_of(st.none(), st.lists(st.sampled_from([0.0, -0.25, 1e39, 3e38]), min_size=rl, max_size=rl))),
           "teacher_log_probs": draw(st.one_of(st.none(), _floats)),
           "status": draw(st.sampled_from(["completed", "completed", "lost"])), "reward": 1.0}
    if draw(st.booleans()):
        rec["remove_sample"] = True
    return rec


def _as_arrays(rec: dict) -> dict:
    out = dict(rec)
    for k, dtype in (("tokens", np.int64), ("loss_mask", np.int64), ("rollout_log_probs", np.float64), ("teacher_log_probs", np.float64)):
        if isinstance(out.get(k), list):
            out[k] = np.array(out[k], dtype=dtype)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_record(), min_size=1, max_size=6))
def test_property_batch_checks_match_per_record_checks(records):
    numbers = list(range(1, len(records) + 1))
    exact = normalize_chunk(_chunk(records, numbers=numbers), 0, reward_key=None, keep_text=False)
    batch = normalize_chunk(_chunk([_as_arrays(r) for r in records], numbers=numbers), 0, reward_key=None, keep_text=False)
    assert [(i, str(p)) for i, p in batch.problems] == [(i, str(p)) for i, p in exact.problems]
    assert batch.valid == exact.valid
    assert len(batch.batches) == len(exact.batches)
    assert all(a.equals(b) for a, b in zip(batch.batches, exact.batches))
