"""Columnar validation (Parquet chunks) against the row checks, for top-p and routed experts."""
from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout_cli.inputs.base import RawChunk
from rollout_cli.inputs.parquet.reader import read_parquet
from rollout_cli.pipeline.validate import batch, columns, normalize_chunk, pre_schema
from rollout_cli.pipeline.validate import rows as row_rules

TP_IDS, TP_OFF, REXP = "rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts"
BIG = 2**31  # one past int32

# each bad kind and the field its problem names (the row's other fields are valid)
TOP_P_BAD = {
    "only_ids": TP_OFF, "only_offsets": TP_IDS, "negative_id": TP_IDS, "id_over_int32": TP_IDS,
    "offsets_length": TP_OFF, "negative_offset": TP_OFF, "decreasing": TP_OFF, "first_not_0": TP_OFF,
    "last_not_len": TP_OFF,
}
EXPERTS_BAD = ("outer_length", "negative", "over_int32", "ragged_inner", "ragged_layers", "empty_outer",
               "no_layers", "null_id",
               "null_lists", "null_steps")


@st.composite
def _top_p(draw, rl: int):
    """(ids, offsets, bad kind or None)."""
    kind = draw(st.sampled_from(["none", "valid", "valid", *TOP_P_BAD]))
    counts = draw(st.lists(st.integers(0, 3), min_size=rl, max_size=rl))
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    ids = draw(st.lists(st.integers(0, 50), min_size=off[-1], max_size=off[-1]))
    if kind == "none":
        return None, None, None
    if kind == "only_ids":
        return ids, None, kind
    if kind == "only_offsets":
        return None, off, kind
    if kind in ("negative_id", "id_over_int32"):
        ids = ids + [-1 if kind == "negative_id" else BIG]
        off[-1] += 1
    elif kind == "offsets_length":
        off = off + [off[-1]] if draw(st.booleans()) or len(off) == 1 else off[:-1]
    elif kind == "negative_offset":
        off[0] = -1
    elif kind == "decreasing":
        if rl < 2:  # no room between the first and the last offset: the wrong length instead
            return ids, off + [off[-1] - 1], kind
        off[-2] = off[-1] + 1  # down at the end; still from 0 to len(ids)
    elif kind == "first_not_0":
        off = [o + 1 for o in off]
        ids = ids + [0]
    elif kind == "last_not_len":
        ids = ids + [0]
    return ids, off, None if kind == "valid" else kind


@st.composite
def _experts(draw, n_tok: int):
    """(routed experts, bad kind or None)."""
    kind = draw(st.sampled_from(["none", "valid", "valid", *EXPERTS_BAD]))
    if kind == "none":
        return None, None
    layers, topk = draw(st.integers(1, 3)), draw(st.integers(0, 3))
    steps = n_tok - 1 + (draw(st.sampled_from([-1, 1])) if kind == "outer_length" else 0)
    steps = max(steps, 0)
    ids = st.integers(0, 63)
    rexp = [[draw(st.lists(ids, min_size=topk, max_size=topk)) for _ in range(layers)] for _ in range(steps)]
    if kind in ("valid", "outer_length"):
        if kind == "outer_length" and steps == n_tok - 1:  # n_tok == 1: -1 was clipped
            steps += 1
            rexp.append([[0] * topk for _ in range(layers)])
        if not rexp:  # n_tok == 1: numpy makes [] a 1-D array, which the row checks reject
            return rexp, "empty_outer"
        return rexp, kind if kind != "valid" else None
    if kind == "empty_outer":
        return [], kind
    if kind == "no_layers":
        return [[] for _ in range(max(steps, 1))], kind
    if kind == "null_lists":
        return [[None] * layers for _ in range(max(steps, 1))], kind
    if kind == "null_steps":
        return [None] * max(steps, 1), kind
    if not rexp:
        rexp = [[[0] * topk for _ in range(layers)]]  # n_tok == 1: already the wrong length
    first = rexp[0][0]
    if kind in ("negative", "over_int32", "null_id"):
        rexp[-1][-1] = rexp[-1][-1] + [{"negative": -1, "over_int32": BIG, "null_id": None}[kind]]
        # keep the row rectangular: only the id is wrong
        rexp = [[lst + [0] if lst is not rexp[-1][-1] else lst for lst in step] for step in rexp]
    elif kind == "ragged_inner":
        if len(rexp) == 1 and len(rexp[0]) == 1:
            rexp[0].append(list(first))
        rexp[0][0] = first + [1]
    elif kind == "ragged_layers":
        if len(rexp) == 1:
            rexp.append(list(rexp[0]))
        rexp[0] = rexp[0] + [[0] * topk]
    return rexp, kind


