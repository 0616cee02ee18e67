"""The report's data: inspect's aggregations embedded as they are, the extra per-step numbers
recomputed from the same rows, the drill-down tables and embedded rollouts."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import SAMPLE_DATA
from inspect_samples import sample, write_jsonl
from rollout_cli.core.errors import OutputError, OutputExistsError, UsageError
from rollout_cli.inspection import InspectOptions, inspect_paths, iter_steps, show_rollout
from rollout_cli.reporting import ReportOptions, build_report, collect, read_data, render_html

JSONL = str(SAMPLE_DATA / "jsonl")


@pytest.fixture(scope="module")
def data() -> dict:
    return collect([JSONL])


def test_inspect_results_embedded_unchanged(data):
    assert list(data["splits"]) == ["train", "eval"]
    for split in ("train", "eval"):
        assert data["splits"][split]["inspect"] == inspect_paths([JSONL], None, InspectOptions(split=split))


def test_trend_extras_from_the_same_rows(data):
    d = data["splits"]["train"]
    per = {p["step"]: p for p in d["inspect"]["summary"]["per_step"]}
    for sd in iter_steps([JSONL]):
        t = d["trends"][str(sd.step)]
        rl = sd.rows.column("response_length").to_numpy()
        assert t["response_length_p50"] == pytest.approx(np.percentile(rl, 50))
        assert t["response_length_p90"] == pytest.approx(np.percentile(rl, 90))
        assert t["raw_reward_std"] == pytest.approx(sd.rows.column("raw_reward").to_numpy().std(), abs=1e-6)
        counts = np.unique(sd.rows.column("rollout_id").to_numpy(), return_counts=True)[1]
        assert t["samples_per_rollout_max"] == counts.max()
        assert t["zero_variance_share"] == pytest.approx(per[sd.step]["zero_variance_groups"] / per[sd.step]["prompt_groups"])
    # sample_data/README.md: step 1 has 4 groups, two of them (1 and 2) with zero variance
    assert d["trends"]["1"]["zero_variance_share"] == 0.5


def test_distributions_cover_every_row(data):
    d = data["splits"]["train"]
    s = d["inspect"]["summary"]
    dist = d["distributions"]
    assert sum(dist["response_length"]["n"]) == s["rows"]
    assert sum(dist["raw_reward"]["n"]) == s["rewards"]["raw_reward"]["count"]
    assert sum(dist["reward"]["n"]) == s["rewards"]["reward"]["count"]
    assert dist["group_sizes"] == s["group_sizes"] and dist["samples_per_rollout"] == s["samples_per_rollout"]
    h = dist["response_length"]
    assert h["x"][0] <= min(r for sd in iter_steps([JSONL]) for r in sd.rows.column("response_length").to_pylist())


def test_step_tables_hold_every_sample_by_rollout(data):
    d = data["splits"]["train"]
    for sd in iter_steps([JSONL]):
        t = d["steps"][str(sd.step)]
        rows = sd.rows.to_pylist()
        assert sum(t["rollouts"]["n"]) == len(rows) == len(t["samples"]["sample_index"])
        start = 0
        for rid, n in zip(t["rollouts"]["id"], t["rollouts"]["n"]):
            want = [r for r in rows if r["rollout_id"] == rid]
            got = range(start, start + n)
            assert [t["samples"]["sample_index"][j] for j in got] == [r["sample_index"] for r in want]
            assert [t["samples"]["mask_sum"][j] for j in got] == [r["mask_sum"] for r in want]
            assert [d["statuses"][t["samples"]["status"][j]] for j in got] == [r["status"] for r in want]
            start += n
    # sample_data/README.md: step 2's explicit ids
    assert d["steps"]["2"]["rollouts"]["id"] == [16, 19, 21, 22, 24, 26, 29, 30]
    assert d["steps"]["2"]["rollouts"]["n"] == [3, 2, 1, 2, 2, 3, 1, 1]


def test_embedded_rollouts_are_show_rollout(data):
    det = data["splits"]["train"]["details"]
    assert len(det) == 35  # every rollout of the sample data fits the default budget
    assert det["2:16"] == show_rollout([JSONL], "2:16")["rollout"]
    assert det["2:16"]["samples"][1]["mask_runs"] == [[1, 3], [0, 3], [1, 3]]  # a tool span: a 0-run


def test_details_budget_picks_anomalous_rollouts_first():
    d = collect([JSONL], ReportOptions(InspectOptions(), details=2))
    det = d["splits"]["train"]["details"]
    assert len(det) == 2
    # a rollout inspect lists: sample 10 of step 1 trains on no token (remove_sample)
    assert "1:10" in det
    assert collect([JSONL], ReportOptions(InspectOptions(), details=0))["splits"]["train"]["details"] == {}


def test_converted_output_and_formats_agree(sample_out_clean):
    conv = collect([str(sample_out_clean)])
    assert conv["splits"]["train"]["inspect"] == inspect_paths([str(sample_out_clean)])
    dump = collect([JSONL])
    for fmt in ("parquet", "pt"):
        other = collect([str(SAMPLE_DATA / fmt)])
        assert other["splits"]["train"]["steps"] == dump["splits"]["train"]["steps"]
    assert conv["splits"]["train"]["steps"]["2"]["rollouts"] == dump["splits"]["train"]["steps"]["2"]["rollouts"]
    assert conv["splits"]["train"]["distributions"] == dump["splits"]["train"]["distributions"]


def test_text_is_clipped_and_escaped(tmp_path):
    long = "x" * 10000 + "</script><script>alert(1)</script>"
    p = write_jsonl(tmp_path / "d" / "1.jsonl", [sample(0, 0, reward=0.0, response=long), sample(1, 0, reward=1.0)])
    out = tmp_path / "r.html"
    build_report([str(p)], str(out))
    html = out.read_text()
    assert html.count("</script>") == 3  # data, plotly.js, page script: the text cannot end an element
    d = read_data(str(out))
    resp = d["splits"]["train"]["details"]["1:0"]["samples"][0]["response"]
    assert resp.startswith("x" * 4000) and "more characters" in resp and len(resp) < 4100


def test_page_has_no_external_resource(data):
    html = render_html(data)
    for needle in ("<script src", "<link", "http://", "https://cdn", "@import"):
        assert needle not in html.split('<script type="application/json"')[0], needle
    assert "Content-Security-Policy" in html and "default-src 'none'" in html


def test_write_is_atomic_and_refuses_existing(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("old")
    for overwrite in (False, True):  # not a page report wrote: never replaced
        with pytest.raises(OutputExistsError, match="not a page report wrote") as ei:
            build_report([JSONL], str(out), overwrite=overwrite)
        assert "--overwrite" not in str(ei.value)
    assert out.read_text() == "old"
    out.unlink()
    build_report([JSONL], str(out))
    with pytest.raises(OutputExistsError, match="--overwrite replaces it"):  # a page: replaced with --overwrite
        build_report([JSONL], str(out))
    r = build_report([JSONL], str(out), overwrite=True)
    assert r["bytes"] == out.stat().st_size and read_data(str(out))["splits"]["train"]["inspect"]["summary"]["samples"] == 46
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left
    with pytest.raises(OutputError):
        build_report([JSONL], str(out / "x.html"))


def test_progress_reports_each_phase():
    seen = []
    collect([JSONL], progress=lambda what, done, total: seen.append((what, done, total)))
    whats = [w for w, _, _ in seen]
    assert whats.count("train: rows") == 3 and ("train: inspect", 1, 1) in seen
    assert seen[-1] == ("eval: rollouts", 7, 7)


def test_bad_options():
    with pytest.raises(UsageError):
        collect([JSONL], ReportOptions(InspectOptions(), details=-1))
    with pytest.raises(UsageError):
        collect([str(SAMPLE_DATA / "nothing-here")])


def test_deterministic(tmp_path):
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    build_report([JSONL], str(a))
    build_report([JSONL], str(b))
    assert a.read_bytes() == b.read_bytes()


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory):
    import train_dumps as T

    return T.write_run(tmp_path_factory.mktemp("run"), edit=T.reward_fault)


def test_trainer_section_numbers_are_audits(trainer_run):
    from rollout_cli.auditing import AuditOptions, audit_paths

    rollout, train = trainer_run
    d = collect([str(rollout)], ReportOptions(InspectOptions(), train=[str(train)]))
    tr = d["trainer"]
    a = audit_paths([str(rollout)], [str(train)], AuditOptions(max_divergences=100))
    assert tr["audit"]["summary"] == a["summary"]
    assert tr["audit"]["divergences"] == a["divergences"] and len(a["divergences"]) == 1
    for mine, theirs in zip(tr["audit"]["steps"], a["steps"]):
        for k in ("step", "samples", "divergences", "mismatch", "ref_mismatch", "advantages", "entropy"):
            assert mine[k] == theirs[k], k
        assert mine["loss_weight"]["movers"] == theirs["loss_weight"]["movers"]
    # the distribution of d holds every counted token
    assert sum(tr["d_hist"]["n"]) == sum(s["mismatch"]["tokens"] for s in a["steps"])
    # the divergent rollout is embedded first, with its per-token d and the trainer's mask
    (rec,) = a["divergences"]
    key = f"{rec['step']}:{rec['rollout_id']}"
    assert key in d["splits"]["train"]["details"] and key in tr["tokens"]
    (tok,) = tr["tokens"][key]
    assert tok["rollout_position"] == rec["rollout_position"] == 4
    counted = [x for x, m in zip(tok["d"], tok["mask"]) if m]
    assert len(counted) == 29 and all(x is not None for x in counted)
    assert all(x is None for x, m in zip(tok["d"], tok["mask"]) if not m)
    per = {r["rollout_id"]: r["mismatch"] for s in a["steps"] if s["step"] == 1 for r in s["rollouts"]}
    assert max(abs(x) for x in counted) == pytest.approx(per[rec["rollout_id"]]["max_abs_diff"], abs=1e-4)
    assert set(tr["tokens"]) <= set(d["splits"]["train"]["details"])


def test_no_trainer_section_without_train(data):
    assert "trainer" not in data


def test_a_rollout_whose_samples_were_all_rejected_is_not_embedded(tmp_path):
    """An anomaly may name a rollout the output has no rows of (skipped with --on-error skip):
    the page embeds the rollouts that are there."""
    from conftest import copts, make_sample
    from conftest import write_jsonl as write_samples
    from rollout_cli.run.convert import convert

    good = make_sample(group_index=0, index=0)
    bad = dict(make_sample(group_index=0, index=1), loss_mask=[1])  # one entry short
    write_samples(tmp_path / "in" / "step_9.jsonl", [good, bad])
    out = tmp_path / "out"
    convert([str(tmp_path / "in")], str(out), copts(on_error="skip", shards=2))
    d = collect([str(out)])["splits"]["train"]  # raised "--show: train step 9 has no rollout 1"
    assert set(d["details"]) == {"9:0"}


@pytest.fixture(scope="module")
def rules_run(tmp_path_factory):
    """A compact slime run whose trainer ran #1965's id rule: both rules differ from convert's."""
    import train_dumps as T

    root = tmp_path_factory.mktemp("rules")
    for step in (0, 1):
        samples = T.compact(step)
        T.write_train(root / "train_data", samples, step, n=2, rbs=3, id_rule="first_sample")
        T.write_rollout(root / "rollout_data", samples, step, "jsonl")
    return root / "rollout_data", root / "train_data"


