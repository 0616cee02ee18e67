"""rollout_cli's command functions (api/commands.py): for every command, the function's result
`to_dict()` is what the command prints with --json (Typer's CliRunner) on the same input, key
order included, less the keys that vary between runs (`*_seconds`, `*_time`, `elapsed*`); and
paths as `str` or `Path`."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import SAMPLE_DATA, SAMPLE_JSONL
from typer.testing import CliRunner

import rollout_cli
import train_dumps as T
from rollout_cli.cli.app import app

VARYING = re.compile(r"_seconds$|_time$|^elapsed")


def steady(v):
    """`v` without the keys that vary between runs, as JSON text (which keeps key order)."""
    def drop(x):
        if isinstance(x, dict):
            return {k: drop(y) for k, y in x.items() if not VARYING.search(k)}
        if isinstance(x, list):
            return [drop(y) for y in x]
        return x

    return json.dumps(drop(v))


def cli_json(*args, code: int = 0) -> dict:
    r = CliRunner().invoke(app, [str(a) for a in args] + ["--json"])
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def same(cli: dict, result) -> None:
    """The result is frozen, typed and its to_dict() is the --json object, key order included."""
    with pytest.raises(AttributeError):
        setattr(result, next(iter(cli)), None)
    lib = json.loads(json.dumps(result.to_dict()))  # as JSON holds it (tuples as lists, NaN as null)
    assert list(lib) == list(cli)
    assert steady(lib) == steady(cli)


def test_the_drop_rule_keeps_every_other_key():
    assert steady({"elapsed_seconds": 1, "a": {"wall_seconds": 2, "start_time": 3, "elapsed": 4, "secondsx": 5}}) == \
        '{"a": {"secondsx": 5}}'


def test_convert(tmp_path):
    out = tmp_path / "out"
    cli = cli_json("convert", SAMPLE_JSONL, out, "--workers", "1", "--shards", "2", "-q")
    shutil.rmtree(out)
    res = rollout_cli.convert([SAMPLE_JSONL], out, workers=1, shards=2)
    assert isinstance(res, rollout_cli.ConvertResult) and res.out == str(out)
    same(cli, res)
    opts = rollout_cli.ConvertOptions(workers=1, shards=2)
    again = rollout_cli.convert(str(SAMPLE_JSONL), str(out), opts, resume=True)  # up to date: nothing written
    assert "up to date" in again.notes[-1] and again.pending is None and "pending" not in again.to_dict()


def test_inspect_dumps_grouped(tmp_path):
    src = SAMPLE_DATA / "jsonl"
    cli = cli_json("inspect", src, "--group-by", "step", "--sort", "samples:asc", "--max-anomalies", "1")
    res = rollout_cli.inspect([src], group_by="step", sort="samples:asc", max_anomalies=1)
    assert isinstance(res, rollout_cli.InspectResult) and res.checks is None
    same(cli, res)


def test_inspect_output_eval_and_show(sample_out_clean):
    same(cli_json("inspect", sample_out_clean, "--split", "eval"), rollout_cli.inspect(str(sample_out_clean), split="eval"))
    step, rid = rollout_cli.inspect(sample_out_clean, group_by="rollout_id").groups[0]["key"]
    ref = f"{step}:{rid}"
    shown = rollout_cli.inspect([sample_out_clean], show=ref)
    assert isinstance(shown, rollout_cli.RolloutResult)
    same(cli_json("inspect", sample_out_clean, "--show", ref), shown)


def test_inspect_with_gates(tmp_path):
    src = SAMPLE_DATA / "jsonl"
    checks = tmp_path / "checks.toml"
    checks.write_text('fail_on = ["rows > 100000", "mismatch.k3 > 1"]\n')
    cli = cli_json("inspect", src, "--fail-on", "step.truncation_rate > 2", "--checks", checks,
                   "--junit-xml", tmp_path / "cli.xml")
    gated = rollout_cli.check_gates(rollout_cli.inspect(src), fail_on="step.truncation_rate > 2", checks=checks,
                                    junit_xml=tmp_path / "lib.xml")
    assert gated.checks_passed and [c["expr"] for c in gated.checks][-1] == "step.truncation_rate > 2"
    assert any("skipped" in n for n in gated.summary["notes"])  # audit's figure, noted
    same(cli, gated)
    assert (tmp_path / "lib.xml").read_text() == (tmp_path / "cli.xml").read_text()
    failed = rollout_cli.check_gates(rollout_cli.inspect(src), ["rows > 1"])
    assert not failed.checks_passed
    same(cli_json("inspect", src, "--fail-on", "rows > 1", code=7), failed)
    with pytest.raises(rollout_cli.UsageError):
        rollout_cli.check_gates(rollout_cli.inspect(src), "no_such_figure > 1")
    with pytest.raises(rollout_cli.UsageError):
        rollout_cli.check_gates(rollout_cli.verify(SAMPLE_DATA), "x > 1")  # type: ignore[arg-type]


def test_verify(sample_out_clean, sample_out):
    for quick in (False, True):
        res = rollout_cli.verify(sample_out_clean, quick=quick)
        assert isinstance(res, rollout_cli.VerifyResult) and res.ok and res.quick is quick
        same(cli_json("verify", sample_out_clean, *(["--quick"] if quick else [])), res)
    shard = next((sample_out / "data").rglob("*.parquet"))
    shard.write_bytes(shard.read_bytes()[:-10])
    broken = rollout_cli.verify(str(sample_out))
    assert not broken.ok and broken.failures
    same(cli_json("verify", sample_out, code=4), broken)
    with pytest.raises(rollout_cli.UsageError):
        rollout_cli.verify(sample_out / "nothing")


def _audit_run(root: Path, diverge: bool) -> Path:
    for step in (0, 1):
        samples = T.rollout_samples(step)
        T.write_rollout(root / "rollout_data", samples, step, "pt")
        edit = (lambda p: p["samples"][0].update(rewards=3.0)) if diverge and step == 1 else None
        T.write_train(root / "train_data", samples, step, n=2, rbs=3, dp=2, edit=edit)
    return root


@pytest.mark.parametrize("diverge", [False, True])
def test_audit(tmp_path, diverge):
    root = _audit_run(tmp_path, diverge)
    cli = cli_json("audit", root / "rollout_data", "--train", root / "train_data", "--max-divergences", "0",
                   code=4 if diverge else 0)
    res = rollout_cli.audit(root / "rollout_data", [str(root / "train_data")], max_divergences=0)
    assert isinstance(res, rollout_cli.AuditResult) and res.diverged is diverge
    same(cli, res)
    gated = rollout_cli.check_gates(res, ["mismatch.mean_abs_diff > 5"])
    same(cli_json("audit", root / "rollout_data", "--train", root / "train_data", "--max-divergences", "0",
                  "--fail-on", "mismatch.mean_abs_diff > 5", code=4 if diverge else 0), gated)


def test_report(tmp_path):
    pytest.importorskip("plotly")
    root = _audit_run(tmp_path / "run", False)
    page = tmp_path / "r.html"
    cli = cli_json("report", root / "rollout_data", "-o", page, "--train", root / "train_data", "--details", "3")
    page.unlink()
    res = rollout_cli.report([root / "rollout_data"], page, train=root / "train_data", details=3)
    assert isinstance(res, rollout_cli.ReportResult) and res.trainer is not None
    same(cli, res)
    plain = rollout_cli.report(SAMPLE_JSONL, tmp_path / "p.html")
    assert plain.trainer is None and "trainer" not in plain.to_dict()
    with pytest.raises(rollout_cli.OutputExistsError):
        rollout_cli.report(SAMPLE_JSONL, tmp_path / "p.html")


def test_export(tmp_path, sample_out_clean):
    pytest.importorskip("torch")
    dest = tmp_path / "dest"
    cli = cli_json("export", sample_out_clean, dest, "--format", "slime-pt", "--split", "train", "--steps", "1:2")
    shutil.rmtree(dest)
    res = rollout_cli.export(sample_out_clean, dest, split="train", steps="1:2")
    assert isinstance(res, rollout_cli.ExportResult) and res.dest == str(dest)
    same(cli, res)
    with pytest.raises(rollout_cli.UsageError):
        rollout_cli.export(sample_out_clean, tmp_path / "x", format="csv")


def test_derive(tmp_path, sample_out_clean):
    cli = cli_json("derive", sample_out_clean, tmp_path / "d", "--as", "dpo")
    shutil.rmtree(tmp_path / "d")
    res = rollout_cli.derive(sample_out_clean, tmp_path / "d", as_="dpo")
    assert isinstance(res, rollout_cli.DeriveResult)
    same(cli, res)


def test_errors_carry_their_exit_codes(tmp_path):
    with pytest.raises(rollout_cli.UsageError) as e:
        rollout_cli.inspect(tmp_path / "missing.jsonl")
    assert e.value.exit_code == rollout_cli.ExitCode.USAGE == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(rollout_cli.InvalidInputError) as e:
        rollout_cli.convert(bad, tmp_path / "o", step=1)
    assert e.value.exit_code == rollout_cli.ExitCode.INVALID_INPUT == 3
    with pytest.raises(rollout_cli.UsageError, match="no_such_setting"):
        rollout_cli.convert(SAMPLE_JSONL, tmp_path / "o", no_such_setting=1)


def test_the_cli_calls_exactly_these_functions(monkeypatch, tmp_path):
    """Each command's --json is what its function returns, whatever that is: the command calls
    the function (replaced here) and prints its result's to_dict()."""
    from rollout_cli.api import commands
    from rollout_cli.api.results import ExportResult, ReportResult, VerifyResult
    from rollout_cli.derivation.run import DeriveResult

    made = {
        "convert": rollout_cli.ConvertResult(out="o", counts={"rows": 1}, steps=[], rejects=None, skipped=[], notes=[],
                                             warnings=[], anomalies=[], elapsed_seconds=0.0),
        "inspect": rollout_cli.InspectResult(summary={"notes": ["n"]}, groups=[], anomalies=[], removed=[],
                                             loss_weight=[]),
        "verify": VerifyResult(out="o", ok=True, quick=False, schema_version=9, tool_version="x", checked={}, files=[],
                               failures=[], notes=[], pending=[]),
        "audit": rollout_cli.AuditResult(summary={"divergences": 0, "notes": []}, rules=[], steps=[], divergences=[]),
        "report": ReportResult(path="p", bytes=1, counts={}),
        "export": ExportResult(out="o", dest="d", format="slime-pt", files=[], samples=0, notes=[], elapsed_seconds=0.0),
        "derive": DeriveResult(out="o", dest="d", as_="sft", rows={}, files=(), counts={}, elapsed_seconds=0.0),
    }
    calls = []
    for name, result in made.items():
        monkeypatch.setattr(commands, name, lambda *a, _r=result, _n=name, **k: calls.append(_n) or _r)
    args = {
        "convert": ["convert", SAMPLE_JSONL, tmp_path / "o"],
        "inspect": ["inspect", SAMPLE_JSONL],
        "verify": ["verify", tmp_path],
        "audit": ["audit", SAMPLE_JSONL, "--train", tmp_path],
        "report": ["report", SAMPLE_JSONL, "-o", tmp_path / "p.html"],
        "export": ["export", tmp_path / "o", tmp_path / "d", "--format", "slime-pt"],
        "derive": ["derive", tmp_path / "o", tmp_path / "d", "--as", "sft"],
    }
    for name, a in args.items():
        assert cli_json(*a) == json.loads(json.dumps(made[name].to_dict())), name
    assert calls == list(made)