@st.composite
def _sample(draw, i: int):
    rl = draw(st.integers(0, 4))
    tokens = draw(st.lists(st.integers(0, 100), min_size=max(rl, 1), max_size=rl + 3))
    ids, off, tp_bad = draw(_top_p(rl))
    rexp, ex_bad = draw(_experts(len(tokens)))
    rec = {"index": i, "group_index": i // 2, "tokens": tokens, "response_length": rl,
           "loss_mask": [1] * rl, "reward": 1.0, "status": "completed",
           TP_IDS: ids, TP_OFF: off, REXP: rexp}
    # the first failing check names the field: top-p is checked before routed experts
    want = TOP_P_BAD[tp_bad] if tp_bad else REXP if ex_bad else None
    return rec, want


@st.composite
def _samples(draw):
    n = draw(st.integers(1, 8))
    return [draw(_sample(i)) for i in range(n)]


def _write(path: Path, recs: list[dict], json_text: bool) -> None:
    t = pa.Table.from_pylist(recs)
    if json_text:
        cols = {k: pa.array([orjson.dumps(x).decode() for x in t.column(k).to_pylist()], pa.string())
                if k in (TP_IDS, TP_OFF, REXP) else t.column(k) for k in t.column_names}
        t = pa.table(cols)
    pq.write_table(t, path)


def _both(path: Path, recs: list[dict]):
    """(the columnar result of reading `path`, the row checks' result for the same samples)."""
    chunks = list(read_parquet(str(path), "1.parquet", chunk_rows=len(recs)))
    assert len(chunks) == 1 and chunks[0].columns is not None
    col = normalize_chunk(chunks[0], 0, reward_key=None, keep_text=False)
    rows = RawChunk("1.parquet", "row", list(range(len(recs))), recs)
    return col, normalize_chunk(rows, 0, reward_key=None, keep_text=False)


def _table(batches):
    return pa.Table.from_batches(batches, schema=pre_schema(False)).combine_chunks()


SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=250, **SETTINGS)
@given(_samples(), st.booleans())
def test_columnar_top_p_and_experts_match_the_row_checks(drawn, json_text):
    recs = [r for r, _ in drawn]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "1.parquet"
        _write(path, recs, json_text)
        col, row = _both(path, recs)
    got = [(i, p.field, p.message, p.location, p.rule) for i, p in col.problems]
    assert got == [(i, p.field, p.message, p.location, p.rule) for i, p in row.problems]
    # every bad row is rejected, for the reason it was made bad; every other row passes
    assert [(i, f) for i, f, _, _, _ in got] == [(i, want) for i, (_, want) in enumerate(drawn) if want]
    assert col.valid == row.valid == [want is None for _, want in drawn]
    assert _table(col.batches).equals(_table(row.batches))


def _valid(n: int) -> list[dict]:
    out = []
    for i in range(n):
        rl, n_tok = 2 + i % 3, 5 + i % 3
        out.append({"index": i, "group_index": i // 2, "tokens": list(range(n_tok)), "response_length": rl,
                    "loss_mask": [1] * rl, "reward": 0.5, "status": "completed",
                    TP_IDS: list(range(rl * 2)), TP_OFF: list(range(0, 2 * rl + 1, 2)),
                    REXP: [[[i, j, 2], [3, 4, 5]] for j in range(n_tok - 1)] if i % 4 else None})
    return out


