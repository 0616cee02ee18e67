"""Tests of rollout_cli.inputs.jsonl.reader: records, line numbers and problems, whichever JSON parser
read a line."""
from __future__ import annotations

import numpy as np
import orjson

from conftest import chunk_record
from rollout_cli.pipeline.validate import normalize_chunk
from rollout_cli.inputs.jsonl import reader as jsonl, simd


def _sample(i: int, **kw) -> dict:
    d = {"group_index": i // 2, "index": i, "rollout_id": None, "tokens": [5, 6, 7, 8], "response_length": 2,
         "reward": 1.0, "loss_mask": [1, 0], "rollout_log_probs": [-0.5, -0.25], "status": "completed",
         "metadata": {"note": "has [brackets]"}}
    d.update(kw)
    return d


BAD = [  # (overrides, the problem's field and message) as the checks word them for orjson's lists
    ({"tokens": [5, -1, 7, 8]}, "tokens", "expected values in [0, 2147483647], got -1"),
    ({"tokens": [5, 2**31, 7, 8]}, "tokens", "expected values in [0, 2147483647], got 2147483648"),
    ({"tokens": []}, "tokens", "expected a non-empty list of integers, got []"),
    ({"tokens": [5, 6.5, 7, 8]}, "tokens", "expected integers, got float values"),
    ({"tokens": [[5], [6], [7], [8]]}, "tokens", "expected a flat list of integers, got 2-D data"),
    ({"loss_mask": [1, 2]}, "loss_mask", "expected values in [0, 1], got 2"),
    ({"loss_mask": [1]}, "loss_mask", "expected length 2 (response_length), got 1"),
    ({"rollout_log_probs": [-0.5]}, "rollout_log_probs", "expected length 2 (response_length), got 1"),
    ({"rollout_log_probs": [-0.5, 1e39]}, "rollout_log_probs", "expected finite numbers, got inf at position 1"),
    # a range problem the columnar checks find, then a later problem: the row's own
    # checks still report the first one
    ({"tokens": [5, -1, 7, 8], "status": "lost"}, "tokens", "expected values in [0, 2147483647], got -1"),
    ({"loss_mask": [1, 2], "reward": "high"}, "loss_mask", "expected values in [0, 1], got 2"),
    ({"teacher_log_probs": [1e39, 0.0], "train_metadata": 5}, "teacher_log_probs", "expected finite numbers, got inf at position 0"),
]


def _write(tmp_path, lines: list[bytes]):
    p = tmp_path / "step_1.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    return str(p)


def _read(path: str, **kw):
    chunks = list(jsonl.read_jsonl(path, "step_1.jsonl", **kw))
    return [n for c in chunks for n in c.numbers], [chunk_record(c, i) for c in chunks for i in range(len(c))], \
        {c.numbers[i]: p for c in chunks for i, p in c.problems.items()}, chunks


def test_invalid_json_names_the_column_of_its_line_not_a_line_of_its_own(tmp_path):
    _, _, problems, _ = _read(_write(tmp_path, [orjson.dumps(_sample(0)), b'{"tokens": [1, 2']))
    assert problems[2].message == "invalid JSON at column 17: unexpected end of data"
    assert problems[2].location.number == 2


def test_records_numbers_and_problems(tmp_path):
    lines = [orjson.dumps(_sample(0)), b"", b"   ", b'{"tokens": [1, 2', orjson.dumps(_sample(1)), b"[1, 2]",
             orjson.dumps(_sample(2, tokens=[[1], [2]]))]
    numbers, records, problems, chunks = _read(_write(tmp_path, lines))
    assert numbers == [1, 4, 5, 6, 7]
    assert records[1] is None and records[3] is None
    assert problems[4].message.startswith("invalid JSON") and problems[6].message == "expected a JSON object, got list"
    for rec, line in ((records[0], lines[0]), (records[2], lines[4])):
        ref = orjson.loads(line)
        assert rec == {k: v for k, v in ref.items() if v is not None}
    (chunk,) = chunks
    assert list(chunk.rows) == [4] and chunk.rows[4]["tokens"] == [[1], [2]]  # nested: kept whole
    assert chunk.columns["tokens"].to_pylist() == [records[0]["tokens"], None, records[2]["tokens"], None, None]


