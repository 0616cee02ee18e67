"""Tests of rollout_cli.run.handover: a part hands the rest of its range to an idle worker; every
request gets one answer, no line is parsed twice or lost, and the output is the same."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from conftest import chunk_record, make_sample, write_jsonl
from rollout_cli.run import handover
from rollout_cli.run.handover import Offer, take_over
from rollout_cli.inputs.discover import discover
from rollout_cli.core.options import ConvertOptions
from rollout_cli.inputs.jsonl import read_jsonl
from rollout_cli.run.stages import finish_unit, parse_part
from rollout_cli.inputs.units import Unit
from rollout_cli.run.tasks import PartTask


def _file(tmp_path, n=60, blank_every=7) -> Path:
    p = tmp_path / "in" / "step_4.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        lines.append(b'{"index": %d, "status": "%s"}' % (i, b"x" * (i * 37 % 300)))
        if blank_every and i % blank_every == 3:
            lines.append(b"   ")
    p.write_bytes(b"\n".join(lines))  # the last line has no newline
    return p


def _ask_in_thread(stage: str) -> tuple[threading.Thread, list]:
    """An idle worker's request, asked (and waiting) in a thread; its answer lands in the list."""
    got: list = []
    t = threading.Thread(target=lambda: got.append(take_over(stage)))
    t.start()
    deadline = time.monotonic() + 10
    while not os.path.exists(stage + ".ask"):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    return t, got


@pytest.fixture
def small_rest(monkeypatch):
    monkeypatch.setattr(handover, "MIN_REST_BYTES", 64)


def _records(path, start, end, offer=None, first_line=1):
    stats: dict = {}
    recs, numbers = [], []
    for c in read_jsonl(str(path), start=start, end=end, first_line=first_line, chunk_records=4, stats=stats,
                        handover=offer):
        recs += [chunk_record(c, i) for i in range(len(c))]
        numbers += c.numbers
    return recs, numbers, stats["lines"]


def test_the_rest_is_handed_over_at_a_line_start(tmp_path, small_rest):
    path = _file(tmp_path)
    size = path.stat().st_size
    stage = str(tmp_path / "p0.arrow")
    t, got = _ask_in_thread(stage)
    first, numbers, lines = _records(path, 0, size, Offer(stage, str(path)))
    t.join()
    (cut, end), = got
    assert 0 < cut < end == size
    assert path.read_bytes()[cut - 1:cut] == b"\n"
    rest, rest_numbers, _ = _records(path, cut, end)
    whole, whole_numbers, whole_lines = _records(path, 0, size)
    assert [r["index"] for r in first + rest] == [r["index"] for r in whole]  # each line once, in order
    assert numbers + [n + lines for n in rest_numbers] == whole_numbers
    assert open(stage + ".answer").read() == f"{cut} {end}"


def test_too_little_left_is_kept(tmp_path):
    path = _file(tmp_path, n=20)
    stage = str(tmp_path / "p0.arrow")
    t, got = _ask_in_thread(stage)
    recs, _, _ = _records(path, 0, path.stat().st_size, Offer(stage, str(path)))
    t.join()
    assert got == [None] and len(recs) == 20


def test_a_finished_part_answers_no_and_late_asks_withdraw(tmp_path, small_rest):
    path = _file(tmp_path, n=30)
    stage = str(tmp_path / "p0.arrow")
    recs, _, _ = _records(path, 0, path.stat().st_size, Offer(stage, str(path)))
    assert len(recs) == 30 and os.path.exists(stage + ".done")
    assert take_over(stage) is None  # asked after the end: withdrawn by the asker
    assert os.path.exists(stage + ".withdrawn") and not os.path.exists(stage + ".ask")


def test_one_request_per_part(tmp_path, small_rest):
    path = _file(tmp_path)
    stage = str(tmp_path / "p0.arrow")
    t, got = _ask_in_thread(stage)
    assert take_over(stage) is None  # a second asker is turned away at once
    _records(path, 0, path.stat().st_size, Offer(stage, str(path)))
    t.join()
    assert got[0] is not None


