"""inputs/completeness.py: whether an input file is whole, read off its last bytes. A line file
is cut off when its last line has no newline and is not valid JSON; a `.pt` dump is whole when
it opens as a zip archive, a Parquet file when it has its footer."""
from __future__ import annotations

import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

from rollout_cli.inputs import completeness


def test_the_tail_checks(tmp_path):
    f = tmp_path / "a.jsonl"
    for data, want in [(b"", None), (b'{"a": 1}\n', None), (b'{"a": 1}', None), (b'{"a": 1}\n  \n', None),
                       (b'{"a": 1}\n{"a"', 2), (b'{"a"', 1), (b'{"a": 1}\n\n{"b": [', 3),
                       (b'{"a": 1}\n{"lp": [NaN, -Infinity]}', None), (b'{"a": 1}\n{"lp": [NaN', 2)]:
        f.write_bytes(data)
        assert completeness.ends_inside_line(str(f)) == want, data
    big = tmp_path / "b.jsonl"  # a last line longer than one block read backwards
    big.write_bytes(b'{"a": 1}\n{"x": "' + b"y" * (3 << 20))
    assert completeness.ends_inside_line(str(big)) == 2
    t = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), t)
    assert completeness.has_parquet_footer(str(t))
    t.write_bytes(t.read_bytes()[:-1])
    assert not completeness.has_parquet_footer(str(t))


def test_line_cut_says_where_and_applies_to_plain_jsonl_only(tmp_path):
    f = tmp_path / "a.jsonl"
    f.write_bytes(b'{"a": 1}\n{"a": 2}\n{"b"')
    assert completeness.line_cut(str(f)) == "it ends inside line 3"
    f.write_bytes(b'{"a": 1}\n{"a": 2}')  # a last line that parses is whole
    assert completeness.line_cut(str(f)) is None
    gz = tmp_path / "a.jsonl.gz"  # compressed: its size rule applies, not this one
    gz.write_bytes(b'{"b"')
    assert completeness.line_cut(str(gz)) is None


def test_a_pt_dump_is_whole_when_it_opens_as_a_zip(tmp_path):
    p = tmp_path / "1.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", b"x" * 100)
    assert completeness.zip_missing(str(p)) is None
    p.write_bytes(p.read_bytes()[:-10])  # the central directory cut
    assert completeness.zip_missing(str(p)) == "not a complete zip archive"
    p.write_bytes(b"")
    assert completeness.zip_missing(str(p)) == "not a complete zip archive"


def test_parquet_missing_names_the_footer(tmp_path):
    t = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), t)
    assert completeness.parquet_missing(str(t)) is None
    data = t.read_bytes()
    t.write_bytes(data[:-1])
    assert completeness.parquet_missing(str(t)) == "no Parquet footer"
    t.write_bytes(data[:4] + data[-8:])  # the magic bytes, but a footer longer than the file
    assert completeness.parquet_missing(str(t)) == "no Parquet footer"


def test_pickle_missing_names_its_end(tmp_path):
    import pickle

    p = tmp_path / "b.pkl"
    data = pickle.dumps({"rows": list(range(100))}, protocol=4)
    p.write_bytes(data)
    assert completeness.pickle_missing(str(p)) is None
    p.write_bytes(data[:-1])  # cut before the STOP opcode
    assert completeness.pickle_missing(str(p)) == "not a complete pickle (no STOP at its end)"
    p.write_bytes(b"")
    assert completeness.pickle_missing(str(p)) == "not a complete pickle"
