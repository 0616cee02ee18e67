"""The same samples give byte-identical shards whatever the input format: JSONL, Parquet with
native types or with JSON-text columns (and the other types writers produce), and `.pt`; a
Parquet file read in row-group parts gives what it gives read whole."""
from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import copts, make_sample, shard_bytes, write_jsonl, write_pt
from rollout_cli.inputs.parquet import parts as parquet_parts
from rollout_cli.inputs.discover import InputFile
from rollout_cli.inputs.parquet.reader import read_parquet
from rollout_cli.inputs.registry import read_input, split_input
from rollout_cli.run.convert import convert

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
JSON_TEXT = ("tokens", "loss_mask", "rollout_log_probs", "metadata", "index", "reward")


@st.composite
def samples(draw):
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        rl = draw(st.integers(0, 6))
        prompt = draw(st.integers(1, 5))
        tokens = draw(st.lists(st.integers(0, 2**31 - 1), min_size=prompt + rl, max_size=prompt + rl))
        mask = draw(st.one_of(st.none(), st.lists(st.integers(0, 1), min_size=rl, max_size=rl)))
        lp = draw(st.one_of(st.none(), st.lists(st.floats(-30, 0, width=32), min_size=rl, max_size=rl)))
        out.append({
            "group_index": i // 2, "index": i, "rollout_id": None, "tokens": tokens, "response_length": rl,
            "reward": draw(st.floats(-2, 2, allow_nan=False)), "loss_mask": mask, "rollout_log_probs": lp,
            "remove_sample": draw(st.booleans()), "status": draw(st.sampled_from(["completed", "truncated"])),
            "metadata": {"round_number": draw(st.one_of(st.none(), st.integers(0, 9)))},
        })
    return out


def _as_json_text(recs: list[dict]) -> pa.Table:
    cols = {k: [r[k] for r in recs] for k in recs[0]}
    arrays = {}
    for k, vals in cols.items():
        if k in JSON_TEXT:
            arrays[k] = pa.array([orjson.dumps(x).decode() for x in vals], pa.string())  # None -> "null"
        else:
            arrays[k] = pa.array(vals)
    return pa.table(arrays)


def _shards(src: Path, out: Path, **kw) -> dict[str, bytes]:
    convert([str(src)], str(out), copts(**kw))
    return shard_bytes(out)


@settings(max_examples=12, **SETTINGS)
@given(samples())
def test_same_shards_from_every_format(recs):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_jsonl(d / "j" / "3.jsonl", recs)
        (d / "p").mkdir()
        pq.write_table(pa.Table.from_pylist(recs), d / "p" / "3.parquet")
        (d / "q").mkdir()
        pq.write_table(_as_json_text(recs), d / "q" / "3.parquet")
        write_pt(d / "t" / "3.pt", recs, 3)
        want = _shards(d / "j" / "3.jsonl", d / "oj")
        assert want
        assert _shards(d / "p" / "3.parquet", d / "op") == want
        assert _shards(d / "q" / "3.parquet", d / "oq") == want
        assert _shards(d / "t" / "3.pt", d / "ot") == want


def _writer_types(recs: list[dict]) -> pa.Table:
    """The same samples with the other types Parquet writers produce."""
    n = len(recs)
    return pa.table({
        "group_index": pa.array([r["group_index"] for r in recs], pa.int32()),
        "index": pa.array([r["index"] for r in recs], pa.uint16()),
        "tokens": pa.array([r["tokens"] for r in recs], pa.large_list(pa.uint32())),
        "response_length": pa.array([r["response_length"] for r in recs], pa.int8()),
        "reward": pa.array([r["reward"] for r in recs], pa.float32()),
        "loss_mask": pa.array([[bool(x) for x in r["loss_mask"]] for r in recs], pa.list_(pa.bool_())),
        "rollout_log_probs": pa.array([r["rollout_log_probs"] for r in recs], pa.list_(pa.float32())),
        "status": pa.array([r["status"] for r in recs]).dictionary_encode(),
        "metadata": pa.array([list(r["metadata"].items()) for r in recs], pa.map_(pa.string(), pa.int64())),
        "remove_sample": pa.array([False] * n),
    })


