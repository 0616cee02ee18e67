"""inspect --check-template: the chat template re-rendered through the tokenizer against the
stored tokens; the planted drifts of sample_data/chat_drift (a dropped newline at a turn
boundary, a duplicated BOS) found and named, per step shares, and the gate."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import SAMPLE_DATA, sample_generator
from rollout_cli.cli.app import app

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
gen = sample_generator("make_text_dumps")
DRIFT = SAMPLE_DATA / "chat_drift"


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return gen.build_tokenizer(tmp_path_factory.mktemp("tok"))


def inspect_json(*args):
    r = CliRunner().invoke(app, ["inspect", *map(str, args), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_planted_drift_is_found_and_named(tok_dir):
    d = inspect_json(DRIFT, "--tokenizer", tok_dir, "--check-template")
    found = {a["sample_index"]: a for a in d["anomalies"] if a["kind"] == "template_drift"}
    assert sorted(found) == [1, 2]  # samples 0 and 3 render back to their tokens
    nl = found[1]  # the newline after <|im_end|> closing the first answer, dropped
    assert (nl["turn"], nl["role"], nl["stored_token"], nl["rendered_token"]) == (2, "assistant", "<|im_start|>", "\n")
    assert nl["where"] == [{"file": str(DRIFT / "1.jsonl"), "line": 2}] and nl["step"] == 1
    bos = found[2]  # BOS twice
    assert (bos["position"], bos["turn"], bos["stored_token"], bos["rendered_token"]) == (1, 0, "<s>", "<|im_start|>")
    t = d["summary"]["template"]
    assert (t["checked"], t["drifting"], t["drift_rate"], t["not_checked"]) == (4, 2, 0.5, 0)
    (p,) = t["per_step"]
    assert (p["step"], p["drift_rate"], p["supervised_difference"]) == (1, 0.5, -1)  # the newline was trained on
    assert p["supervised_stored"] == d["summary"]["tokens"]["mask_sum"]
    assert d["summary"]["anomaly_counts"]["template_drift"] == 2


def test_the_position_is_the_first_difference(tok_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    recs = [json.loads(x) for x in (DRIFT / "1.jsonl").read_text().splitlines()]
    d = inspect_json(DRIFT, "--tokenizer", tok_dir, "--check-template")
    for a in (a for a in d["anomalies"] if a["kind"] == "template_drift"):
        rec = recs[a["sample_index"]]
        msgs = rec["metadata"]["messages"]
        whole = tok.encode(gen.render(msgs, False)).ids
        p = a["position"]
        assert rec["tokens"][:p] == whole[:p] and rec["tokens"][p] != whole[p]
        assert tok.decode([rec["tokens"][p]], skip_special_tokens=False) == a["stored_token"]


def test_another_template_file_and_the_gate(tmp_path, tok_dir):
    tpl = tmp_path / "no_bos.jinja"  # the template without its BOS: every sample drifts at position 0
    tpl.write_text(gen.CHAT_TEMPLATE.replace("{{ bos_token }}", ""))
    d = inspect_json(DRIFT, "--tokenizer", tok_dir, "--check-template", "--chat-template", tpl)
    drifts = [a for a in d["anomalies"] if a["kind"] == "template_drift"]
    assert len(drifts) == 4 and {(a["position"], a["stored_token"]) for a in drifts} == {(0, "<s>")}
    assert d["summary"]["template"]["template"] == str(tpl)
    r = CliRunner().invoke(app, ["inspect", str(DRIFT), "--tokenizer", str(tok_dir), "--check-template",
                                 "--fail-on", "template.drift_rate > 0.25"])
    assert r.exit_code == 7 and "template.drift_rate > 0.25" in r.output and "step 1" in r.output
    r = CliRunner().invoke(app, ["inspect", str(DRIFT), "--tokenizer", str(tok_dir), "--check-template",
                                 "--fail-on", "template.drift_rate > 0.5"])
    assert r.exit_code == 0, r.output


def test_a_prompt_without_messages_is_not_checked(tmp_path, tok_dir):
    recs = [json.loads(x) for x in (DRIFT / "1.jsonl").read_text().splitlines()]
    recs[0]["prompt"] = "plain text"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    t = inspect_json(tmp_path / "in", "--tokenizer", tok_dir, "--check-template")["summary"]["template"]
    assert (t["checked"], t["not_checked"], t["drifting"]) == (3, 1, 2)


@pytest.mark.parametrize("args, message", [
    (["--check-template"], "--check-template needs --tokenizer PATH"),
    (["--chat-template", "x.jinja"], "--chat-template applies to --check-template"),
])
def test_usage(args, message):
    r = CliRunner().invoke(app, ["inspect", str(DRIFT), *args])
    assert r.exit_code == 2 and message in r.output
