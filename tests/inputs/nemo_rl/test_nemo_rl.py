"""NeMo-RL step logs: the mapping onto slime's fields, prompt groups across parts, bad input,
the train-dump payload, and the same rows as slime's JSONL of the same samples."""
from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from conftest import copts, read_rows, write_jsonl
from framework_dumps import Conversation, Turn, gen, nemo_rl_batch, write_batched_jsonl
from rollout_cli.cli.app import app
from rollout_cli.core.errors import InvalidInputError
from rollout_cli.inputs.nemo_rl import reader as nemo_rl
from rollout_cli.inputs.discover import discover
from rollout_cli.inputs.registry import read_input
from rollout_cli.run.convert import convert

SAMPLE = Path(__file__).resolve().parents[3] / "sample_data" / "nemo_rl"
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                derandomize=True, database=None)
FAST = ["--workers", "1", "--no-mmap"]


def conv(prompt, *turns, reward=1.0, keep=True) -> Conversation:
    """A row: the prompt, then turns given as (tokens, generated)."""
    out = []
    for k, (tokens, generated) in enumerate(turns):
        lp = [-(0.25 * (k + 1)) - 0.125 * j for j in range(len(tokens))] if generated else None
        out.append(Turn(list(tokens), generated, lp))
    return Conversation(list(prompt), out, reward, keep, ["q", "a"])


def write_step(path: Path, rows: list[Conversation]) -> Path:
    write_batched_jsonl(nemo_rl_batch(rows), path)
    return path


def slime_sample(row: Conversation, index: int, group: int) -> dict:
    """What the same row is as one of slime's samples (the facts both formats carry)."""
    tokens = list(row.prompt)
    mask, lps = [], []
    for t in row.turns:
        tokens += t.tokens
        mask += [int(t.generated)] * len(t.tokens)
        lps += [float(np.float32(x)) for x in t.logprobs] if t.generated else [0.0] * len(t.tokens)
    p0 = mask.index(1)  # the response starts at the first generated token (of the turns)
    return {"index": index, "group_index": group, "tokens": tokens,
            "response_length": len(mask) - p0, "loss_mask": mask[p0:], "rollout_log_probs": lps[p0:],
            "reward": float(np.float32(row.reward)), "status": "completed", "remove_sample": not row.keep}


def slime_step(rows: list[Conversation]) -> list[dict]:
    groups: dict = {}
    return [slime_sample(r, i, groups.setdefault(tuple(r.prompt), len(groups))) for i, r in enumerate(rows)]


def samples_of(path: Path) -> list[dict]:
    (inp,), _, _ = discover([str(path)])
    out = []
    for chunk in read_input(inp):
        for i in range(len(chunk)):
            rec = {k: chunk.values(k)[i] for k in ("index", "group_index", "tokens", "response_length", "loss_mask",
                                                   "rollout_log_probs", "reward", "status", "remove_sample")}
            out.append(rec)
    return out


ROWS = [
    conv([5, 6, 7], ([11, 12], True), reward=1.0),
    conv([5, 6, 7], ([13], True), ([40, 41], False), ([14, 15], True), reward=0.0),  # multi-turn: a tool turn inside
    conv([8, 9], ([16, 17, 18, 19, 20, 21, 22], True), reward=0.5, keep=False),  # 9 tokens: width 16
]


# ------------------------------------------------------------------------------ mapping


def test_rows_map_onto_slime_fields(tmp_path):
    path = write_step(tmp_path / "exp_001" / "train_data_step3.jsonl", ROWS)
    line = json.loads(path.read_text().splitlines()[1])
    assert line["idx"] == 1 and len(line["token_ids"]) == 1 and len(line["token_ids"][0]) == 16  # padded to 8k
    got = samples_of(path)
    assert [s["tokens"] for s in got] == [[5, 6, 7, 11, 12], [5, 6, 7, 13, 40, 41, 14, 15], [8, 9, 16, 17, 18, 19, 20, 21, 22]]
    assert [s["response_length"] for s in got] == [2, 5, 7]
    assert got[1]["loss_mask"] == [1, 0, 0, 1, 1]
    assert got[1]["rollout_log_probs"] == [-0.25, 0.0, 0.0, -0.75, -0.875]
    assert [s["reward"] for s in got] == [1.0, 0.0, 0.5]
    assert [s["index"] for s in got] == [0, 1, 2]
    assert [s["remove_sample"] for s in got] == [False, False, True]
    assert {s["status"] for s in got} == {"completed"}
    assert got[0]["group_index"] == got[1]["group_index"] != got[2]["group_index"]


