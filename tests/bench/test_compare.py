"""bench/compare.py's pure parts: the sides alternate, the summary's ratios are new over old
(above 1: the working tree is slower), against polars and verify's floor where measured, and
every file of an output is read before a reader is timed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import compare  # noqa: E402


def test_the_first_side_rotates_from_round_to_round():
    got = list(compare.rounds(["old", "new", "polars"], 4))
    assert [n for r, n in got if r == 0] == ["old", "new", "polars"]
    assert [n for r, n in got if r == 1] == ["new", "polars", "old"]
    assert [n for r, n in got if r == 3] == ["old", "new", "polars"]
    assert len(got) == 12


def _runs(*pairs):
    return [{"wall_s": w, "cpu_s": c} for w, c in pairs]


def test_the_summary_gives_new_over_old_and_the_ratios_asked_for():
    res = {"format": "jsonl",
           "convert": {"old": _runs((2.0, 4.0), (2.2, 4.4), (9.0, 9.0)), "new": _runs((1.0, 3.0), (1.1, 3.3), (1.2, 3.6)),
                       "polars": _runs((2.0, 5.0), (2.0, 5.0), (2.0, 5.0))},
           "verify": {"old": _runs((1.0, 1.0)), "new": _runs((0.6, 0.9)), "floor:old": _runs((0.5, 0.8)),
                      "floor:new": _runs((0.5, 0.75))}}
    conv, ver = compare.summary([res])
    assert conv["job"] == "convert" and conv["old"]["wall_s"] == 2.2 and conv["new"]["cpu_s"] == 3.3
    assert conv["new/old wall_s"] == pytest.approx(1.1 / 2.2) and conv["new/old cpu_s"] == pytest.approx(3.3 / 4.4)
    assert conv["new/polars wall_s"] == pytest.approx(1.1 / 2.0) and conv["old/polars cpu_s"] == pytest.approx(4.4 / 5.0)
    assert ver["new/floor cpu_s"] == pytest.approx(0.9 / 0.75) and ver["old/floor wall_s"] == pytest.approx(2.0)
    assert "new/polars wall_s" not in ver


def test_every_file_of_an_output_is_listed_for_warming(tmp_path):
    (tmp_path / "data" / "step-000001").mkdir(parents=True)
    (tmp_path / "mmap").mkdir()
    for rel in ("manifest.json", "data/step-000001/shard-00000-of-00001.parquet", "mmap/empty.arrow"):
        (tmp_path / rel).write_bytes(b"x")
    got = compare.output_files(str(tmp_path))
    assert got == sorted(str(tmp_path / rel) for rel in
                         ("manifest.json", "data/step-000001/shard-00000-of-00001.parquet", "mmap/empty.arrow"))