@pytest.mark.parametrize("json_text", [False, True])
def test_valid_top_p_and_experts_skip_the_row_checks(tmp_path, monkeypatch, json_text):
    recs = _valid(8)
    path = tmp_path / "1.parquet"
    _write(path, recs, json_text)
    _, want = _both(path, recs)
    calls = []
    real = row_rules.validate_record
    monkeypatch.setattr(row_rules, "validate_record", lambda rec, *a, **kw: calls.append(rec) or real(rec, *a, **kw))
    chunk = next(read_parquet(str(path), "1.parquet"))
    assert all(isinstance(chunk.columns[k], pa.Array) for k in (TP_IDS, TP_OFF, REXP))
    got = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
    assert calls == []
    assert got.valid == [True] * 8
    assert _table(got.batches).equals(_table(want.batches))
    shape = _table(got.batches).column("rollout_routed_experts_shape").to_pylist()
    assert shape == [None if i % 4 == 0 else [4 + i % 3, 2, 3] for i in range(8)]


def test_only_the_failing_row_is_checked_by_itself(tmp_path, monkeypatch):
    recs = _valid(6)
    recs[3][TP_OFF] = recs[3][TP_OFF][::-1]
    recs[5][REXP][1][0] = [1]  # ragged
    path = tmp_path / "1.parquet"
    _write(path, recs, False)
    calls = []
    real = row_rules.validate_record
    monkeypatch.setattr(row_rules, "validate_record", lambda rec, *a, **kw: calls.append(rec["index"]) or real(rec, *a, **kw))
    nc = normalize_chunk(next(read_parquet(str(path), "1.parquet")), 0, reward_key=None, keep_text=False)
    assert calls == [3, 5]
    assert [(i, p.field) for i, p in nc.problems] == [(3, TP_OFF), (5, REXP)]
    assert "ragged" in nc.problems[1][1].message


@pytest.mark.parametrize("typ", [
    pa.list_(pa.list_(pa.list_(pa.uint8()))),
    pa.large_list(pa.list_(pa.large_list(pa.int32()))),
    pa.list_(pa.large_list(pa.list_(pa.uint64()))),
])
def test_expert_ids_of_any_integer_width(tmp_path, typ):
    recs = _valid(5)
    t = pa.Table.from_pylist(recs)
    t = t.set_column(t.schema.get_field_index(REXP), REXP, t.column(REXP).cast(typ))
    t = t.set_column(t.schema.get_field_index(TP_IDS), TP_IDS, t.column(TP_IDS).cast(pa.large_list(pa.uint16())))
    pq.write_table(t, tmp_path / "1.parquet")
    col, row = _both(tmp_path / "1.parquet", recs)
    assert col.valid == row.valid == [True] * 5
    assert _table(col.batches).equals(_table(row.batches))


def test_experts_of_floats_are_checked_row_by_row(tmp_path):
    recs = _valid(3)
    recs[2][REXP] = [[[0.5] * 3] * 2] * 6
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "1.parquet")
    # the column is float: every row's ids are floats in the file, as the row checks see them
    col, row = _both(tmp_path / "1.parquet", pq.read_table(tmp_path / "1.parquet").to_pylist())
    assert [(i, p.field, p.message) for i, p in col.problems] == [(i, p.field, p.message) for i, p in row.problems]
    assert [i for i, _ in col.problems] == [1, 2]
    assert "of float64" in col.problems[0][1].message
    assert _table(col.batches).equals(_table(row.batches))


def test_batches_stay_within_the_list_limit(tmp_path, monkeypatch):
    limit = 80  # two or three rows of routed experts
    monkeypatch.setattr(batch, "MAX_BATCH_VALUES", limit)
    recs = _valid(12)
    recs[6][TP_IDS] = None  # one slow row among the fast ones
    _write(tmp_path / "1.parquet", recs, False)
    col, row = _both(tmp_path / "1.parquet", recs)
    assert [i for i, _ in col.problems] == [6]
    assert len(col.batches) > 2
    for b in col.batches:
        assert max(len(b.column(k).flatten()) for k in ("tokens", REXP)) <= limit
    assert _table(col.batches).equals(_table(row.batches))
    assert _table(col.batches).column("_pos").to_pylist() == [i for i in range(12) if i != 6]


# --- the per-row fields on columns (validate_columns._scalars_on_columns) -------------------