def test_a_range_of_the_file(tmp_path):
    lines = [orjson.dumps(_sample(i)) for i in range(6)]
    path = _write(tmp_path, lines)
    start = len(lines[0]) + 1 + len(lines[1]) + 1
    end = start + len(lines[2]) + 1 + len(lines[3]) + 1
    numbers, records, _, _ = _read(path, start=start, end=end, first_line=3)
    assert numbers == [3, 4] and [r["index"] for r in records] == [2, 3]


def test_a_last_line_without_newline(tmp_path):
    p = tmp_path / "step_1.jsonl"
    p.write_bytes(orjson.dumps(_sample(0)) + b"\n" + orjson.dumps(_sample(1)))
    numbers, records, _, _ = _read(str(p))
    assert numbers == [1, 2] and records[1]["index"] == 1


def _problems(path: str) -> list[tuple[int, str, str]]:
    out = []
    for chunk in jsonl.read_jsonl(path, "step_1.jsonl"):
        nc = normalize_chunk(chunk, 0, reward_key=None, keep_text=False)
        out += [(p.location.number, p.field, p.message) for _, p in nc.problems]
    return out


def test_the_same_problems_from_either_parser(tmp_path, monkeypatch):
    lines = [orjson.dumps(_sample(i, **over)) for i, (over, _, _) in enumerate(BAD)] + [orjson.dumps(_sample(99))]
    path = _write(tmp_path, lines)
    fast = _problems(path)
    assert fast == [(i + 1, f, m) for i, (_, f, m) in enumerate(BAD)]
    monkeypatch.setattr(simd.SampleParser, "parse", lambda self, block, a, b: None)
    assert _problems(path) == fast