def test_a_withdrawn_request_is_not_acted_on(tmp_path, small_rest):
    path = _file(tmp_path)
    stage = str(tmp_path / "p0.arrow")
    with open(stage + ".ask", "w"):
        pass
    os.rename(stage + ".ask", stage + ".withdrawn")  # as an asker that gave up does
    recs, _, _ = _records(path, 0, path.stat().st_size, Offer(stage, str(path)))
    assert len(recs) == 60 and not os.path.exists(stage + ".answer")


def test_a_pending_request_at_the_end_gets_no(tmp_path, small_rest):
    path = _file(tmp_path, n=10)
    stage = str(tmp_path / "p0.arrow")
    offer = Offer(stage, str(path))
    with open(stage + ".ask", "w"):  # asked after the last poll
        pass
    offer.close()
    assert open(stage + ".answer").read() == "-"


def test_a_taken_but_unanswered_request_fails_loudly(tmp_path, monkeypatch):
    stage = str(tmp_path / "p0.arrow")
    monkeypatch.setattr(handover, "_PATIENCE_S", 0.05)

    def taken_by_a_dead_worker():
        while not os.path.exists(stage + ".ask"):
            time.sleep(0.001)
        os.rename(stage + ".ask", stage + ".taken")

    t = threading.Thread(target=taken_by_a_dead_worker)
    t.start()
    with pytest.raises(handover.HandoverLost):
        take_over(stage)
    t.join()


def test_a_step_handed_over_converts_as_one(tmp_path, small_rest):
    """Two parts of a step, the second handing its rest to a third: the same step (rows, ids,
    rewards, rejects with their line numbers) as the file parsed whole."""
    samples = []
    for i in range(48):
        samples.append(make_sample(index=i, group_index=i // 4, reward=float(i % 3), response_length=2 + i % 5))
    raw = {40: b'{"tokens": [1, 2], "status": "lost"}'}  # a bad sample in the handed-over rest
    path = write_jsonl(tmp_path / "in" / "step_4.jsonl", samples, raw_lines=raw)
    inp = discover([str(path)], None)[0][0]
    size = path.stat().st_size
    data = path.read_bytes()
    mid = data.index(b"\n", size // 3) + 1
    opts = ConvertOptions(mmap=False, on_error="skip")

    def finish(tasks_results, root):
        root.mkdir(parents=True, exist_ok=True)
        for d in ("data/step-000004", "parts"):
            (root / d).mkdir(parents=True, exist_ok=True)
        return finish_unit(Unit(inp, 4), tasks_results, opts, str(root))

    whole_root = tmp_path / "whole"
    (whole_root / "parts").mkdir(parents=True)
    whole = finish([parse_part(PartTask(0, 0, inp, 0, size, str(whole_root / "parts" / "p0.arrow")), opts, None)],
                   whole_root)

    root = tmp_path / "split"
    (root / "parts").mkdir(parents=True)
    a = parse_part(PartTask(0, 0, inp, 0, mid, str(root / "parts" / "p0.arrow")), opts, None)
    victim = PartTask(0, 1, inp, mid, size, str(root / "parts" / "p1.arrow"))
    taker = PartTask(0, 2, inp, 0, None, str(root / "parts" / "p2.arrow"), take_from=victim.stage_path)
    got: list = []
    t = threading.Thread(target=lambda: got.append(parse_part(taker, opts, None)))
    t.start()
    while not os.path.exists(victim.stage_path + ".ask"):
        time.sleep(0.001)
    b = parse_part(victim, opts, None)
    t.join()
    c = got[0]
    assert mid < c.start < size and c.records > 0 and b.records + c.records + a.records == whole.samples
    split = finish([c, a, b], root)  # in any order: parts are put in byte order
    for field in ("samples", "rows", "rejected", "rollouts", "tokens", "rejects", "anomalies"):
        assert getattr(split, field) == getattr(whole, field), field
    assert split.rejects[0]["line"] == 41
    assert [s["blake3"] for s in split.shards] == [s["blake3"] for s in whole.shards]