_CLEAN_KINDS = {"rollout_id": ["absent", "int64", "int32", "nulls"], "index": ["absent", "int64", "uint8", "nulls"],
                "group_index": ["absent", "int64", "uint8"], "step": ["absent", "int64"],
                "remove_sample": ["absent", "bool"], "source": ["absent", "text"],
                "train_metadata": ["absent", "nulls"], "prompt": ["absent", "text"]}


def _column(draw, name: str, n: int, clean: bool):
    """One scalar column of a drawn kind (or None: absent); values good and bad, or, when
    `clean`, only values every row rule accepts."""
    big = st.integers(-(2**63), 2**63 - 1)
    ints = lambda lo, hi: st.lists(st.one_of(st.none(), st.integers(lo, hi)), min_size=n, max_size=n)
    kind = draw(st.sampled_from({
        "rollout_id": ["absent", "int64", "int32", "uint64", "float", "text", "nulls"],
        "index": ["absent", "int64", "uint8", "bool", "nulls"],
        "group_index": ["absent", "int64", "uint8", "negative"],
        "step": ["absent", "int64", "text"],
        "remove_sample": ["absent", "bool", "int64"],
        "source": ["absent", "text", "int64"],
        "train_metadata": ["absent", "nulls", "struct"],
        "prompt": ["absent", "text", "int64"],
    }.get(name, ["absent"]) if not clean else _CLEAN_KINDS[name]))
    if kind == "absent":
        return None
    if kind == "nulls":
        return pa.nulls(n)
    if kind == "int64":
        lo = 0 if name != "rollout_id" else -(2**63)
        if name == "step":
            return pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from([3] if clean else [3, 3, 3, 4])), min_size=n, max_size=n)), pa.int64())
        if name == "remove_sample":
            return pa.array(draw(ints(0, 1)), pa.int64())
        return pa.array(draw(ints(lo, 2**63 - 1) if name == "rollout_id" else ints(0, 50)), pa.int64())
    if kind == "int32":
        return pa.array(draw(ints(-(2**31), 2**31 - 1)), pa.int32())
    if kind == "uint64":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.integers(0, 2**64 - 1)), min_size=n, max_size=n)), pa.uint64())
    if kind == "uint8":
        return pa.array(draw(ints(0, 255)), pa.uint8())
    if kind == "negative":
        return pa.array(draw(ints(-3, 3)), pa.int64())
    if kind == "float":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.floats(-5, 5)), min_size=n, max_size=n)), pa.float64())
    if kind == "bool":
        return pa.array(draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n)), pa.bool_())
    if kind == "text":
        if name == "step":
            return pa.array(["3"] * n)
        return pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(["", "a", "web"])), min_size=n, max_size=n)))
    if kind == "struct":
        return pa.array([{"a": k} for k in range(n)])
    raise AssertionError(kind)