def test_trainer_section_rule_findings_are_audits(rules_run):
    from rollout_cli.auditing import AuditOptions, audit_paths
    from rollout_cli.inspection import InspectOptions as IO

    rollout, train = rules_run
    d = collect([str(rollout)], ReportOptions(IO(n_samples_per_prompt=2), train=[str(train)]))
    a = audit_paths([str(rollout)], [str(train)], AuditOptions(n_samples_per_prompt=2, max_divergences=100))
    assert d["trainer"]["audit"]["rules"] == a["rules"]
    assert [(e["step"], e["field"], e["trainer_rule"]) for e in a["rules"]] == [
        (0, "reward", "slime_positional"), (0, "rollout_id", "first_sample"),
        (1, "reward", "slime_positional"), (1, "rollout_id", "first_sample")]
    assert all(e["cost"]["loss_weight"] for e in a["rules"] if e["field"] == "rollout_id")
    for mine, theirs in zip(d["trainer"]["audit"]["steps"], a["steps"]):
        assert mine["trainer_rules"] == theirs["trainer_rules"]


def test_rewards_not_recorded_and_weight_versions_reach_the_page_data(tmp_path, monkeypatch):
    from lineage_cases import jsonl_without_rewards, write_unrecorded

    jsonl_without_rewards(monkeypatch)
    d = collect([str(write_unrecorded(tmp_path / "in"))])["splits"]["train"]
    p = d["inspect"]["summary"]["per_step"][0]
    assert (p["weight_versions"], p["rewards_not_recorded"]) == ({"0": 1, "1": 6}, 4)
    smp = d["steps"]["1"]["samples"]
    assert smp["raw_reward"] == [None, None, None, 1, None, 0]
    assert smp["weight_versions"] == ["1", "1", "1", "1", "0, 1", "1"]
    assert d["distributions"]["raw_reward"]["n"] and sum(d["distributions"]["raw_reward"]["n"]) == 2
