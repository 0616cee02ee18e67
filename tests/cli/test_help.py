"""Every command's --help at 80 columns: every option name whole, no line wider than 80; the
shared option declarations; docs/cli.md equals what the help prints now."""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import typer
from typer.core import TyperOption

from rollout_cli.cli import docs
from rollout_cli.cli import options as cli_options
from rollout_cli.cli.app import app
from rollout_cli.core import choices, options
from rollout_cli.core.options import ConvertOptions, RuleOptions

ROOT = Path(__file__).resolve().parents[2]
GROUP = typer.main.get_command(app)
COMMANDS = [[]] + [[name] for name in GROUP.list_commands(None)]


def option_names(args: list[str]) -> list[str]:
    """Every option name of the command, --help included, from the click command itself."""
    ctx = GROUP.make_context("rollout-cli", [], resilient_parsing=True)
    cmd = GROUP
    if args:
        cmd = GROUP.get_command(None, args[0])
        ctx = cmd.make_context(args[0], [], parent=ctx, resilient_parsing=True)
    names = []
    for p in cmd.get_params(ctx):
        if getattr(p, "param_type_name", "") == "option":
            names += [*p.opts, *p.secondary_opts]
    return names


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a) or "root")
def test_help_at_80_columns_shows_every_option_name_whole(args):
    text = docs.help_text(args)
    assert "…" not in text  # rich cuts a too-narrow cell with an ellipsis
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
    names = option_names(args)
    assert "--help" in names and len(names) >= 3
    for name in names:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), f"{name} not whole in {' '.join(args)} --help"


def test_convert_help_is_in_panels():
    text = docs.help_text(["convert"])
    for panel in ("Rewards", "Normalisation", "Rollout ids", "Inputs", "Validation", "Output", "Execution"):
        assert f"\n{panel}:\n" in text, panel


def test_docs_cli_md_is_current():
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == docs.render(), \
        "docs/cli.md is stale: run python -m rollout_cli.cli.docs"


def test_docs_api_md_is_current():
    assert (ROOT / "docs" / "api.md").read_text(encoding="utf-8") == docs.render_api(), \
        "docs/api.md is stale: run python -m rollout_cli.cli.docs"


def test_docs_api_md_documents_every_public_name():
    import rollout_cli

    text = docs.render_api()
    for name in rollout_cli.__all__:
        if name != "__version__":
            assert f"### `{name}`" in text and getattr(rollout_cli, name).__doc__.split("\n")[0].strip() in text, name
    assert "public API is `rollout_cli.__all__` and `rollout_cli.loader.__all__`" in text


def test_docs_check_flags_a_stale_page(tmp_path):
    page, api = tmp_path / "cli.md", tmp_path / "api.md"
    args = ["--out", str(page), "--api-out", str(api)]
    assert docs.main(args) == 0
    assert docs.main(["--check", *args]) == 0
    page.write_text(page.read_text(encoding="utf-8").replace("--shards", "--shard"), encoding="utf-8")
    assert docs.main(["--check", *args]) == 1
    assert docs.main(args) == 0
    api.write_text(api.read_text(encoding="utf-8").replace("def verify(", "def verify_output("), encoding="utf-8")
    assert docs.main(["--check", *args]) == 1


# ------------------------------------------------------------------------------ one declaration


# the input options a command that reads dumps shares (the rule group: tests/cli/test_options.py)
SHARED_INPUTS = ("steps", "step", "trust_pickle", "input_format", "prime_rl_subset")


def _params(name: str) -> dict[str, TyperOption]:
    return {p.name: p for p in GROUP.get_command(None, name).params if isinstance(p, TyperOption)}


def _declared(p: TyperOption) -> tuple:
    return p.opts, p.help, p.metavar, p.rich_help_panel, p.default


def test_convert_inspect_report_and_audit_share_the_input_options():
    conv = _params("convert")
    for name in ("inspect", "report", "audit"):
        other = _params(name)
        for field in SHARED_INPUTS:
            if field == "step" and name in ("report", "audit"):  # they read whole runs: no --step
                continue
            assert _declared(conv[field]) == _declared(other[field]), (name, field)
    # every field of the library's RuleOptions is a convert flag
    given = cli_options.option_values(RuleOptions, {name: p.default for name, p in conv.items()})
    assert set(given) == {f.name for f in dataclasses.fields(RuleOptions)}


def test_option_values_maps_flags_to_fields():
    got = cli_options.option_values(ConvertOptions, {
        "advantage_estimator": choices.Estimator.gspo, "disable_grpo_std_normalization": True,
        "disable_rewards_normalization": False, "shards": 4, "as_json": True, "inputs": ["x"]})
    assert got == {"advantage_estimator": "gspo", "grpo_std_normalization": False, "rewards_normalization": True, "shards": 4}
    assert type(got["advantage_estimator"]) is str


def test_inspect_and_report_defaults_equal_library_defaults():
    from rollout_cli.inspection import InspectOptions
    from rollout_cli.reporting import ReportOptions

    insp, rep = _params("inspect"), _params("report")
    assert insp["max_anomalies"].default == InspectOptions().max_anomalies
    assert insp["split"].default.value == InspectOptions().split
    lib = ReportOptions.default()
    assert (rep["details"].default, rep["max_anomalies"].default) == (lib.details, lib.max_anomalies)


# ------------------------------------------------------------------------------ value sets


def test_value_sets_come_from_the_enums():
    assert options.ADVANTAGE_ESTIMATORS == choices.values(choices.Estimator)
    assert options.SCOPES == choices.values(choices.Scope)
    assert options.COMPRESSIONS == choices.values(choices.Compression)
    assert options.ON_ERRORS == choices.values(choices.OnError)
    assert options.ENGINES == choices.values(choices.Engine)


@pytest.mark.parametrize("name", ["convert", "inspect"])
def test_help_names_every_choice(name):
    """A choice option shows a short metavar, so its help text must list the values."""
    for p in _params(name).values():
        if hasattr(p.type, "choices"):
            assert p.metavar and len(p.metavar) <= 6, p.name
            for value in p.type.choices:
                assert re.search(rf"\b{re.escape(str(value))}\b", p.help), (p.name, value)


def test_per_value_needs_every_value():
    with pytest.raises(AssertionError):
        cli_options.per_value({choices.Scope.strict: "x", choices.Scope.step: "y"})


# ------------------------------------------------------------------------------ layering


def test_commands_never_import_the_root_app_or_privates():
    """app registers the commands; a command module imports no private name from a sibling.
    (docs.py sits above app: it prints the app's help.)"""
    for path in sorted((ROOT / "rollout_cli" / "cli").glob("*.py")):
        if path.name in ("app.py", "docs.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                assert node.module != "app", f"{path.name} imports from app"
                assert not any(a.name.startswith("_") for a in node.names), f"{path.name}: private import"
