"""`rollout-cli inspect PATH...`: flags -> `rollout_cli.inspect` -> tables or JSON.

A rich table on a terminal, aligned plain text when stdout is piped, one JSON object with --json.
"""
from __future__ import annotations

import json
import sys
from typing import Annotated, List, Optional

import typer

from ..core.choices import GroupBy, PrimeRlSubset, Split
from . import options as o
from .common import run_command
from .gating import apply, exit_if_failed, plan, print_lines
from .render import print_inspect, print_rollout

TEXT_GROUP_LIMIT = 50  # groups shown as a table when --limit is not given (JSON: all)
R = o.RULES

GroupByOpt = Annotated[Optional[GroupBy], typer.Option(
    "--group-by", metavar="KEY", rich_help_panel=o.VIEW,
    help=f"One row per group: {o.one_of(GroupBy)}; rollout_id and group_index groups are per step (STEP:ID).")]
Limit = Annotated[Optional[int], typer.Option(
    "--limit", metavar="N", rich_help_panel=o.VIEW,
    help=f"Show at most N groups (default: all with --json, {TEXT_GROUP_LIMIT} in tables; 0: all).")]
Sort = Annotated[Optional[str], typer.Option(
    "--sort", metavar="COL[:ORDER]", rich_help_panel=o.VIEW,
    help="Sort groups by a column (samples, tokens, mask_sum, reward_mean, ...), ORDER asc or desc "
         "(default: key ascending, columns descending).")]
Show = Annotated[Optional[str], typer.Option(
    "--show", metavar="STEP:ID", rich_help_panel=o.VIEW,
    help="Print one rollout's samples: STEP:ID, or ID when there is one step.")]
SplitOpt = Annotated[Split, typer.Option(
    "--split", metavar="SPLIT", rich_help_panel=o.VIEW, help=f"Which split to look at: {o.one_of(Split)}.")]


@o.rule_options
def inspect_cmd(
    paths: Annotated[List[str], typer.Argument(
        metavar="PATH...", show_default=False,
        help="Dump files or folders (searched recursively), - for JSONL on stdin, or converted "
             "output folders (holding manifest.json).")],
    group_by: GroupByOpt = None,
    limit: Limit = None,
    sort: Sort = None,
    show: Show = None,
    split: SplitOpt = Split.train,
    max_anomalies: o.MaxAnomalies = 100,  # inspect.options.DEFAULT_MAX_ANOMALIES (a test compares)
    rules: o.RuleOptions = o.RULES,  # the rule group (cli/options.rule_options)
    steps: o.Steps = R.steps,
    step: o.Step = R.step,
    trust_pickle: o.TrustPickle = R.trust_pickle,
    max_line_bytes: o.MaxLineBytes = R.max_line_bytes,
    max_storage_bytes: o.MaxStorageBytes = R.max_storage_bytes,
    input_format: o.InputFormat = R.input_format,
    tokenizer: o.Tokenizer = R.tokenizer,
    check_template: Annotated[bool, typer.Option(
        "--check-template", rich_help_panel=o.VIEW,
        help="Check each dump sample whose prompt is a message list: the chat template re-rendered through "
             "--tokenizer must be its stored tokens (at every turn where the conversation is in "
             "metadata.messages); anomaly template_drift per sample, summary.template per step.")] = False,
    chat_template: Annotated[Optional[str], typer.Option(
        "--chat-template", metavar="FILE", rich_help_panel=o.VIEW,
        help="The Jinja chat template (or a tokenizer_config.json holding one) for --check-template "
             "(default: the tokenizer folder's own).")] = None,
    prime_rl_subset: o.PrimeRlSubsetOpt = PrimeRlSubset(R.prime_rl_subset),
    fail_on: o.FailOn = None,
    checks: o.ChecksFile = None,
    junit_xml: o.JunitXml = None,
    as_json: o.Json = False,
    quiet: Annotated[bool, typer.Option(
        "-q", "--quiet", help="Print only the gates' results (one line each: verdict, worst value and its step) "
                              "and errors.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="List every kept anomaly and skipped file; tracebacks for internal errors.")] = False,
) -> None:
    """Show what is in dumps or converted output: counts, groups, rewards and anomalies.

    On dumps, the ids and rewards shown are those convert would assign with the same options.

    --json prints {summary, groups, anomalies}, as docs/inspect.md describes. With --fail-on or --checks, exit 7 when a gate fails (docs/ci.md).
    """
    params = locals()  # named as the options' fields
    gates = plan("inspect", fail_on, checks, junit_xml, as_json, verbose, excluded_by="--show" if show is not None else None)

    def work():
        from ..api.commands import inspect
        from ..inspection import InspectOptions

        settings = o.settings_of(InspectOptions, rules, params, "split", "max_anomalies")
        shown = limit if (limit is not None or as_json) else TEXT_GROUP_LIMIT
        return inspect(paths, group_by=group_by, sort=sort, limit=shown, show=show, split=split,
                       max_anomalies=max_anomalies, **settings)

    answer = run_command(work, as_json, verbose)
    if not quiet:
        _dropped_warnings(paths, split.value)
    answer, gated = apply(gates, answer, fail_on, checks, junit_xml, as_json, verbose)
    result = answer.to_dict()
    if as_json:
        print(json.dumps(result))
    elif "rollout" in result:
        print_rollout(result["rollout"])
    elif quiet:
        print_lines(gated, brief=True)
    else:
        print_inspect(result, verbose)
        print_lines(gated)
        for n in result["summary"]["notes"]:
            print(f"note: {n}", file=sys.stderr)
    exit_if_failed(gated)


def _dropped_warnings(paths: List[str], split: str) -> None:
    """On stderr: the trailing rollouts slime's schedule drops, per step of a converted output."""
    from ..core import layout
    from ..output import manifest as manifest_mod
    from ..pipeline.schedule import trailing_warning

    for p in paths:
        if not layout.is_output(p):
            continue
        for s in manifest_mod.read(p).get("steps", []):
            sc = s.get("schedule")
            if s.get("split") == split and isinstance(sc, dict) and sc.get("dropped"):
                print(f"warning: {p}: {trailing_warning(s['step'], sc)}", file=sys.stderr)