def test_sample_log_folder_converts_with_groups_in_order(tmp_path):
    res = convert([str(SAMPLE)], str(tmp_path / "out"), copts())
    assert [(s["split"], s["step"]) for s in res["steps"]] == [("train", 1), ("train", 2)]
    assert any("val_data_step2.jsonl" in n and "no train data" in n for n in res["notes"])
    rows = read_rows(tmp_path / "out", step=1)
    assert [r["group_index"] for r in rows] == [0] * 4 + [1] * 4 + [2] * 4
    assert [r["rollout_id"] for r in rows] == list(range(12)) == [r["sample_index"] for r in rows]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert {i["format"] for i in manifest["inputs"]} == {"nemo_rl"}


def test_identical_prompts_apart_are_one_group(tmp_path):
    rows = [conv([1, 2], ([3], True)), conv([4], ([5], True)), conv([1, 2], ([6], True), reward=0.0)]
    write_step(tmp_path / "train_data_step1.jsonl", rows)
    convert([str(tmp_path / "train_data_step1.jsonl")], str(tmp_path / "out"), copts())
    assert [r["group_index"] for r in read_rows(tmp_path / "out")] == [0, 1, 0]


@pytest.fixture
def split_inline(monkeypatch):
    """Cut even tiny JSONL files into byte ranges, and run the parts in this process."""
    import rollout_cli.inputs.jsonl.reader as rj
    import rollout_cli.run.convert as conv_mod
    from rollout_cli.run.engines.local import InlineEngine

    real = rj.split_ranges
    monkeypatch.setattr(rj, "split_ranges", lambda path, parts, min_bytes=1: real(path, parts, min_bytes=1))
    monkeypatch.setattr(conv_mod, "make_engine", lambda *a, **k: InlineEngine())


def test_a_step_read_in_parts_gives_the_same_groups_and_bytes(tmp_path, split_inline):
    rows = gen.random_conversations(random.Random(7), 6, 3, multi_turn=True)
    write_step(tmp_path / "in" / "train_data_step2.jsonl", rows)
    convert([str(tmp_path / "in")], str(tmp_path / "one"), copts(workers=1, shards=2))
    convert([str(tmp_path / "in")], str(tmp_path / "four"), copts(workers=4, shards=2))
    from conftest import shard_bytes

    assert shard_bytes(tmp_path / "one") == shard_bytes(tmp_path / "four")
    assert sorted({r["group_index"] for r in read_rows(tmp_path / "four")}) == list(range(6))


def test_train_payload_keeps_trainer_log_probs_and_advantages(tmp_path):
    path = write_step(tmp_path / "train_data_step4.jsonl", ROWS)
    batch = nemo_rl_batch(ROWS)
    p = nemo_rl.train_payload(str(path))
    assert (p["format_version"], p["rollout_id"], p["rank"], len(p["samples"])) == (2, 4, 0, 3)
    s = p["samples"][1]
    assert s["rollout_position"] == 1 and s["sample_index"] == 1 and s["response_lengths"] == 5
    assert s["tokens"].tolist() == [5, 6, 7, 13, 40, 41, 14, 15] and s["loss_masks"].tolist() == [1, 0, 0, 1, 1]
    np.testing.assert_array_equal(s["log_probs"], batch["prev_logprobs"][1, 3:8].astype(np.float64))
    np.testing.assert_array_equal(s["advantages"], batch["advantages"][1, 3:8].astype(np.float64))
    np.testing.assert_array_equal(s["rollout_log_probs"], batch["generation_logprobs"][1, 3:8].astype(np.float64))


# ------------------------------------------------------------------------------ bad input