def test_the_same_batches_from_either_parser(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    lines = []
    for i in range(40):
        n = int(rng.integers(3, 50))
        rl = 0 if i % 7 == 3 else n - 1  # some with empty responses
        mask = None if i % 9 == 2 else rng.integers(0, 2, rl).tolist()
        extra = {"remove_sample": True} if i % 5 == 1 else {}
        lines.append(orjson.dumps(_sample(i, tokens=rng.integers(0, 2**31 - 1, n).tolist(), response_length=rl,
                                          loss_mask=mask, rollout_log_probs=(-rng.random(rl)).tolist(),
                                          teacher_log_probs=(-rng.random(rl)).tolist(), **extra)))
    path = _write(tmp_path, lines)

    def tables():
        return [b for c in jsonl.read_jsonl(path, "step_1.jsonl")
                for b in normalize_chunk(c, 0, reward_key=None, keep_text=False).batches]

    fast = tables()
    for b in fast:  # each row's mask total is its mask's sum
        sums = [sum(m) for m in b.column("loss_mask").to_pylist()]
        assert b.column("_mask_total").to_pylist() == sums
    monkeypatch.setattr(simd.SampleParser, "parse", lambda self, block, a, b: None)
    slow = tables()
    assert len(fast) == len(slow) and all(a.equals(b) for a, b in zip(fast, slow))


def test_gives_up_the_simdjson_path_when_it_keeps_handing_over(tmp_path, monkeypatch):
    calls = []
    real = simd.SampleParser.parse
    monkeypatch.setattr(simd.SampleParser, "parse", lambda self, block, a, b: calls.append(1) or real(self, block, a, b))
    nested = [orjson.dumps(_sample(i, tokens=[[1], [2], [3], [4]])) for i in range(jsonl._FAST_MISSES + 50)]
    _, records, _, _ = _read(_write(tmp_path, nested))
    assert len(calls) == jsonl._FAST_MISSES
    assert all(r["tokens"] == [[1], [2], [3], [4]] for r in records)


def test_keeps_the_simdjson_path_for_occasional_hand_overs(tmp_path, monkeypatch):
    calls = []
    real = simd.SampleParser.parse
    monkeypatch.setattr(simd.SampleParser, "parse", lambda self, block, a, b: calls.append(1) or real(self, block, a, b))
    lines = [orjson.dumps(_sample(i, tokens=[[1], [2], [3], [4]] if i % 3 == 0 else [1, 2, 3, 4])) for i in range(600)]
    _read(_write(tmp_path, lines))
    assert len(calls) == 600


def test_lines_read_into_one_reused_block_keep_their_values(tmp_path, monkeypatch):
    """Lines end in, straddle and span blocks much smaller than they are: every record (and
    its numeric arrays, parsed while the block was later read into again) is its own line's."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.integers(1, 300), min_size=1, max_size=30), st.sampled_from([7, 64, 1000]), st.booleans())
    def check(lengths, block, gz):
        monkeypatch.setattr(jsonl, "BLOCK_BYTES", block)
        lines = [orjson.dumps(_sample(i, tokens=list(range(i, i + n)), response_length=1, loss_mask=[1],
                                      rollout_log_probs=[-float(n)])) for i, n in enumerate(lengths)]
        p = tmp_path / ("step_1.jsonl.gz" if gz else "step_1.jsonl")
        data = b"\n".join(lines) + b"\n"
        if gz:
            import gzip

            p.write_bytes(gzip.compress(data))
        else:
            p.write_bytes(data)
        chunks = list(jsonl.read_jsonl(str(p), chunk_records=5))
        got = [chunk_record(c, i) for c in chunks for i in range(len(c))]
        assert len(got) == len(lines)
        for rec, line in zip(got, lines):
            want = orjson.loads(line)
            assert np.asarray(rec["tokens"]).tolist() == want["tokens"]
            assert np.asarray(rec["rollout_log_probs"]).tolist() == want["rollout_log_probs"]

    check()


def test_a_stream_without_readinto_is_read_block_by_block(monkeypatch):
    class Reads:
        def __init__(self, data: bytes):
            self._data, self._pos = data, 0

        def read(self, n: int) -> bytes:
            out = self._data[self._pos:self._pos + n]
            self._pos += len(out)
            return out

    monkeypatch.setattr(jsonl, "BLOCK_BYTES", 5)
    data = b"abc\ndefghijkl\n\nmn"
    got = [bytes(b[s:e]) for b, s, e in jsonl._lines(Reads(data), None)]
    assert got == data.split(b"\n")


def test_the_simdjson_path_takes_a_line_in_the_readers_block():
    line = orjson.dumps(_sample(3))
    block = bytearray(b"x\n" + line + b"\n")
    rec = simd.SampleParser().parse(block, 2, 2 + len(line))
    assert rec is not None and rec["tokens"].tolist() == [5, 6, 7, 8]


def test_nan_written_by_pythons_json_is_a_value_of_its_field_not_a_parse_error(tmp_path):
    import json

    bad = _sample(1, rollout_log_probs=[-0.5, float("nan")])
    inf = _sample(2, teacher_log_probs=[float("-inf"), 0.0])
    path = _write(tmp_path, [orjson.dumps(_sample(0)), json.dumps(bad).encode(), json.dumps(inf).encode()])
    assert _problems(path) == [(2, "rollout_log_probs", "expected finite numbers, got nan at position 1"),
                               (3, "teacher_log_probs", "expected finite numbers, got -inf at position 0")]


def test_only_a_line_orjson_refuses_reaches_the_nan_fallback(tmp_path, monkeypatch):
    from rollout_cli.inputs.jsonl import lenient

    seen = []
    real = lenient.fallback
    monkeypatch.setattr(lenient, "fallback", lambda data: seen.append(bytes(data)) or real(data))
    monkeypatch.setattr(simd.SampleParser, "parse", lambda self, block, a, b: None)  # every line through orjson
    path = _write(tmp_path, [orjson.dumps(_sample(i)) for i in range(3)] + [b'{"tokens": [1, NaN]}'])
    numbers, records, problems, _ = _read(path)
    assert seen == [b'{"tokens": [1, NaN]}'] and numbers == [1, 2, 3, 4] and not problems


# --- the fingerprint a whole read takes ----------------------------------------------------


def test_a_whole_read_fingerprints_the_bytes_it_read(tmp_path, monkeypatch):
    """Read whole in blocks smaller than its lines, a file's fingerprint is the converting
    process's own (manifest.file_fingerprint) and its lines are read as they are without one."""
    from rollout_cli.output import manifest

    monkeypatch.setattr(jsonl, "BLOCK_BYTES", 97)
    path = _write(tmp_path, [orjson.dumps(_sample(i)) for i in range(9)])
    stats: dict = {}
    with_fp = _read(path, fingerprint=True, stats=stats)
    assert stats["fingerprint"] == manifest.file_fingerprint(path)
    assert with_fp[:3] == _read(path)[:3]


def test_no_fingerprint_from_a_part_or_a_compressed_file(tmp_path):
    import gzip

    lines = [orjson.dumps(_sample(i)) for i in range(4)]
    path = _write(tmp_path, lines)
    part: dict = {}
    _read(path, start=0, end=len(lines[0]) + 1, fingerprint=True, stats=part)  # the first line only
    gz = tmp_path / "step_2.jsonl.gz"
    gz.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    packed: dict = {}
    assert len(_read(str(gz), fingerprint=True, stats=packed)[1]) == 4
    assert part.get("fingerprint") is None and packed.get("fingerprint") is None


def test_no_fingerprint_from_a_file_that_changed_while_it_was_read(tmp_path):
    path = _write(tmp_path, [orjson.dumps(_sample(i)) for i in range(4)])
    stats: dict = {}
    chunks = jsonl.read_jsonl(path, "step_1.jsonl", chunk_records=1, fingerprint=True, stats=stats)
    next(chunks)
    with open(path, "ab") as f:  # the trainer appends a line meanwhile
        f.write(orjson.dumps(_sample(4)) + b"\n")
    rest = list(chunks)
    assert rest and stats.get("fingerprint") is None


def test_the_first_record_past_blank_lines_and_a_64k_read(tmp_path):
    long = _sample(0, tokens=list(range(40_000)))  # a first line of ~230 KB: several reads
    p = tmp_path / "a.jsonl"
    p.write_bytes(b"\n  \n" + orjson.dumps(long) + b"\n" + orjson.dumps(_sample(1)) + b"\n")
    assert jsonl.peek_first_record(str(p)) == long
    q = tmp_path / "b.jsonl"
    q.write_bytes(orjson.dumps(_sample(2)))  # no newline at all
    assert jsonl.peek_first_record(str(q))["index"] == 2
    r = tmp_path / "c.jsonl"
    r.write_bytes(b"[1, 2]\n" + orjson.dumps(_sample(3)) + b"\n")
    assert jsonl.peek_first_record(str(r)) is None  # the first line decides


def test_a_files_first_record_is_parsed_once_and_handed_out_as_a_copy(tmp_path, monkeypatch):
    from rollout_cli.inputs.jsonl import lenient

    parsed = []
    real = lenient.loads
    monkeypatch.setattr(lenient, "loads", lambda line: parsed.append(1) or real(line))
    p = tmp_path / "step_7.jsonl"
    p.write_bytes(orjson.dumps(_sample(0, step=7)) + b"\n")
    first = jsonl.peek_first_record(str(p))
    first["step"] = 99  # a caller's change stays its own
    for _ in range(3):
        assert jsonl.peek_first_record(str(p))["step"] == 7
    assert len(parsed) == 1
    p.write_bytes(orjson.dumps(_sample(0, step=8)) + b"\n\n")  # rewritten: read again
    assert jsonl.peek_first_record(str(p))["step"] == 8
