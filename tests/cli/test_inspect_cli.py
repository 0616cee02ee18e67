"""`rollout-cli inspect` end to end (CliRunner): groups and counts on every dump format and on converted
output, every anomaly kind on crafted input, the --json snapshot, text output, --show, exit codes.

The snapshot tests/snapshots/inspect_jsonl_by_rollout_id.json was written once, from the repository
root, by `rollout-cli inspect sample_data/jsonl --group-by rollout_id --json`, and checked by hand
against sample_data/README.md (rollout ids, group sizes, rewards). When the output changes on
purpose, rewrite it the same way and review the diff.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inspect_samples import sample, write_jsonl
from rollout_cli.cli.app import app
from rollout_cli.inspection import ANOMALY_KINDS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "sample_data"
SNAPSHOT = ROOT / "tests" / "snapshots" / "inspect_jsonl_by_rollout_id.json"
FORMATS = ("jsonl", "parquet", "pt")

# sample_data/README.md: rollout ids per step, in input order
STEP_IDS = {
    1: list(range(16)),
    2: [16, 16, 16, 19, 19, 21, 22, 22, 24, 24, 26, 26, 26, 29, 30],
    3: [1, 3, 4, 5, 2, 2, 0, 0, 6, 8, 9, 10, 7, 7, 7],
}


def invoke(*args: str):
    return CliRunner().invoke(app, ["inspect", *args])


def inspect_json(*args: str) -> dict:
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def expected_rollout_groups() -> list[tuple[list[int], int]]:
    out = []
    for step, ids in STEP_IDS.items():
        for rid in sorted(set(ids)):
            out.append(([step, rid], ids.count(rid)))
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("converted")
    outs = {}
    for name, extra in (("plain", []), ("text", ["--keep-text", "--shards", "2"])):
        out = base / name
        r = CliRunner().invoke(app, ["convert", str(DATA / "parquet"), str(out), "-q", *extra])
        assert r.exit_code == 0, r.output
        outs[name] = out
    return outs




# ------------------------------------------------------------------------------ groups and counts


@pytest.mark.parametrize("fmt", FORMATS)
def test_rollout_groups_on_every_format(fmt):
    d = inspect_json(str(DATA / fmt), "--group-by", "rollout_id")
    assert [(g["key"], g["samples"]) for g in d["groups"]] == expected_rollout_groups()
    s = d["summary"]
    assert (s["input"], s["files"], s["steps"], s["samples"], s["rows"], s["rollouts"], s["prompt_groups"]) == \
        ("dumps", 3, 3, 46, 46, 35, 12)
    assert s["samples_per_rollout"] == {"1": 27, "2": 5, "3": 3}
    assert s["status"] == {"completed": 40, "truncated": 5, "aborted": 1}
    # rollout_mask_sum of a rollout is the sum of its samples' loss masks
    assert all(g["rollout_mask_sum"] == g["mask_sum"] for g in d["groups"])
    assert next(g for g in d["groups"] if g["key"] == [1, 10])["rollout_mask_sum"] == 0  # remove_sample


@pytest.mark.parametrize("fmt", FORMATS)
def test_other_group_keys_on_every_format(fmt):
    by_step = inspect_json(str(DATA / fmt), "--group-by", "step")["groups"]
    assert [(g["key"], g["samples"], g["rollouts"], g["prompt_groups"]) for g in by_step] == [(1, 16, 16, 4), (2, 15, 8, 4), (3, 15, 11, 4)]
    by_group = inspect_json(str(DATA / fmt), "--group-by", "group_index")["groups"]
    assert [g["key"] for g in by_group] == [[1 + gi // 4, gi] for gi in range(12)]  # per step: [step, group_index]
    assert [g["samples"] for g in by_group] == [4, 4, 4, 4, 5, 3, 5, 2, 4, 4, 4, 3]
    assert [g["rollouts"] for g in by_group] == [4, 4, 4, 4, 2, 2, 2, 2, 4, 2, 4, 1]
    assert by_group[1]["reward_min"] == by_group[1]["reward_max"] == 0.0  # zero variance
    by_status = inspect_json(str(DATA / fmt), "--group-by", "status")["groups"]
    assert {g["key"]: g["samples"] for g in by_status} == {"aborted": 1, "completed": 40, "truncated": 5}
    by_source = inspect_json(str(DATA / fmt), "--group-by", "source_name")["groups"]
    assert sum(g["samples"] for g in by_source) == 46
    ev = inspect_json(str(DATA / fmt), "--split", "eval", "--group-by", "rollout_id")
    assert [g["key"] for g in ev["groups"]] == [[3, i] for i in range(7)]


def test_group_index_groups_are_per_step(tmp_path):
    """Prompt-group ids that restart every step (NeMo-RL's renumbering, per-step JSONL ids) are
    separate groups, keyed [step, group_index] as rollout ids are; the table shows STEP:ID."""
    for step in (1, 2):
        write_jsonl(tmp_path / f"{step}.jsonl", [sample(0, 0, reward=0.0), sample(1, 0, reward=1.0),
                                                 sample(2, 1, reward=0.0), sample(3, 1, reward=float(step))])
    d = inspect_json(str(tmp_path), "--group-by", "group_index")
    assert [(g["key"], g["samples"], g["prompt_groups"]) for g in d["groups"]] == [
        ([1, 0], 2, 1), ([1, 1], 2, 1), ([2, 0], 2, 1), ([2, 1], 2, 1)]
    assert d["summary"]["groups_total"] == 4
    assert d["groups"][3]["raw_reward_max"] == 2.0 and d["groups"][1]["raw_reward_max"] == 1.0
    r = invoke(str(tmp_path), "--group-by", "group_index")
    assert r.exit_code == 0, r.output
    assert "by group_index: 4 group(s)" in r.stdout and "step:group_index" in r.stdout
    assert [line.split()[0] for line in r.stdout.splitlines() if line[:2] in ("1:", "2:")] == ["1:0", "1:1", "2:0", "2:1"]


@pytest.mark.parametrize("group_by", ["rollout_id", "group_index", "step", "status", "source_name"])
def test_converted_output_matches_dumps(converted, group_by):
    for out in converted.values():
        d = inspect_json(str(out), "--group-by", group_by)
        dumps = inspect_json(str(DATA / "parquet"), "--group-by", group_by)
        assert d["groups"] == dumps["groups"]
        assert d["summary"]["input"] == "converted"
        for k in ("samples", "rows", "rollouts", "prompt_groups", "tokens", "rewards", "samples_per_rollout", "group_sizes", "anomaly_counts"):
            assert d["summary"][k] == dumps["summary"][k], k
        assert d["loss_weight"] == dumps["loss_weight"] and len(d["loss_weight"]) == 3


def test_json_snapshot(monkeypatch):
    monkeypatch.chdir(ROOT)
    d = inspect_json("sample_data/jsonl", "--group-by", "rollout_id")
    assert d == json.loads(SNAPSHOT.read_text())
    assert list(d) == ["summary", "groups", "anomalies", "removed", "loss_weight"]


def test_limit_and_sort():
    d = inspect_json(str(DATA / "jsonl"), "--group-by", "rollout_id", "--sort", "tokens", "--limit", "2")
    assert len(d["groups"]) == 2 and d["summary"]["groups_total"] == 35
    assert d["groups"][0]["tokens"] >= d["groups"][1]["tokens"]
    d = inspect_json(str(DATA / "jsonl"), "--group-by", "group_index", "--sort", "key:desc")
    assert [g["key"] for g in d["groups"]] == [[1 + gi // 4, gi] for gi in range(11, -1, -1)]


def test_options_reach_the_pipeline():
    d = inspect_json(str(DATA / "reward_dict" / "jsonl"), "--reward-key", "accuracy", "--group-by", "step")
    assert d["summary"]["options"]["reward_key"] == "accuracy" and d["groups"][0]["samples"] == 16
    r = invoke(str(DATA / "reward_dict" / "jsonl"))  # dict rewards without --reward-key: anomalies, not fatal
    assert r.exit_code == 0 and "invalid_sample 16" in r.stdout
    d = inspect_json(str(DATA / "jsonl"), "--steps", "1", "--disable-rewards-normalization", "--group-by", "rollout_id")
    assert [g["reward_mean"] for g in d["groups"]] == [g["raw_reward_mean"] for g in d["groups"]]
    d = inspect_json(str(DATA / "jsonl"), "--steps", "2:3", "--advantage-estimator", "ppo")
    assert [p["step"] for p in d["summary"]["per_step"]] == [2, 3]


# ---------------------------------------------------------------------------------------- anomalies


def test_every_anomaly_kind_on_crafted_dumps(tmp_path):
    dumps = tmp_path / "dumps"
    write_jsonl(dumps / "1.jsonl", [  # id anomalies
        sample(0, 0, 5, 1.0), sample(1, 0, None, 0.0), sample(2, 0, 5, 1.0),
        sample(3, 1, 8, 1.0), sample(4, 1, None, 0.0), sample(5, 2, 8, 0.0), sample(6, 2, None, 1.0),
    ])
    write_jsonl(dumps / "2.jsonl", [  # group and mask anomalies
        sample(0, 0, None, 1.0), sample(1, 0, None, 0.0), sample(2, 0, None, 1.0),
        sample(3, 1, None, 1.0), sample(4, 1, None, 1.0, mask=[0, 0, 0]), sample(5, 1, None, 1.0),
        sample(6, 2, None, 1.0),
    ])
    write_jsonl(dumps / "3.jsonl", [  # invalid samples
        sample(0, 0, None, 1.0, mask=[1, 1]), sample(1, 0, None, 0.0), sample(2, 0, 4, 1.0, status="weird"), sample(3, 0, 4, 0.0),
    ])
    write_jsonl(dumps / "4.jsonl", [sample(0, None, None, 1.0), sample(1, None, None, 0.0)])
    write_jsonl(dumps / "5.jsonl", [  # lineage: a sample of two weight versions; a rollout too far behind (--max-staleness)
        sample(0, 0, None, 1.0, weight_versions=["5", "6"]), sample(1, 0, None, 0.0, weight_versions=["6"]),
        sample(2, 0, None, 0.5, weight_versions=["2"]),
    ])
    d = inspect_json(str(dumps), "--max-staleness", "1")
    found = {a["kind"] for a in d["anomalies"]}
    # rollout_mask_sum_mismatch needs converted output; sibling_reward_mismatch --reward-baseline rollout;
    # template_drift --check-template (tests/inspection/test_template_drift.py)
    assert found == set(ANOMALY_KINDS) - {"rollout_mask_sum_mismatch", "sibling_reward_mismatch", "template_drift"}
    for a in d["anomalies"]:
        assert a["where"] and all("file" in w for w in a["where"]), a
        assert a["step"] in (1, 2, 3, 4, 5) and a["level"] in ("info", "warning", "error")
    lm = next(a for a in d["anomalies"] if a["kind"] == "loss_mask_length")
    assert lm["where"] == [{"file": str(dumps / "3.jsonl"), "line": 1}]
    assert (d["summary"]["samples"], d["summary"]["rejected"]) == (23, 6)
    mv = next(a for a in d["anomalies"] if a["kind"] == "multi_version_sample")
    assert (mv["where"], mv["weight_versions"]) == ([{"file": str(dumps / "5.jsonl"), "line": 1}], ["5", "6"])
    st = next(a for a in d["anomalies"] if a["kind"] == "stale_rollout")
    assert (st["where"], st["level"], st["rule"]) == ([{"file": str(dumps / "5.jsonl"), "line": 3}], "info", "weight_versions.stale")
    step5 = d["summary"]["per_step"][-1]
    assert (step5["weight_versions"], step5["multi_version_samples"], step5["rejected"]) == ({"5": 1, "6": 2}, 1, 1)


def test_rollout_mask_sum_mismatch_on_converted(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    assert CliRunner().invoke(app, ["convert", str(DATA / "jsonl"), str(out), "-q"]).exit_code == 0
    shard = out / "data" / "step-000002" / "shard-00000-of-00001.parquet"
    t = pq.read_table(shard)
    sums = t.column("rollout_mask_sum").to_pylist()
    sums[0] = 999
    pq.write_table(t.set_column(t.schema.get_field_index("rollout_mask_sum"), "rollout_mask_sum", pa.array(sums, pa.int64())), shard)
    d = inspect_json(str(out))
    bad = [a for a in d["anomalies"] if a["kind"] == "rollout_mask_sum_mismatch"]
    assert len(bad) == 1 and bad[0]["rollout_id"] == 16 and bad[0]["where"] == [{"file": str(shard), "row": 0}]


# ------------------------------------------------------------------------------------ text and --show


def test_plain_text_when_piped():
    r = invoke(str(DATA / "jsonl"), "--group-by", "rollout_id", "--limit", "3")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "train split of dumps: 3 file(s), 3 step(s), 46 samples" in out
    assert "per step" in out and "by rollout_id: 35 group(s), first 3 shown" in out
    assert "1:0 " in out and "zero_variance_group" in out
    assert not any(ch in out for ch in "┏━│└")  # no rich box drawing when not a terminal
    assert "note: 1 eval input file(s) not shown" in r.stderr


def test_text_lists_the_most_severe_first(tmp_path):
    """24 steps of info rows (zero-variance groups) before a step with a warning and an error:
    the 20 listed rows start with the error and the warning, and the counts line counts every
    level."""
    for step in range(1, 25):
        write_jsonl(tmp_path / f"{step}.jsonl", [sample(0, 0, reward=1.0), sample(1, 0, reward=1.0)])
    write_jsonl(tmp_path / "25.jsonl", [sample(0, 0, reward=1.0), sample(1, 0, reward=0.0),
                                        sample(2, 1),  # a one-sample group: a warning
                                        sample(3, 2, mask=[1, 1]), sample(4, 2)])  # a short loss mask: an error
    r = invoke(str(tmp_path))
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if " anomalies: " in line)
    levels = json.loads(invoke(str(tmp_path), "--json").stdout)["summary"]["anomaly_levels"]
    n_info = levels["info"]
    assert levels["error"] == 1 and levels["warning"] >= 1 and n_info >= 24
    total = sum(levels.values())
    assert lines[at] == (f"{total} anomalies: 1 error, {levels['warning']} warning{'s' if levels['warning'] > 1 else ''}, "
                         f"{n_info} info; 20 listed, most severe first (-v or --json for all kept)")
    rows = [line.split()[:3] for line in lines[at + 2:at + 22]]
    assert rows[0][0] == "error" and rows[0][2] == "25"
    assert [r[0] for r in rows[1:1 + levels["warning"]]] == ["warning"] * levels["warning"]
    info_steps = [int(r[2]) for r in rows if r[0] == "info"]
    assert info_steps == sorted(info_steps)  # by step within a level
    assert not lines[at + 22].startswith("info")  # 20 rows listed, no more
    capped = json.loads(invoke(str(tmp_path), "--json", "--max-anomalies", "1").stdout)
    assert capped["summary"]["anomaly_levels"] == levels and len(capped["anomalies"]) < total  # counted, not kept


def test_show_on_dumps_and_converted(converted):
    r = invoke(str(DATA / "jsonl"), "--show", "2:16")
    assert r.exit_code == 0, r.output
    assert "rollout 2:16" in r.stdout and "3 sample(s), rollout_mask_sum 18" in r.stdout
    assert "runs 1x3 0x3 1x3" in r.stdout and "is_palindrome" in r.stdout
    d = inspect_json(str(DATA / "jsonl"), "--steps", "2", "--show", "16")  # ID alone: one step selected
    assert [s["sample_index"] for s in d["rollout"]["samples"]] == [16, 17, 18]
    r = invoke(str(converted["plain"]), "--show", "2:16")
    assert r.exit_code == 0 and "convert with --keep-text" in r.stdout
    d = inspect_json(str(converted["text"]), "--show", "3:7")
    assert d["rollout"]["text"] is True and [s["response"] for s in d["rollout"]["samples"]][0] == "The answer is \\boxed{6}."


def test_show_marks_a_removed_sample_on_dumps_and_converted(converted):
    """sample_data step 1, sample 10 has remove_sample: --show says so, on the dumps (the field)
    and on the output (the column)."""
    for src in (DATA / "jsonl", converted["plain"]):
        r = invoke(str(src), "--show", "1:10")
        assert r.exit_code == 0, r.output
        assert "loss mask 0/" in r.stdout and "trainable (remove_sample), runs 0x" in r.stdout, src
        assert "(remove_sample)" not in invoke(str(src), "--show", "1:9").stdout


# -------------------------------------------------------------------------------------- exit codes


def test_exit_codes(tmp_path, converted):
    assert invoke(str(DATA / "jsonl"), "--group-by", "nope").exit_code == 2
    assert invoke(str(DATA / "jsonl"), "--group-by", "step", "--sort", "nope").exit_code == 2
    assert invoke(str(tmp_path / "missing")).exit_code == 2
    assert invoke(str(DATA / "jsonl"), "--show", "16").exit_code == 2
    assert invoke(str(DATA / "jsonl"), "--show", "1:99").exit_code == 2
    assert invoke(str(converted["plain"]), str(DATA / "jsonl")).exit_code == 2
    bad = tmp_path / "1.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    r = invoke(str(bad), "--json")
    assert r.exit_code == 3 and json.loads(r.stdout)["exit_code"] == 3
    bad_pq = tmp_path / "2.parquet"
    bad_pq.write_bytes(b"PAR1 broken")
    assert invoke(str(bad_pq)).exit_code == 3


def test_unfinished_output_says_what_it_is_and_what_to_run(tmp_path):
    """An output folder holding only an interrupted run: not 'no input files found', but what it
    is and the two ways on."""
    from conftest import copts
    from rollout_cli.run.convert import convert

    def stop(what, done, total):
        if done >= 1:
            raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        convert([str(DATA / "jsonl")], str(out), copts(), progress=stop)
    assert not (out / "manifest.json").exists() and (out / ".staging").is_dir()
    r = invoke(str(out), "--json")
    assert r.exit_code == 2
    msg = json.loads(r.stdout)["message"]
    assert "no input files found" not in msg
    assert f"{out}: an unfinished conversion" in msg and "--resume" in msg and "--overwrite" in msg


def _fanout_dump(tmp_path, sibling_rewards=(1.0, 1.0, 1.0)):
    """Group 0: rollout 10 with three samples, rollout 11 with one (reward 0); group 1: no fan-out."""
    rows = [sample(i, 0, rid=10, reward=r) for i, r in enumerate(sibling_rewards)]
    rows += [sample(3, 0, rid=11, reward=0.0), sample(4, 1, rid=12, reward=0.0), sample(5, 1, rid=13, reward=1.0)]
    return write_jsonl(tmp_path / "7.jsonl", rows)


def test_fanout_baseline_shift_names_the_group_and_the_shift(tmp_path):
    d = inspect_json(str(_fanout_dump(tmp_path)))
    [a] = [a for a in d["anomalies"] if a["kind"] == "fanout_baseline_shift"]
    assert (a["step"], a["shifted_groups"], a["level"]) == (7, 1, "info")
    assert a["groups"] == [{"group_index": 0, "samples": 4, "rollouts": 2, "sample_mean": 0.75, "rollout_mean": 0.5,
                            "shift": -0.25}]
    assert a["where"] == [{"file": str(tmp_path / "7.jsonl"), "line": 1}]
    assert d["summary"]["options"]["reward_baseline"] == "sample"


def test_reward_baseline_rollout_shows_rollout_rewards(tmp_path):
    d = inspect_json(str(_fanout_dump(tmp_path)), "--reward-baseline", "rollout", "--group-by", "rollout_id")
    means = {tuple(g["key"]): g["reward_mean"] for g in d["groups"]}
    assert means[(7, 10)] == pytest.approx(0.7071057558059692, abs=2e-6)
    assert means[(7, 11)] == pytest.approx(-0.7071057558059692, abs=2e-6)
    assert d["summary"]["options"]["reward_baseline"] == "rollout"


def test_sibling_reward_mismatch_is_an_anomaly_not_a_failure(tmp_path):
    path = str(_fanout_dump(tmp_path, (1.0, 0.0, 1.0)))
    d = inspect_json(path, "--reward-baseline", "rollout")
    [a] = [a for a in d["anomalies"] if a["kind"] == "sibling_reward_mismatch"]
    assert a["rollout_id"] == 10 and a["rewards"] == [1.0, 0.0, 1.0] and len(a["where"]) == 3
    d = inspect_json(path, "--reward-baseline", "rollout", "--sibling-reward", "mean")
    assert not [a for a in d["anomalies"] if a["kind"] == "sibling_reward_mismatch"]


def test_quiet_prints_only_the_gates():
    r = invoke(str(DATA / "jsonl"), "-q", "--fail-on", "step.truncation_rate > 0.1",
               "--fail-on", "step.zero_variance_share > 0.9")
    assert r.exit_code == 7, r.output
    assert r.stdout.splitlines() == ["FAILED step.truncation_rate > 0.1: worst 0.1875 at step 1",
                                     "passed step.zero_variance_share > 0.9: worst 0.5 at step 1"]
    r = invoke(str(DATA / "jsonl"), "-q")
    assert r.exit_code == 0 and r.stdout == ""
