"""Tests of rollout_cli.inputs.linesteps: a line file's lines by step, as byte ranges read back
with their own file and line numbers."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from rollout_cli.core.errors import InvalidInputError
from rollout_cli.inputs import linesteps


def _file(tmp_path, name: str, lines: list[bytes]) -> str:
    p = tmp_path / name
    p.write_bytes(b"\n".join(lines) + b"\n")
    return str(p)


def test_scan_gives_offsets_and_skips_blank_lines(tmp_path):
    path = _file(tmp_path, "a.jsonl", [b"s1 x", b"", b"s2 yy", b"  ", b"s1 z"])
    got = list(linesteps.scan(path, "a.jsonl", lambda line: int(line[1:2])))
    assert got == [(1, 0, 5, 1), (3, 6, 12, 2), (5, 15, 20, 1)]


def test_scan_names_the_file_and_line_of_a_key_it_cannot_read(tmp_path):
    path = _file(tmp_path, "a.jsonl", [b"s1", b"bad"])

    def key(line):
        if line == b"bad":
            raise InvalidInputError("step: missing")
        return 1

    with pytest.raises(InvalidInputError, match="a.jsonl:line 2: step: missing"):
        list(linesteps.scan(path, "a.jsonl", key))


def test_ranges_join_consecutive_lines_only():
    lines = [("a", 1, 0, 5), ("a", 2, 5, 9), ("a", 4, 12, 15), ("b", 1, 0, 3), ("b", 2, 3, 8)]
    assert linesteps.ranges(lines) == [("a", 0, 9, 1), ("a", 12, 15, 4), ("b", 0, 8, 1)]


@pytest.mark.parametrize("small", [True, False])
def test_lines_reads_the_ranges_back_in_order_with_their_numbers(tmp_path, monkeypatch, small):
    if not small:
        monkeypatch.setattr(linesteps, "SMALL_RANGE", 0)  # through the block reader
    a = _file(tmp_path, "a.jsonl", [b"s1 x", b"", b"s2 yy", b"  ", b"s1 z"])
    b = _file(tmp_path, "b.jsonl", [b"s1 w", b"s1 v"])
    scanned = [(p, n, s, e) for p in (a, b) for n, s, e, k in linesteps.scan(p, p, lambda line: int(line[1:2]))
               if k == 1]
    inp = SimpleNamespace(path=a, ranges=tuple(linesteps.ranges(scanned)))
    got = [(p, n, bytes(buf[x:y])) for p, n, buf, x, y in linesteps.lines(inp)]
    assert got == [(a, 1, b"s1 x"), (a, 5, b"s1 z"), (b, 1, b"s1 w"), (b, 2, b"s1 v")]
    whole = SimpleNamespace(path=b, ranges=())
    assert [n for _, n, _, _, _ in linesteps.lines(whole)] == [1, 2]


def test_a_cut_off_last_line_is_left_for_the_live_rules_and_any_other_bad_line_is_an_error(tmp_path):
    def key(line):
        if not line.startswith(b"s"):
            raise InvalidInputError("step: missing")
        return 1

    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"s1 a\ns1 b\n{\"par")  # a writer still writing its last line
    assert [n for n, _, _, _ in linesteps.scan(str(cut), "cut.jsonl", key)] == [1, 2]
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(b"s1 a\ns1 b\n{\"par\n")  # the same line, ended: bad input
    with pytest.raises(InvalidInputError, match="whole.jsonl:line 3: step: missing"):
        list(linesteps.scan(str(whole), "whole.jsonl", key))
