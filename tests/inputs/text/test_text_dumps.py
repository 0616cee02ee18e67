"""Text-only dumps (verl's rollout_data_dir, TRL's completion tables, a generic prompt/completion
dump): recognised by content, refused with a named exit 3 without --tokenizer, and tokenized
through it into rows that are not token-exact."""
from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, sample_generator
from rollout_cli.cli.app import app
from rollout_cli.core.hashing import file_digest
from rollout_cli.inputs.discover import input_format

tokenizers = pytest.importorskip("tokenizers")
gen = sample_generator("make_text_dumps")
MESSAGE = "no token ids; pass --tokenizer PATH to tokenize (the rows will not be token-exact)"


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return gen.build_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok(tok_dir):
    return tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def rows(out) -> list[dict]:
    m = json.loads((out / "manifest.json").read_text())
    return [r for s in m["steps"] for sh in s["shards"] for r in pq.read_table(out / sh["path"]).to_pylist()]


def expected(tok, prompt: str, response: str) -> tuple[list[int], int]:
    p = tok.encode(prompt).ids  # as a text is encoded by default
    r = tok.encode(response, add_special_tokens=False).ids
    return p + r, len(r)


def test_the_sample_folders_are_recognised_by_content():
    assert {input_format(str(p)) for p in (SAMPLE_DATA / "verl_text").glob("*.jsonl")} == {"verl_text"}
    assert {input_format(str(p)) for p in (SAMPLE_DATA / "trl").rglob("*.parquet")} == {"trl"}
    assert input_format(str(SAMPLE_DATA / "chat_drift" / "1.jsonl")) == "jsonl"  # token-level: slime-shaped


@pytest.mark.parametrize("folder, name", [("verl_text", "verl rollout_data_dir text dump"),
                                          ("trl", "TRL completions table")])
def test_without_a_tokenizer_a_text_dump_is_named_exit_3(tmp_path, folder, name):
    for cmd in (["convert", SAMPLE_DATA / folder, tmp_path / "out"], ["inspect", SAMPLE_DATA / folder]):
        r = run(*cmd)
        assert r.exit_code == 3, r.output
        assert f"{name}: {MESSAGE}" in r.output
    assert not (tmp_path / "out").exists()


def test_verl_text_dump_converts_through_the_tokenizer(tmp_path, tok, tok_dir):
    r = run("convert", SAMPLE_DATA / "verl_text", tmp_path / "out", "--tokenizer", tok_dir)
    assert r.exit_code == 0, r.output
    got = rows(tmp_path / "out")
    lines = [json.loads(x) for p in sorted((SAMPLE_DATA / "verl_text").glob("*.jsonl")) for x in p.read_text().splitlines()]
    assert len(got) == len(lines) == 24
    for row, line in zip(got, lines):
        tokens, rl = expected(tok, line["input"], line["output"])
        assert row["tokens"] == tokens and row["response_length"] == rl
        assert row["loss_mask"] == [1] * rl and row["raw_reward"] == line["score"] and row["step"] == line["step"]
        assert row["token_exact"] is False
    # prompt groups: the lines of a step with the same input, numbered by first appearance
    assert [r["group_index"] for r in got if r["step"] == 1] == [0] * 4 + [1] * 4 + [2] * 4
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    digest = file_digest(str(tok_dir / "tokenizer.json"), "blake3")
    assert m["counts"]["not_token_exact"] == 24 and m["tokenizer"]["blake3"] == digest == m["options"]["tokenizer"]
    assert m["schema_version"] >= 5 and [i["format"] for i in m["inputs"]] == ["verl_text"] * 2
    r = run("inspect", tmp_path / "out")
    assert r.exit_code == 0 and "not token-exact: 24 of 24 rows" in r.output
    assert run("verify", tmp_path / "out").exit_code == 0


