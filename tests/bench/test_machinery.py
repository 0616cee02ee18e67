"""bench/machinery.py's pure parts: the alternating order, the medians, the gains and the
5% budget a fast path must meet to stay, and the switches it sets are the tool's own."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import machinery  # noqa: E402

from rollout_cli.core import tuning  # noqa: E402


def test_on_and_off_alternate():
    firsts = [machinery.order(rep)[0] for rep in range(6)]
    assert firsts == ["on", "off"] * 3
    assert all(sorted(machinery.order(rep)) == ["off", "on"] for rep in range(6))


def test_the_switches_are_the_ones_the_tool_reads():
    """Every switch of core/tuning.py is measured by a bench script: the conversion's by this
    one, the loader's by bench/loader.py --switches."""
    import loader as loader_bench

    assert not set(machinery.SWITCHES.values()) & set(loader_bench.SWITCHES.values())
    assert set(machinery.SWITCHES.values()) | set(loader_bench.SWITCHES.values()) == set(tuning.SWITCHES)


def _runs(cpu: list[float], wall: list[float], rc: int = 0) -> list[dict]:
    return [{"rc": rc, "cpu_s": c, "wall_s": w, "sys_s": 0.1} for c, w in zip(cpu, wall)]


def test_gain_is_what_the_fast_path_saves_of_the_time_without_it():
    assert machinery.gain(9.0, 10.0) == pytest.approx(0.1)
    assert machinery.gain(11.0, 10.0) == pytest.approx(-0.1)
    assert machinery.gain(1.0, 0.0) is None


def test_medians_leave_out_failed_runs():
    runs = _runs([1.0, 2.0, 30.0], [1.0, 1.0, 1.0]) + _runs([0.0], [0.0], rc=1)
    assert machinery.medians(runs, ("cpu_s", "wall_s")) == {"cpu_s": 2.0, "wall_s": 1.0}


def test_a_fast_path_stays_only_if_it_buys_five_percent():
    off = _runs([10.0, 10.2, 9.8, 10.1, 9.9], [5.0] * 5)
    keep = machinery.compare(_runs([9.4, 9.5, 9.6, 9.3, 9.5], [5.0] * 5), off, with_load=False)
    assert keep["keep"] is True and keep["gain_cpu_s"] == pytest.approx(0.05)
    assert keep["ratio_cpu_s"] == pytest.approx(10.0 / 9.5) and keep["reps"] == [5, 5]
    small = machinery.compare(_runs([9.7] * 5, [4.9] * 5), off, with_load=False)
    assert small["keep"] is False  # 3% of CPU, 2% of wall
    walls = machinery.compare(_runs([10.0] * 5, [4.5] * 5), off, with_load=False)
    assert walls["keep"] is True  # 10% of the wall time, nothing of the CPU


def test_a_switch_judged_with_the_load_is_judged_on_convert_plus_first_load():
    def runs(conv, load):
        return [{"rc": 0, "cpu_s": conv, "wall_s": conv, "sys_s": 0.0, "load_cpu_s": load, "load_wall_s": load,
                 "total_cpu_s": conv + load, "total_wall_s": conv + load}] * 5

    # convert alone 10% cheaper, but the first load pays it back: 2% in all
    res = machinery.compare(runs(9.0, 2.8), runs(10.0, 2.0), with_load=True)
    assert res["gain_cpu_s"] == pytest.approx(0.1) and res["gain_total_cpu_s"] == pytest.approx(0.2 / 12)
    assert res["judged_on"] == ["total_wall_s", "total_cpu_s"] and res["keep"] is False


def test_shard_digest_covers_the_shards_only(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.parquet").write_bytes(b"x")
    (tmp_path / "manifest.json").write_text("{}")
    d = machinery.shard_digest(str(tmp_path))
    (tmp_path / "manifest.json").write_text('{"volatile": 1}')
    assert machinery.shard_digest(str(tmp_path)) == d
    (tmp_path / "data" / "a.parquet").write_bytes(b"y")
    assert machinery.shard_digest(str(tmp_path)) != d
