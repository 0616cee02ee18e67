"""The rule group (cli/options.py): every command that computes rewards or ids takes every rule
option, declared once with the library's defaults and the same help; inspect and report on dumps
show the rewards convert writes with the same flags."""
from __future__ import annotations

import dataclasses
import inspect as pyinspect
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from conftest import SAMPLE_DATA
from rollout_cli.cli import options as o
from rollout_cli.cli.app import app
from rollout_cli.core.options import INPUT_FIELDS, RULE_FIELDS, RuleOptions
from rollout_cli.reporting import read_data

GROUP = typer.main.get_command(app)
RULE_COMMANDS = ("convert", "inspect", "report", "audit")
JSONL = str(SAMPLE_DATA / "jsonl")
# step 1 holds 16 samples (4 x 4: slime's rows of 4), steps 2 and 3 hold 15 (one row each)
COMPAT = ["--slime-compat", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4"]
FLAG_SETS = {"slime-compat": COMPAT, "reward-baseline-rollout": ["--reward-baseline", "rollout"]}


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def _params(name: str) -> dict[str, TyperOption]:
    return {p.name: p for p in GROUP.get_command(None, name).params if isinstance(p, TyperOption)}


def _help_rows(name: str) -> dict[str, str]:
    """Option name -> its help row(s), whitespace and box lines collapsed (wide enough that the
    text is not wrapped differently by each command's column widths)."""
    r = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    rows: dict[str, str] = {}
    current = None
    for line in r.stdout.splitlines():
        # an option row starts at column 2 or 3; its wrapped text is indented further
        m = re.match(r"^ {1,2}(?:-[a-zA-Z], )?(--[a-z0-9-]+)", line)
        if m:
            current = m.group(1)
            rows[current] = line
        elif line.lstrip().startswith(("╰", "╭")) or not line.strip():
            current = None  # a panel ends
        elif current:
            rows[current] += " " + line
    return {k: " ".join(v.replace("│", " ").split()) for k, v in rows.items()}


def test_the_group_is_every_rule_field_of_the_library():
    assert sorted(map(o.rule_field, o.RULE_PARAMS)) == sorted(RULE_FIELDS)
    assert set(RULE_FIELDS) | set(INPUT_FIELDS) == {f.name for f in dataclasses.fields(RuleOptions)}
    assert len(RULE_FIELDS) == 13  # spatial_merge_size the last


def test_every_rule_command_lists_every_rule_option_with_the_same_help():
    flags = {name: _params("convert")[name].opts[0] for name in o.RULE_PARAMS}
    shown: dict[str, dict[str, str]] = {}
    for cmd in RULE_COMMANDS:
        params = _params(cmd)
        rows = _help_rows(cmd)
        for name, flag in flags.items():
            assert name in params, f"{cmd} lacks {flag}"
            p, c = params[name], _params("convert")[name]
            assert (p.opts, p.help, p.metavar, p.rich_help_panel, p.default) == \
                   (c.opts, c.help, c.metavar, c.rich_help_panel, c.default), (cmd, flag)
            assert flag in rows, f"{cmd} --help does not list {flag}"
            shown.setdefault(flag, {})[cmd] = rows[flag]
    for flag, by_cmd in shown.items():
        assert len(set(by_cmd.values())) == 1, (flag, by_cmd)
    assert "[default: grpo]" in shown["--advantage-estimator"]["report"]


def test_defaults_are_the_librarys():
    lib = RuleOptions()
    for name in o.RULE_PARAMS:
        d = _params("inspect")[name].default
        value = getattr(d, "value", d)
        field = o.rule_field(name)
        assert (not value if name.startswith("disable_") else value) == getattr(lib, field), name


def test_rule_options_hands_the_command_one_rule_options():
    got = {}

    @o.rule_options
    def cmd(path: str, rules: o.RuleOptions = o.RULES, steps: o.Steps = None) -> None:
        got.update(rules=rules, steps=steps, path=path)

    names = list(pyinspect.signature(cmd).parameters)
    assert names == ["path", *o.RULE_PARAMS, "steps"]
    kw = {name: o.rule_default(name) for name in o.RULE_PARAMS}
    kw.update(disable_grpo_std_normalization=True, slime_compat=True, rollout_batch_size=8)
    cmd(path="p", steps="1:2", **kw)
    assert got["rules"] == RuleOptions(grpo_std_normalization=False, slime_compat=True, rollout_batch_size=8)
    assert (got["path"], got["steps"]) == ("p", "1:2")
    opts = o.options_of(RuleOptions, got["rules"], {"steps": "1:2", "path": "p"})
    assert opts == RuleOptions(grpo_std_normalization=False, slime_compat=True, rollout_batch_size=8, steps="1:2")


# ------------------------------------------------------------------------------ same rewards as convert


def _converted(tmp_path, flags: list[str]) -> dict[int, list[tuple[int, float]]]:
    """Per train step: (rollout id, reward) of every row convert writes, in input order."""
    out = tmp_path / "out"
    r = run("convert", JSONL, str(out), "-q", *flags)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    steps = {}
    for s in manifest["steps"]:
        if s["split"] != "train":
            continue
        t = pa.concat_tables([pq.read_table(out / sh["path"]) for sh in s["shards"]]).sort_by("rollout_position")
        steps[s["step"]] = list(zip(t.column("rollout_id").to_pylist(), t.column("reward").to_pylist()))
    return steps


def _per_rollout(steps: dict) -> dict[tuple[int, int], tuple[float, float, float]]:
    """(step, rollout id) -> reward mean, min and max, rounded as inspect rounds."""
    out = {}
    for step, rows in steps.items():
        by: dict[int, list[float]] = {}
        for rid, rew in rows:
            by.setdefault(rid, []).append(rew)
        for rid, v in by.items():
            a = np.asarray(v, dtype=np.float64)
            out[(step, rid)] = (round(float(a.mean()), 6), round(float(a.min()), 6), round(float(a.max()), 6))
    return out


@pytest.mark.parametrize("flags", list(FLAG_SETS.values()), ids=list(FLAG_SETS))
def test_inspect_on_dumps_shows_the_rewards_convert_writes(tmp_path, flags):
    written = _per_rollout(_converted(tmp_path, flags))
    r = run("inspect", JSONL, "--group-by", "rollout_id", "--json", *flags)
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    shown = {tuple(g["key"]): (g["reward_mean"], g["reward_min"], g["reward_max"]) for g in res["groups"]}
    assert shown.keys() == written.keys()
    if "--slime-compat" in flags:  # said as convert says it
        assert [n for n in res["summary"]["notes"] if "one group" in n] == [
            f"step {s}: 15 samples, not 4 × 4: normalised as one group, as slime does" for s in (2, 3)]
    for k, v in written.items():
        assert shown[k] == pytest.approx(v, abs=2e-6), k
    plain = run("inspect", JSONL, "--group-by", "rollout_id", "--json")
    default = {tuple(g["key"]): (g["reward_mean"], g["reward_min"], g["reward_max"]) for g in json.loads(plain.stdout)["groups"]}
    assert any(abs(default[k][0] - shown[k][0]) > 1e-3 for k in shown)  # the flags change what is shown


@pytest.mark.parametrize("flags", list(FLAG_SETS.values()), ids=list(FLAG_SETS))
def test_report_on_dumps_shows_the_rewards_convert_writes(tmp_path, flags):
    written = _converted(tmp_path, flags)
    page = tmp_path / "r.html"
    r = run("report", JSONL, "-o", str(page), "-q", *flags)
    assert r.exit_code == 0, r.output
    steps = read_data(str(page))["splits"]["train"]["steps"]
    assert sorted(int(s) for s in steps) == sorted(written)
    for step, rows in written.items():
        order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # the page lists a rollout's samples together
        want = [round(rows[i][1], 6) for i in order]
        assert steps[str(step)]["samples"]["reward"] == pytest.approx(want, abs=2e-6), step
