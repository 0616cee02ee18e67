"""rollout_cli.inspection.show: one rollout's samples, from dumps and from converted output."""
from __future__ import annotations


from inspect_samples import DATA, do_convert, sample, write_jsonl
import pytest

from rollout_cli.core.errors import UsageError
from rollout_cli.inspection import show_rollout, show_rollouts


def test_show_dump_and_output(tmp_path):
    r = show_rollout([str(DATA / "pt")], "2:16")["rollout"]
    assert (r["step"], r["rollout_id"], r["rollout_mask_sum"], r["text"]) == (2, 16, 18, True)
    assert [s["sample_index"] for s in r["samples"]] == [16, 17, 18]
    assert r["samples"][1]["mask_runs"] == [[1, 3], [0, 3], [1, 3]]
    assert "is_palindrome" in r["samples"][0]["response"]
    plain = do_convert([DATA / "jsonl"], tmp_path / "plain")
    o = show_rollout([str(plain)], "2:16")["rollout"]
    assert o["text"] is False and "--keep-text" in o["note"] and "prompt" not in o["samples"][0]
    assert [s["reward"] for s in o["samples"]] == [s["reward"] for s in r["samples"]]
    text = do_convert([DATA / "jsonl"], tmp_path / "text", keep_text=True)
    t = show_rollout([str(text)], "3:7")["rollout"]
    assert t["text"] is True and len(t["samples"]) == 3 and t["samples"][0]["label"] == "6"


def test_show_lists_rejected_siblings(tmp_path):
    f = write_jsonl(tmp_path / "2.jsonl", [sample(0, 0, 4, 1.0, mask=[1]), sample(1, 0, 4, 0.0), sample(2, 0, None, 0.0)])
    r = show_rollout([str(f)], "4")["rollout"]
    assert r["samples"] == [] and [x["field"] for x in r["rejected"]] == ["loss_mask", None]


def test_show_many_equals_show_one_by_one(tmp_path):
    """show_rollouts reads each step once, and gives what show_rollout gives for each ref."""
    refs = [(2, 16), (2, 19), (3, 7), (3, 2), (1, 0)]
    text = do_convert([DATA / "jsonl"], tmp_path / "text", keep_text=True)
    for paths in ([str(DATA / "jsonl")], [str(DATA / "parquet")], [str(text)]):
        many = show_rollouts(paths, refs)
        assert list(many) == refs
        for step, rid in refs:
            assert many[(step, rid)] == show_rollout(paths, f"{step}:{rid}")["rollout"]
    with pytest.raises(UsageError, match="no rollout 999"):
        show_rollouts([str(DATA / "jsonl")], [(2, 16), (2, 999)])