@st.composite
def _scalar_chunk(draw):
    n = draw(st.integers(1, 6))
    clean = draw(st.booleans())
    cols = {}
    for name in ("rollout_id", "index", "group_index", "step", "remove_sample", "source", "train_metadata", "prompt"):
        c = _column(draw, name, n, clean)
        if c is not None:
            cols[name] = c
    rl = draw(st.lists(st.integers(0 if clean else -1, 3), min_size=n, max_size=n))
    cols["response_length"] = pa.array(rl, draw(st.sampled_from([pa.int64(), pa.int16()])))
    cols["tokens"] = pa.array([[5] * max(r, 1) for r in rl], pa.list_(pa.int64()))
    cols["loss_mask"] = pa.array([[1] * max(r, 0) for r in rl], pa.list_(pa.int64()))
    status = draw(st.lists(st.sampled_from(["completed", "truncated", "aborted"] + ([] if clean else ["done", None])),
                           min_size=n, max_size=n))
    cols["status"] = pa.array(status, pa.string())
    recorded = draw(st.booleans())  # the format's rewards_recorded: False lets a reward be null
    rkind = draw(st.sampled_from(["float64", "float32", "int64"] + ([] if clean and recorded else ["bool", "absent"])
                                 + ([] if recorded else ["nulls", "absent"])))
    if rkind == "nulls":
        cols["reward"] = pa.nulls(n)
    elif rkind != "absent":
        bad = st.nothing() if clean else st.sampled_from([float("nan"), float("inf")])
        vals = draw(st.lists(st.one_of(st.floats(-3, 3, width=32), bad, st.nothing() if recorded else st.none()),
                             min_size=n, max_size=n))
        if rkind == "int64":
            vals = [x if x is None else int(x) if x == x and abs(x) != float("inf") else 7 for x in vals]
        if rkind == "bool":
            vals = [x if x is None else x > 0 for x in vals]
        cols["reward"] = pa.array(vals, {"float64": pa.float64(), "float32": pa.float32(), "int64": pa.int64(), "bool": pa.bool_()}[rkind])
    mkind = draw(st.sampled_from(["absent", "struct", "struct"] + ([] if clean else ["text"])))
    if mkind == "struct":
        rr_type = draw(st.sampled_from([pa.float64(), pa.int32(), pa.null()] + ([] if clean else [pa.bool_()])))
        rr = draw(st.lists(st.one_of(st.none(), st.floats(-2, 2), st.nothing() if clean else st.just(float("nan"))),
                           min_size=n, max_size=n))
        if pa.types.is_integer(rr_type):
            rr = [None if x is None or x != x else int(x) for x in rr]
        elif pa.types.is_boolean(rr_type):
            rr = [None if x is None or x != x else x > 0 for x in rr]
        elif pa.types.is_null(rr_type):
            rr = [None] * n
        fields = [pa.array(rr, rr_type), pa.array(draw(st.lists(st.one_of(st.none(), st.integers(0 if clean else -1, 4)), min_size=n, max_size=n)), pa.int64()),
                  pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(["", "math", "code"])), min_size=n, max_size=n)), pa.string()),
                  pa.array(list(range(n)), pa.int64())]
        names = ["raw_reward", "round_number", "source_name", "turns"]
        keep = draw(st.lists(st.sampled_from(range(4)), unique=True, min_size=1, max_size=4))
        struct_nulls = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        cols["metadata"] = pa.StructArray.from_arrays([fields[k] for k in sorted(keep)], [names[k] for k in sorted(keep)],
                                                      mask=pa.array(struct_nulls))
    elif mkind == "text":
        cols["metadata"] = pa.array(["{}"] * n)
    wkind = draw(st.sampled_from(["absent", "nulls", "list", "large"] + ([] if clean else ["ints", "null_entry"])))
    entry = st.sampled_from(["1", "2", "12"])
    versions = draw(st.lists(st.one_of(st.none(), st.lists(entry, max_size=3)), min_size=n, max_size=n))
    if wkind == "nulls":
        cols["weight_versions"] = pa.nulls(n)
    elif wkind in ("list", "large"):
        cols["weight_versions"] = pa.array(versions, pa.list_(pa.string()) if wkind == "list" else pa.large_list(pa.large_string()))
    elif wkind == "ints":
        cols["weight_versions"] = pa.array([v and [int(x) for x in v] for v in versions], pa.list_(pa.int64()))
    elif wkind == "null_entry":
        cols["weight_versions"] = pa.array([v and v + [None] for v in versions], pa.list_(pa.string()))
    keep_text = draw(st.booleans())
    step = draw(st.sampled_from([None, 3]))
    return RawChunk("1.parquet", "row", list(range(n)), None, {}, cols), keep_text, step, recorded


def _summary(nc):
    return ([(i, p.field, p.message, p.location, p.rule) for i, p in nc.problems], nc.valid, nc.id_state, nc.explicit_id,
            nc.group_index)


@settings(max_examples=400, **SETTINGS)
@given(_scalar_chunk())
def test_per_row_fields_on_columns_match_the_row_rules(drawn):
    _same_both_ways(*drawn, "_scalars_on_columns")