def test_a_token_level_output_is_token_exact(tmp_path):
    r = run("convert", SAMPLE_DATA / "chat_drift", tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert {x["token_exact"] for x in rows(tmp_path / "out")} == {True}
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["counts"]["not_token_exact"] == 0


def test_trl_table_in_each_of_its_forms(tmp_path, tok, tok_dir):
    src = pq.read_table(SAMPLE_DATA / "trl" / "completions" / "completions_00001.parquet")
    recs = src.to_pylist()
    recs[0]["format_reward"] = float("nan")  # a reward function that did not apply: nansum counts 0
    (tmp_path / "jsonl").mkdir()
    (tmp_path / "jsonl" / "completions_00001.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    (tmp_path / "csv").mkdir()
    import pyarrow.csv as pcsv

    pcsv.write_csv(pa.Table.from_pylist(recs), tmp_path / "csv" / "completions_00001.csv")
    for form in ("jsonl", "csv"):
        assert input_format(str(next((tmp_path / form).iterdir()))) == "trl"
        r = run("convert", tmp_path / form, tmp_path / f"out-{form}", "--tokenizer", tok_dir / "tokenizer.json")
        assert r.exit_code == 0, r.output
        got = rows(tmp_path / f"out-{form}")
        assert len(got) == 12
        for row, rec in zip(got, recs):
            assert (row["tokens"], row["response_length"]) == expected(tok, rec["prompt"], rec["completion"])
            fmt = 0.0 if math.isnan(rec["format_reward"]) else rec["format_reward"]
            assert row["raw_reward"] == rec["accuracy_reward"] + fmt and row["step"] == 1
        assert [r["group_index"] for r in got] == [0] * 4 + [1] * 4 + [2] * 4


def test_a_generic_text_dump_reads_with_its_own_group_and_the_file_step(tmp_path, tok, tok_dir):
    recs = [{"prompt": f"What is {i // 2} plus 1?", "completion": f"Answer: {i}", "score": i % 2, "group": ["b", "a"][i % 2]}
            for i in range(4)]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "step_7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in x.items() if k != "group"} | {"step": 8} for x in recs]),
                   tmp_path / "in" / "eight.parquet")
    assert {input_format(str(p)) for p in (tmp_path / "in").iterdir()} == {"text"}
    r = run("convert", tmp_path / "in", tmp_path / "out", "--tokenizer", tok_dir)
    assert r.exit_code == 0, r.output
    got = rows(tmp_path / "out")
    assert [x["step"] for x in got] == [7] * 4 + [8] * 4  # the file name's, then the rows' own
    assert [x["group_index"] for x in got] == [0, 1, 0, 1] + [0, 0, 1, 1]  # the dump's `group`, else the prompt
    assert [x["raw_reward"] for x in got[:4]] == [0, 1, 0, 1]
    assert all(x["tokens"] == expected(tok, rec["prompt"], rec["completion"])[0] for x, rec in zip(got, recs))


def test_a_text_line_that_cannot_be_mapped_is_named(tmp_path, tok_dir):
    (tmp_path / "in").mkdir()
    lines = [{"input": "a", "output": "b", "score": 1.0, "step": 1}, {"input": "a", "output": 3, "score": 1.0, "step": 1}]
    (tmp_path / "in" / "1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = run("convert", tmp_path / "in", tmp_path / "out", "--tokenizer", tok_dir)
    assert r.exit_code == 3 and "1.jsonl:line 2: output: expected text, got int" in r.output


def test_a_tokenizer_path_that_holds_none_is_a_usage_error(tmp_path):
    r = run("convert", SAMPLE_DATA / "verl_text", tmp_path / "out", "--tokenizer", tmp_path)
    assert r.exit_code == 2 and "holds no tokenizer.json" in r.output


def test_the_text_sample_data_is_reproducible(tmp_path):
    gen.build(tmp_path)
    for sub in ("tokenizer", "verl_text", "trl", "chat_drift"):
        shipped = {p.relative_to(SAMPLE_DATA / sub): p.read_bytes() for p in (SAMPLE_DATA / sub).rglob("*") if p.is_file()}
        made = {p.relative_to(tmp_path / sub): p.read_bytes() for p in (tmp_path / sub).rglob("*") if p.is_file()}
        assert shipped == made, sub


def test_show_puts_each_token_decoded_beside_its_id(tmp_path, tok, tok_dir):
    """On a dump and on a converted output: each token's piece, and its role by the loss mask."""
    src = SAMPLE_DATA / "chat_drift"
    rec = json.loads((src / "1.jsonl").read_text().splitlines()[0])
    assert run("convert", src, tmp_path / "out").exit_code == 0
    for where in (src, tmp_path / "out"):
        r = run("inspect", where, "--show", "1:0", "--tokenizer", tok_dir, "--json")
        assert r.exit_code == 0, r.output
        dec = json.loads(r.output)["rollout"]["samples"][0]["decoded"]
        assert dec["ids"] == rec["tokens"] and "".join(dec["pieces"]) == tok.decode(rec["tokens"], skip_special_tokens=False)
        p0 = len(rec["tokens"]) - rec["response_length"]
        assert dec["roles"] == ["prompt"] * p0 + ["trained" if m else "masked" for m in rec["loss_mask"]]
    from rollout_cli.text.pieces import render

    prompt, response = render(dec)
    assert prompt.startswith("<s>│<|im_start|>│s") and "<|im_end|>│\\n│⟦<|im_start|>│u" in response  # the masked user turn
    assert response.count("⟦") == response.count("⟧") == 1
    text = run("inspect", src, "--show", "1:0", "--tokenizer", tok_dir).output
    assert "decoded (--tokenizer" in text and "⟦" in text
    page = tmp_path / "r.html"
    assert run("report", src, "-o", page, "--tokenizer", tok_dir).exit_code == 0
    assert page.read_text().count('"decoded":') == 4


def test_audit_says_when_its_rows_are_not_token_exact(tok_dir):
    from rollout_cli.auditing.api import text_dump_notes
    from rollout_cli.core.options import RuleOptions
    from rollout_cli.inputs.discover import discover

    inputs, _, _ = discover([str(SAMPLE_DATA / "verl_text"), str(SAMPLE_DATA / "chat_drift")],
                            options=RuleOptions(tokenizer=str(tok_dir)))
    notes = text_dump_notes(inputs)
    assert len(notes) == 2 and all("verl rollout_data_dir text dump tokenized by --tokenizer" in n
                                   and "not token-exact" in n for n in notes)
