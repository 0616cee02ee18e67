"""`rollout-cli audit ROLLOUT_INPUT... --train TRAIN_INPUT`: flags -> `rollout_cli.audit` ->
the mismatch table and the divergences, or one JSON object. Exit 4 when something diverges."""
from __future__ import annotations

import json
import sys
from typing import Annotated, List, Optional

import typer

from ..core.choices import PrimeRlSubset
from ..core.errors import ExitCode
from . import options as o
from .common import run_command
from .gating import apply, exit_if_failed, plan, print_lines
from .render import print_audit

R = o.RULES

Train = Annotated[List[str], typer.Option(
    "--train", metavar="PATH", rich_help_panel=o.INPUTS, show_default=False,
    help="The trainer's dumps (slime's --save-debug-train-data .pt files, or their folder); "
         "repeat for more.")]
Strict = Annotated[bool, typer.Option(
    "--strict", rich_help_panel=o.VIEW,
    help="Exit 4 when the trainer ran another reward or rollout-id rule than the expected one, "
         "as for a divergence (without it, a named rule difference is reported and exits 0).")]
MaxDivergences = Annotated[Optional[int], typer.Option(
    "--max-divergences", metavar="N", rich_help_panel=o.VIEW,
    help="List at most N divergences per step (the counts stay complete; 0: all).")]


@o.rule_options
def audit_cmd(
    paths: Annotated[List[str], typer.Argument(
        metavar="ROLLOUT_INPUT...", show_default=False,
        help="Rollout dump files or folders (searched recursively), as for convert.")],
    train: Train,
    max_divergences: MaxDivergences = 100,  # audit.options.DEFAULT_MAX_DIVERGENCES (a test compares)
    rules: o.RuleOptions = o.RULES,  # the rule group (cli/options.rule_options)
    steps: o.Steps = R.steps,
    trust_pickle: o.TrustPickle = R.trust_pickle,
    max_line_bytes: o.MaxLineBytes = R.max_line_bytes,
    max_storage_bytes: o.MaxStorageBytes = R.max_storage_bytes,
    input_format: o.InputFormat = R.input_format,
    tokenizer: o.Tokenizer = R.tokenizer,
    prime_rl_subset: o.PrimeRlSubsetOpt = PrimeRlSubset(R.prime_rl_subset),
    fail_on: o.FailOn = None,
    checks: o.ChecksFile = None,
    junit_xml: o.JunitXml = None,
    as_json: o.Json = False,
    strict: Strict = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No notes on stderr.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="List every kept divergence; tracebacks for internal errors.")] = False,
) -> None:
    """Compare rollout dumps with what the trainer computed from them, step by step.

    Steps pair by number, samples by their position in the rollout dump. The expected values are those convert writes with the same options; the mismatch figures compare the trainer's log-probs with the rollout's over the tokens it trained on.

    Each step's reward and rollout-id rules are named: a trainer that ran another known rule (slime's positional reward rows, an older slime id rule) is reported first, with what it cost, and is not a divergence.

    Exit 0 when nothing diverges (rule differences included, unless --strict), 4 when something does, 3 on invalid input, 7 when nothing diverges but a --fail-on or --checks gate fails (docs/ci.md). --json prints {summary, rules, steps, divergences}, as docs/audit.md describes.
    """
    params = locals()  # named as the options' fields
    gates = plan("audit", fail_on, checks, junit_xml, as_json, verbose)

    def work():
        from ..api.commands import audit
        from ..auditing import AuditOptions

        settings = o.settings_of(AuditOptions, rules, params, "max_divergences")
        return audit(paths, train, max_divergences=max_divergences, **settings)

    answer = run_command(work, as_json, verbose)
    answer, gated = apply(gates, answer, fail_on, checks, junit_xml, as_json, verbose)
    result = answer.to_dict()
    if as_json:
        print(json.dumps(result))
    else:
        print_audit(result, verbose)
        print_lines(gated)
        if not quiet:
            for n in result["summary"]["notes"]:
                print(f"note: {n}", file=sys.stderr)
    if result["summary"]["divergences"] or (strict and result["rules"]):
        raise typer.Exit(int(ExitCode.INTEGRITY))
    exit_if_failed(gated)