def _same_both_ways(chunk, keep_text, step, recorded, off: str, same_bytes: bool = False) -> None:
    """normalize_columns of `chunk` gives the same rows and problems with columns' `off`
    disabled (the row rules then decide), and with `same_bytes` the same Arrow copy too."""
    from unittest import mock

    got = columns.normalize_columns(chunk, 7, reward_key=None, keep_text=keep_text, step=step, rewards_recorded=recorded)
    with mock.patch.object(columns, off, lambda *a: None):
        want = columns.normalize_columns(chunk, 7, reward_key=None, keep_text=keep_text, step=step,
                                         rewards_recorded=recorded)
    assert _summary(got) == _summary(want)
    schema = pre_schema(keep_text)
    assert pa.Table.from_batches(got.batches, schema=schema).equals(pa.Table.from_batches(want.batches, schema=schema))
    if same_bytes:  # the Arrow copy's bytes too
        assert _ipc_bytes(got.batches, schema) == _ipc_bytes(want.batches, schema)


def test_plain_parquet_columns_skip_the_row_rules(tmp_path, monkeypatch):
    """A dump of plain types (the bench's, pyarrow's inference from Python lists) is checked
    on columns only: no row goes through the per-row rules."""
    recs = [{"group_index": i // 2, "index": i, "rollout_id": None if i % 3 else i, "tokens": [1, 2, 3],
             "response_length": 2, "reward": 0.5, "loss_mask": [1, 0], "rollout_log_probs": [-0.1, -0.2],
             "status": "truncated" if i == 4 else "completed",
             "metadata": {"source": "math", "turns": 1, "raw_reward": None if i % 2 else 1.0}} for i in range(6)]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "1.parquet")
    monkeypatch.setattr(columns, "_scalars_by_rows", lambda *a: (_ for _ in ()).throw(AssertionError("row rules ran")))
    chunk = next(read_parquet(str(tmp_path / "1.parquet"), "1.parquet"))
    nc = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
    assert nc.valid == [True] * 6 and nc.explicit_id == [0, None, None, 3, None, None]
    t = pa.Table.from_batches(nc.batches)
    assert t.column("raw_reward").to_pylist() == [1.0, 0.5, 1.0, 0.5, 1.0, 0.5]
    assert t.column("truncated").to_pylist() == [False] * 4 + [True, False]
    assert t.column("source_name").to_pylist() == ["unknown"] * 6  # metadata.source is not source_name


def test_weight_versions_and_unrecorded_rewards_stay_on_columns(tmp_path, monkeypatch):
    """A Parquet dump with weight_versions (list<string>) and, from a format that records no
    rewards, a null reward column is checked on columns: empty lists read as null."""
    recs = [{"index": i, "group_index": 0, "tokens": [1, 2, 3], "response_length": 2, "status": "completed",
             "reward": None, "weight_versions": [["4"], ["3", "4"], [], None][i]} for i in range(4)]
    pq.write_table(pa.Table.from_pylist(recs), tmp_path / "1.parquet")
    monkeypatch.setattr(columns, "_scalars_by_rows", lambda *a: (_ for _ in ()).throw(AssertionError("row rules ran")))
    nc = normalize_chunk(next(read_parquet(str(tmp_path / "1.parquet"), "1.parquet")), 0, reward_key=None,
                         keep_text=False, rewards_recorded=False)
    t = pa.Table.from_batches(nc.batches)
    assert nc.valid == [True] * 4
    assert t.column("weight_versions").to_pylist() == [["4"], ["3", "4"], None, None]
    assert t.column("_reward_value").null_count == 4 and t.column("raw_reward").null_count == 4


# --- a JSON reader's Python values on columns (validate_columns._typed) --------------------

_ODD = st.sampled_from([True, False, 2**63, -(2**63) - 1, 2**70, 1.5, -1, "3", "", [1], {"a": 1}, float("nan"),
                        float("inf"), 2**60 + 1])


def _value(draw, good, odd: bool):
    return draw(st.one_of(good, st.none(), _ODD) if odd else st.one_of(good, st.none()))