def test_writer_types_match_jsonl(tmp_path):
    recs = [make_sample(index=i, group_index=i // 2, response_length=2 + i % 3, log_probs=True,
                        reward=0.25 * i, metadata={"round_number": i}) for i in range(6)]
    recs[2]["loss_mask"][0] = 0
    for r in recs:
        r["reward"] = float(pa.scalar(r["reward"], pa.float32()).as_py())  # exact in float32
    write_jsonl(tmp_path / "j" / "3.jsonl", recs)
    (tmp_path / "p").mkdir()
    pq.write_table(_writer_types(recs), tmp_path / "p" / "3.parquet")
    assert _shards(tmp_path / "p" / "3.parquet", tmp_path / "op") == _shards(tmp_path / "j" / "3.jsonl", tmp_path / "oj")


def test_json_columns_named_by_metadata_and_null_text(tmp_path):
    recs = [make_sample(index=i, group_index=i // 2, log_probs=i % 2 == 0, label={"answer": i}) for i in range(4)]
    write_jsonl(tmp_path / "j" / "3.jsonl", recs)
    t = _as_json_text(recs)  # rollout_log_probs of odd rows is the text "null"
    label = pa.field("label", pa.string(), metadata={"encoding": "json"})
    t = t.set_column(t.schema.get_field_index("label"), label, pa.array([orjson.dumps(r["label"]).decode() for r in recs]))
    (tmp_path / "p").mkdir()
    pq.write_table(t, tmp_path / "p" / "3.parquet")
    kw = dict(keep_text=True)
    assert _shards(tmp_path / "p" / "3.parquet", tmp_path / "op", **kw) == _shards(tmp_path / "j" / "3.jsonl", tmp_path / "oj", **kw)


def test_schema_level_json_columns(tmp_path):
    recs = [make_sample(index=i, group_index=i // 2, metadata={"round_number": i},
                        prompt=[{"role": "user", "content": f"q{i}"}]) for i in range(4)]
    write_jsonl(tmp_path / "j" / "3.jsonl", recs)
    t = pa.Table.from_pylist([dict(r, prompt=orjson.dumps(r["prompt"]).decode()) for r in recs])
    t = t.replace_schema_metadata({"json_columns": '["prompt"]'})
    (tmp_path / "p").mkdir()
    pq.write_table(t, tmp_path / "p" / "3.parquet")
    kw = dict(keep_text=True)
    assert _shards(tmp_path / "p" / "3.parquet", tmp_path / "op", **kw) == _shards(tmp_path / "j" / "3.jsonl", tmp_path / "oj", **kw)


def _parquet_in_groups(path: Path, n: int, group: int) -> list[dict]:
    recs = [make_sample(index=i, group_index=i // 4, response_length=1 + i % 5, log_probs=True,
                        metadata={"round_number": i}) for i in range(n)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(recs), path, row_group_size=group)
    return recs


def test_row_group_parts_cover_the_file_once(tmp_path):
    path = tmp_path / "3.parquet"
    _parquet_in_groups(path, 23, 4)  # 6 row groups
    inp = InputFile(str(path), "3.parquet", "parquet", 3, "train", "name")
    parts = parquet_parts.split(inp, 4, min_bytes=1)
    assert parts == [(k, 4) for k in range(4)]
    numbers = []
    for k, n in parts:
        for raw in read_parquet(str(path), "3.parquet", part=k, parts=n):
            numbers.extend(raw.numbers)
    assert numbers == list(range(23))
    assert split_input(inp, 1) == [(0, None)]
    assert parquet_parts.split(inp, 4) == [(0, None)]  # a small file is one part


@pytest.mark.parametrize("rows,group,parts,chunk", [(23, 23, 2, 1024), (23, 23, 3, 4), (23, 12, 3, 5), (5, 5, 7, 2)])
def test_parts_of_fewer_row_groups_split_the_rows(tmp_path, rows, group, parts, chunk):
    path = tmp_path / "3.parquet"
    _parquet_in_groups(path, rows, group)
    seen = []
    for k in range(parts):
        got = [n for raw in read_parquet(str(path), "3.parquet", chunk, part=k, parts=parts) for n in raw.numbers]
        assert got == list(range(rows * k // parts, rows * (k + 1) // parts))
        seen.extend(got)
    assert seen == list(range(rows))


def test_a_row_group_is_never_cut_into_parts(tmp_path):
    """Parts are ranges of whole row groups: a part starting inside one would decode every row
    before it and drop them."""
    path = tmp_path / "3.parquet"
    _parquet_in_groups(path, 23, 23)
    inp = InputFile(str(path), "3.parquet", "parquet", 3, "train", "name")
    assert parquet_parts.split(inp, 4, min_bytes=1) == [(0, None)]
    _parquet_in_groups(path, 23, 12)  # 2 row groups
    assert parquet_parts.split(inp, 4, min_bytes=1) == [(0, 2), (1, 2)]


@pytest.mark.parametrize("chunk", [1, 5, 1024])
def test_threaded_read_gives_the_same_chunks(tmp_path, chunk):
    path = tmp_path / "3.parquet"
    _parquet_in_groups(path, 23, 7)

    def chunks(threads):
        return [(raw.numbers, {k: (v if isinstance(v, list) else v.to_pylist()) for k, v in raw.columns.items()})
                for raw in read_parquet(str(path), "3.parquet", chunk, threads=threads)]

    one = chunks(1)
    assert sum(len(n) for n, _ in one) == 23
    assert chunks(2) == one


@settings(max_examples=30, **SETTINGS)
@given(st.integers(1, 60), st.integers(1, 25), st.integers(1, 30), st.sampled_from([2, 3]), st.integers(0, 10_000))
def test_column_streams_give_the_same_chunks_as_one_reader(rows, group, chunk, threads, seed):
    """Every set of columns read as a stream of its own cuts the same rows into each batch:
    nested, struct and null columns, several row groups, any batch size."""
    import random

    rnd = random.Random(seed)
    recs = [{"tokens": [rnd.randrange(100) for _ in range(rnd.randrange(1, 9))],
             "response_length": 1, "reward": rnd.random(), "status": "completed", "index": i,
             "rollout_log_probs": None if rnd.random() < 0.2 else [rnd.random()] * rnd.randrange(0, 4),
             "metadata": None if rnd.random() < 0.3 else {"source": "a", "turns": rnd.randrange(3)},
             "rollout_routed_experts": None if rnd.random() < 0.5 else [[[1, 2]]] * rnd.randrange(1, 3)}
            for i in range(rows)]
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "3.parquet")
        pq.write_table(pa.Table.from_pylist(recs), path, row_group_size=group)

        def chunks(t):
            return [(raw.numbers, {k: (v if isinstance(v, list) else v.to_pylist()) for k, v in raw.columns.items()})
                    for raw in read_parquet(path, "3.parquet", chunk, threads=t)]

        one = chunks(1)
        assert sum(len(n) for n, _ in one) == rows
        assert chunks(threads) == one


def test_column_streams_put_the_largest_columns_apart(tmp_path):
    from rollout_cli.inputs.parquet.reader import _column_chunks, _streams

    path = tmp_path / "3.parquet"
    t = pa.table({"a": [1] * 50, "big": [[float(i)] * 300 for i in range(50)], "mid": [[i] * 100 for i in range(50)],
                  "b": ["x"] * 50})
    pq.write_table(t, path)
    chunks = _column_chunks(pq.ParquetFile(path), [0])
    assert sorted(_streams(chunks, t.column_names, 2)) == [["a", "b"], ["big"], ["mid"]]
    assert sorted(_streams(chunks, t.column_names, 8)) == [["a"], ["b"], ["big"], ["mid"]]
    assert _streams(chunks, ["a", "b"], 2) == [["a"], ["b"]]


def test_threaded_read_of_a_truncated_file_names_it(tmp_path):
    from rollout_cli.core.errors import InvalidInputError

    path = tmp_path / "3.parquet"
    _parquet_in_groups(path, 200, 50)
    data = path.read_bytes()
    meta = pq.read_metadata(path)
    # keep the footer, zero the data pages of the last row group: the decoder fails midway
    tail = int.from_bytes(data[-8:-4], "little") + 8
    last = meta.row_group(3)
    start = min(last.column(i).dictionary_page_offset or last.column(i).data_page_offset for i in range(last.num_columns))
    path.write_bytes(data[:start] + bytes(len(data) - start - tail) + data[-tail:])
    got = []
    with pytest.raises(InvalidInputError, match="3.parquet: cannot read Parquet near row"):
        for raw in read_parquet(str(path), "3.parquet", 16, threads=2):
            got.extend(raw.numbers)
    assert got and got == list(range(len(got))) and len(got) <= 150


@pytest.mark.parametrize("group", [40, 6], ids=["one row group", "seven row groups"])
def test_parquet_on_several_workers_gives_the_same_shards(tmp_path, monkeypatch, group):
    path = tmp_path / "in" / "3.parquet"
    _parquet_in_groups(path, 40, group)
    whole = _shards(path, tmp_path / "o1")
    monkeypatch.setattr(parquet_parts, "MIN_PART_BYTES", 1)
    assert _shards(path, tmp_path / "o3", workers=3) == whole


def test_reading_reports_what_the_file_says(tmp_path):
    recs = [make_sample(index=i) for i in range(3)]
    pt = write_pt(tmp_path / "dump.pt", recs, 8)
    reading = read_input(InputFile(str(pt), "dump.pt", "pt", None, "train", "payload"))
    chunks = list(reading)
    assert reading.info.step == 8 and not reading.info.train_dump
    assert [c.numbers for c in chunks] == [[0, 1, 2]]
    j = write_jsonl(tmp_path / "1.jsonl", recs)
    reading = read_input(InputFile(str(j), "1.jsonl", "jsonl", 1, "train", "name"))
    jchunks = list(reading)
    assert sum(len(c) for c in jchunks) == 3 and reading.info.lines == 3
    # every reader hands on columns: the numeric lists as one Arrow list array per chunk
    for c in chunks + jchunks:
        assert c.records is None and not c.rows
        assert isinstance(c.columns["tokens"], pa.Array) and c.columns["tokens"].to_pylist() == [r["tokens"] for r in recs]


@pytest.mark.parametrize("chunk", [1, 2, 1024])
def test_pt_chunks_number_samples_by_position(tmp_path, chunk):
    recs = [make_sample(index=i) for i in range(5)]
    pt = write_pt(tmp_path / "dump.pt", recs, 2)
    reading = read_input(InputFile(str(pt), "dump.pt", "pt", None, "train", "payload"), chunk_records=chunk)
    assert [n for c in reading for n in c.numbers] == list(range(5))


@pytest.mark.parametrize("keep_text", [False, True])
def test_sample_data_in_json_text_gives_the_same_shards(tmp_path, keep_text):
    data = Path(__file__).resolve().parents[2] / "sample_data"
    want = _shards(data / "jsonl" / "rollout_data", tmp_path / "j", keep_text=keep_text)
    assert _shards(data / "parquet_json" / "rollout_data", tmp_path / "q", keep_text=keep_text) == want
    assert _shards(data / "parquet" / "rollout_data", tmp_path / "p", keep_text=keep_text) == want


def test_a_parquet_step_is_planned_in_parts_of_whole_row_groups(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "in" / "3.parquet"
    _parquet_in_groups(path, 40, 10)
    code = ("import sys\nfrom rollout_cli.inputs.units import plan_units\nfrom rollout_cli.core.options import ConvertOptions\n"
            "from rollout_cli.inputs.parquet import parts as parquet_parts\n"
            f"units, _, _ = plan_units([{str(path.parent)!r}], ConvertOptions(), {str(tmp_path / 'out')!r})\n"
            "print(units[0].input.step, len(parquet_parts.split(units[0].input, 8, min_bytes=1)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3", "4"]  # 4 parts: one per row group
