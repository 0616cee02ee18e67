"""A converted run that exercises every derive rule: compact rollouts, truncated, aborted and
removed samples, equal-reward groups and a rollout whose samples disagree on the reward."""
from __future__ import annotations

from pathlib import Path

from conftest import copts, make_sample, write_jsonl


def _s(index, group, reward, rid=None, **kw):
    return make_sample(index=index, group_index=group, rollout_id=rid, reward=reward, **kw)


def run_samples() -> list[dict]:
    """One step, four prompt groups (the expected rows are spelled out in the tests)."""
    return [
        # group 0: a compact rollout (two samples, one id) tying a single one; a loser
        _s(0, 0, 1.0, rid=100), _s(1, 0, 1.0, rid=100, prompt_len=5), _s(2, 0, 0.0, rid=101), _s(3, 0, 1.0, rid=102),
        # group 1: equal rewards
        _s(4, 1, 0.5, rid=110), _s(5, 1, 0.5, rid=111),
        # group 2: truncated, aborted and removed samples beside one plain candidate
        _s(6, 2, 1.0, rid=120, status="truncated"), _s(7, 2, 1.0, rid=121, status="aborted"),
        _s(8, 2, 1.0, rid=122, remove_sample=True), _s(9, 2, 0.2, rid=123),
        # group 3: a rollout whose samples disagree on the reward; a best and a worst
        _s(10, 3, 1.0, rid=130), _s(11, 3, 0.0, rid=130), _s(12, 3, 2.0, rid=131), _s(13, 3, -1.0, rid=132),
    ]


def converted_run(tmp: Path, keep_text: bool = False, samples=None) -> Path:
    from rollout_cli.run.convert import convert

    src = write_jsonl(tmp / "dumps" / "rollout_data" / "1.jsonl", samples or run_samples())
    out = tmp / "out"
    convert([str(src)], str(out), copts(keep_text=keep_text))
    return out