@st.composite
def _json_records(draw):
    """Records as a JSON reader hands them on (numeric lists as arrays, the rest as parsed),
    most of them plain, some with a value of another type in one field."""
    import numpy as np

    n = draw(st.integers(1, 6))
    odd = draw(st.booleans())
    recs = []
    for i in range(n):
        rl = draw(st.integers(0, 3))
        rec = {"tokens": np.full(rl + 1, 5, np.int64), "loss_mask": np.ones(rl, np.int64),
               "response_length": _value(draw, st.just(rl), odd),
               "status": _value(draw, st.sampled_from(["completed", "truncated", "aborted"]), odd),
               "reward": _value(draw, st.one_of(st.floats(-3, 3), st.integers(-3, 3)), odd)}
        for k, good in (("index", st.integers(0, 9)), ("group_index", st.integers(0, 3)),
                        ("rollout_id", st.integers(-(2**63), 2**63 - 1)), ("step", st.just(3)),
                        ("remove_sample", st.booleans()), ("source", st.sampled_from(["", "web"])),
                        ("train_metadata", st.none()), ("weight_versions", st.lists(st.sampled_from(["1", "2"]), max_size=2)),
                        ("prompt", st.sampled_from(["", "q"]))):
            if draw(st.booleans()):
                rec[k] = _value(draw, good, odd)
        if draw(st.booleans()):
            md = {}
            for k, good in (("raw_reward", st.floats(-2, 2)), ("round_number", st.integers(0, 4)),
                            ("source_name", st.sampled_from(["", "math"])), ("turns", st.integers(0, 3))):
                if draw(st.booleans()):
                    md[k] = _value(draw, good, odd)
            rec["metadata"] = md if not odd or draw(st.booleans()) else _value(draw, st.just(md), odd)
        recs.append(rec)
    recorded = draw(st.booleans())
    return RawChunk("1.jsonl", "line", list(range(1, n + 1)), recs, {}), draw(st.booleans()), \
        draw(st.sampled_from([None, 3])), recorded


@settings(max_examples=500, **SETTINGS)
@given(_json_records())
def test_a_json_readers_values_on_columns_match_the_row_rules(drawn):
    from rollout_cli.inputs.columns import columnar

    chunk, keep_text, step, recorded = drawn
    _same_both_ways(columnar(chunk), keep_text, step, recorded, "_typed", same_bytes=True)


def _ipc_bytes(batches, schema) -> bytes:
    """The rows as the output's Arrow IPC copy writes them (output/write.write_ipc)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_table(pa.Table.from_batches(batches, schema=schema).combine_chunks())
    return sink.getvalue().to_pybytes()


def test_plain_json_values_skip_the_row_rules(monkeypatch):
    import numpy as np

    from rollout_cli.inputs.columns import columnar

    recs = [{"index": i, "group_index": i // 2, "rollout_id": None if i % 3 else i, "tokens": np.arange(3),
             "response_length": 2, "reward": [0, 0.5, 1][i % 3], "loss_mask": np.ones(2, np.int64),
             "status": "completed", "weight_versions": ["7"] if i else [],
             "metadata": {"raw_reward": 1 if i == 1 else None, "source_name": "math", "extra": [1, "x"]}} for i in range(6)]
    monkeypatch.setattr(columns, "_scalars_by_rows", lambda *a: (_ for _ in ()).throw(AssertionError("row rules ran")))
    nc = normalize_chunk(columnar(RawChunk("1.jsonl", "line", list(range(1, 7)), recs, {})), 0, reward_key=None,
                         keep_text=False)
    t = pa.Table.from_batches(nc.batches)
    assert nc.valid == [True] * 6 and nc.explicit_id == [0, None, None, 3, None, None]
    assert t.column("raw_reward").to_pylist() == [0.0, 1.0, 1.0, 0.0, 0.5, 1.0]
    assert t.column("source_name").to_pylist() == ["math"] * 6
    assert t.column("weight_versions").to_pylist() == [None] + [["7"]] * 5


def test_a_response_length_past_int64_is_a_problem_not_a_crash():
    import numpy as np

    from rollout_cli.inputs.columns import columnar

    recs = [{"index": i, "tokens": np.arange(3), "response_length": [2**63, 2][i], "reward": 0.0,
             "status": "completed"} for i in range(2)]
    nc = normalize_chunk(columnar(RawChunk("1.jsonl", "line", [1, 2], recs, {})), 0, reward_key=None, keep_text=False)
    assert nc.valid == [False, True]
    (i, p), = nc.problems
    assert (i, p.field, p.rule) == (0, "response_length", "response_length.range")
    assert p.message == "expected 0 <= response_length <= len(tokens) = 3, got 9223372036854775808"