def _edit(path: Path, line: int, fn) -> None:
    lines = path.read_text().splitlines()
    rec = json.loads(lines[line - 1])
    fn(rec)
    lines[line - 1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")


def _set(key, value):
    def fn(rec):
        rec[key] = value
    return fn


@pytest.mark.parametrize("case,field,expected", [
    ("mask", "token_loss_mask", "expected length 16 (the width of token_ids), got 15"),
    ("lengths", "input_lengths", "expected 1 <= input_lengths <= 16 (the width of token_ids), got 17"),
    ("no_response", "token_loss_mask", "no loss-masked token within input_lengths"),
    ("unwrapped", "rewards", "expected a one-element list"),
    ("truncated", None, "invalid JSON"),
    # Python's json writes NaN literally: read, then refused by the log-prob rules
    ("nan", "rollout_log_probs", "expected finite numbers, got nan at position 0"),
])
def test_bad_input_exits_3_naming_file_line_and_field(tmp_path, case, field, expected):
    path = write_step(tmp_path / "exp_001" / "train_data_step1.jsonl", ROWS)
    if case == "mask":
        _edit(path, 2, lambda r: r["token_loss_mask"][0].pop())
    elif case == "lengths":
        _edit(path, 2, _set("input_lengths", [17]))
    elif case == "no_response":
        _edit(path, 2, lambda r: r.update(token_loss_mask=[[0] * 16]))
    elif case == "unwrapped":
        _edit(path, 2, _set("rewards", 1.0))
    elif case == "nan":
        _edit(path, 2, lambda r: r.update(generation_logprobs=[[float("nan")] * len(r["generation_logprobs"][0])]))
    else:
        text = path.read_text().splitlines()
        path.write_text(text[0] + "\n" + text[1][: len(text[1]) // 2] + "\n" + text[2] + "\n")
    r = CliRunner().invoke(app, ["convert", str(tmp_path), str(tmp_path / "out"), *FAST])
    assert r.exit_code == 3, r.output
    assert f"{path}:line 2" in r.stderr and expected in r.stderr
    if field:
        assert f": {field}: " in r.stderr
    assert "Traceback" not in r.output and not (tmp_path / "out" / "manifest.json").exists()


def test_train_payload_names_the_bad_line(tmp_path):
    path = write_step(tmp_path / "train_data_step1.jsonl", ROWS)
    _edit(path, 3, _set("input_lengths", [0]))
    with pytest.raises(InvalidInputError, match=r"train_data_step1.jsonl:line 3: input_lengths: expected 1 <= "):
        nemo_rl.train_payload(str(path))


def test_skip_mode_rejects_only_the_bad_row(tmp_path):
    path = write_step(tmp_path / "train_data_step1.jsonl", ROWS)
    _edit(path, 1, lambda r: r.update(token_loss_mask=[[0] * 16]))
    convert([str(path)], str(tmp_path / "out"), copts(on_error="skip"))
    (reject,) = [json.loads(x) for x in (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    assert reject["line"] == 1 and reject["field"] == "token_loss_mask" and reject["file"] == str(path)
    rows = read_rows(tmp_path / "out")
    assert [r["sample_index"] for r in rows] == [1, 2]


# ------------------------------------------------------------------------------ the same rows as slime's JSONL


@st.composite
def nemo_steps(draw):
    prompts = [draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)) for _ in range(draw(st.integers(1, 3)))]
    rows = []
    for p in prompts:
        for _ in range(draw(st.integers(1, 3))):
            turns = [(draw(st.lists(st.integers(1, 99), min_size=1, max_size=4)), True)]
            for _ in range(draw(st.integers(0, 2))):
                turns.append((draw(st.lists(st.integers(1, 99), min_size=1, max_size=3)), draw(st.booleans())))
            rows.append(conv(p, *turns, reward=draw(st.sampled_from([0.0, 0.25, 0.5, 1.0])),
                             keep=draw(st.booleans()) or draw(st.booleans())))
    if draw(st.booleans()) and len(rows) > 1:  # a prompt's rows need not be consecutive
        rows.append(rows.pop(draw(st.integers(0, len(rows) - 2))))
    return rows


@settings(max_examples=25, **SETTINGS)
@given(nemo_steps())
def test_same_rows_as_slime_jsonl_of_the_same_samples(rows):
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_step(d / "nemo" / "exp_001" / "train_data_step5.jsonl", rows)
        write_jsonl(d / "slime" / "5.jsonl", slime_step(rows))
        convert([str(d / "nemo")], str(d / "a"), copts())
        convert([str(d / "slime")], str(d / "b"), copts())
        a, b = read_rows(d / "a"), read_rows(d / "b")
    assert a == b and len(a) == len(rows)


def test_inspect_shows_groups_and_verify_passes_on_the_output(tmp_path):
    r = CliRunner().invoke(app, ["inspect", str(SAMPLE), "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)["summary"]
    assert (summary["prompt_groups"], summary["rollouts"], summary["group_sizes"]) == (5, 18, {"3": 2, "4": 3})
    r = CliRunner().invoke(app, ["inspect", str(SAMPLE)])
    assert r.exit_code == 0 and "prompt groups 5" in r.stdout and "3: 2, 4: 3" in r.stdout
    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["convert", str(SAMPLE), str(out), *FAST]).exit_code == 0
    r = CliRunner().invoke(app, ["verify", str(out), "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["inspect", str(out)])
    assert r.exit_code == 0 and "prompt groups 5" in r.stdout
    r = CliRunner().invoke(app, ["report", str(SAMPLE), "-o", str(tmp_path / "r.html"), "-q"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "r.html").stat().st_size > 1000


# ------------------------------------------------------------------------------ the short way through a line


def _mapped(rec):
    from rollout_cli.inputs.nemo_rl.mapping import _Bad, to_sample

    if rec is None:
        return "unparsed"
    try:
        s = to_sample(rec)
    except _Bad as e:
        return (e.field, e.message)
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in s.items()}


@st.composite
def nemo_lines(draw):
    width = draw(st.integers(0, 12))
    n = draw(st.integers(0, width + 1))
    ids = draw(st.lists(st.integers(0, 2**40), min_size=width, max_size=width))
    # the mask row: sometimes wider or narrower than the others, sometimes not 0/1 (a value of
    # two digits throws off the width read off the row's length: the other rows must catch it)
    mask_width = draw(st.sampled_from([width, width, width + 1, max(width - 1, 0)]))
    mask = draw(st.lists(st.sampled_from([0, 1, 1, 10]) if draw(st.booleans()) else st.integers(0, 1),
                         min_size=mask_width, max_size=mask_width))
    lps = draw(st.lists(st.floats(-30, 0, width=32), min_size=width, max_size=width))
    if draw(st.booleans()):  # right-padded past the row's length, as the logger writes it
        ids[n:] = [draw(st.sampled_from([0, 151643]))] * len(ids[n:])
        mask[n:] = [0] * len(mask[n:])
        lps[n:] = [0.0] * len(lps[n:])
    rec = {"content": [["a [b]", '"token_ids": [[1]]']], "rewards": [draw(st.sampled_from([0.0, 1.5, -1]))],
           "input_lengths": [n], "token_ids": [ids], "token_loss_mask": [mask], "sample_loss_mask": [1.0],
           "advantages": [[0.5] * draw(st.sampled_from([width, width + 1]))], "generation_logprobs": [lps],
           "prev_logprobs": [lps], "idx": 0}
    if draw(st.booleans()):
        rec["agent_ref"] = [{"token_ids": [[7, 7]], "name": "x"}]
    if draw(st.booleans()):
        keys = draw(st.permutations(list(rec)))
        rec = {k: rec[k] for k in keys}
    compact = draw(st.booleans())
    return json.dumps(rec, separators=(",", ":") if compact else None).encode()


@settings(max_examples=200, **SETTINGS)
@given(nemo_lines())
def test_short_way_gives_what_parsing_the_whole_line_gives(line):
    import orjson

    from rollout_cli.inputs.nemo_rl.mapping import LineParser

    block = b"xx\n" + line + b"\nyy"
    want = _mapped(orjson.loads(line))
    assert _mapped(LineParser().parse(block, 3, 3 + len(line))) == want
    assert _mapped(LineParser().parse(bytearray(block), 3, 3 + len(line))) == want  # the JSONL reader's block


def test_short_way_is_taken_for_the_loggers_lines():
    from rollout_cli.inputs.nemo_rl.mapping import LineParser

    p = LineParser()
    line = (SAMPLE / "exp_001" / "train_data_step1.jsonl").read_bytes().split(b"\n")[0]
    rec = p._short(line, 0, len(line))
    assert rec is not None and len(rec["token_ids"]) == rec["input_lengths"][0] < 16
    again = p._short(bytearray(line), 0, len(line))  # as the JSONL reader hands it a line: in its block
    assert again is not None and again["token_ids"].tolist() == rec["token_ids"].tolist()


def test_trainer_rows_are_checked_by_train_payload_only(tmp_path):
    path = write_step(tmp_path / "train_data_step1.jsonl", ROWS)
    _edit(path, 2, lambda r: r["advantages"][0].pop())
    with pytest.raises(InvalidInputError, match=r"line 2: advantages: expected length 16 \(the width of token_ids\), got 15"):
        nemo_rl.train_payload(str(path))
    convert([str(path)], str(tmp_path / "out"), copts())  # no train-row field comes from them
    assert len(read_rows(tmp_path / "out")) == 3


@pytest.mark.parametrize("value,expected", [
    ([[1, 2**70]], "token_ids: expected values in the 64-bit range"),
    ([[1, 2.5]], "token_ids: expected a one-element list holding a list of integers"),
    ([[1, True]], "token_ids: expected a one-element list holding a list of integers"),
    ([[1], [2]], "token_ids: expected a one-element list holding the padded row"),
])
def test_padded_rows_the_json_fallback_parses_are_checked(value, expected):
    from rollout_cli.inputs.nemo_rl.mapping import _Bad, to_sample

    rec = {"rewards": [1.0], "input_lengths": [1], "token_ids": value, "token_loss_mask": [[1, 0]], "idx": 0}
    with pytest.raises(_Bad) as e:
        to_sample(rec)
    assert f"{e.value.field}: {e.value.message}".startswith(expected)
