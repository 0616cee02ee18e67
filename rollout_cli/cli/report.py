"""`rollout-cli report PATH... -o FILE`: flags -> `rollout_cli.report` -> one HTML file; a line
or JSON on stdout."""
from __future__ import annotations

import json
from typing import Annotated, List, Optional

import typer

from ..core.choices import PrimeRlSubset
from . import options as o
from .common import run_command
from .render import Progress

R = o.RULES

Out = Annotated[str, typer.Option(
    "-o", "--out", metavar="FILE", rich_help_panel=o.OUTPUT, show_default=False, help="The HTML file to write.")]
Overwrite = Annotated[bool, typer.Option("--overwrite", rich_help_panel=o.OUTPUT, help="Replace an existing page report wrote; any other file is never replaced.")]
Train = Annotated[Optional[List[str]], typer.Option(
    "--train", metavar="PATH", rich_help_panel=o.INPUTS, show_default=False,
    help="The trainer's dumps (as for audit): adds a trainer section with audit's mismatch "
         "and divergences; repeat for more.")]
Details = Annotated[int, typer.Option(
    "--details", metavar="N", rich_help_panel=o.VIEW,
    help="Rollouts whose samples (loss mask, text) the page embeds: those anomalies name first, "
         "then spread over the steps.")]


@o.rule_options
def report_cmd(
    paths: Annotated[List[str], typer.Argument(
        metavar="PATH...", show_default=False,
        help="Dump files or folders (searched recursively), or converted output folders "
             "(holding manifest.json).")],
    out: Out,
    train: Train = None,
    overwrite: Overwrite = False,
    details: Details = 100,  # report.DEFAULT_DETAILS (a test compares)
    max_anomalies: o.MaxAnomalies = 100,  # ReportOptions.max_anomalies (a test compares)
    rules: o.RuleOptions = o.RULES,  # the rule group (cli/options.rule_options)
    steps: o.Steps = R.steps,
    trust_pickle: o.TrustPickle = R.trust_pickle,
    max_line_bytes: o.MaxLineBytes = R.max_line_bytes,
    max_storage_bytes: o.MaxStorageBytes = R.max_storage_bytes,
    input_format: o.InputFormat = R.input_format,
    tokenizer: o.Tokenizer = R.tokenizer,
    prime_rl_subset: o.PrimeRlSubsetOpt = PrimeRlSubset(R.prime_rl_subset),
    as_json: o.Json = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress or summary.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Tracebacks for internal errors.")] = False,
) -> None:
    """Write one self-contained HTML page of a run's rollouts (no network needed to open it).

    With --train, a trainer section: audit's mismatch per step, the distribution of d, and in the drill-down each response token coloured by d, with the rollout's divergences.

    --json prints {path, bytes, counts}.
    """
    params = locals()  # named as the options' fields

    def work():
        from ..api.commands import report

        settings = o.settings_of(o.RuleOptions, rules, params)
        with Progress(quiet or as_json, start="reading", prefix="") as progress:
            return report(paths, out, train=train, overwrite=overwrite, details=details, max_anomalies=max_anomalies,
                          progress=progress, **settings)

    result = run_command(work, as_json, verbose).to_dict()
    if as_json:
        print(json.dumps(result))
        return
    if not quiet:
        parts = [f"{split}: {c['steps']} step(s), {c['samples']} samples, {c['rollouts']} rollouts, {c['anomalies']} anomalies"
                 for split, c in result["counts"].items()]
        if "trainer" in result:
            parts.append(f"trainer: {result['trainer']['paired_steps']} paired step(s), "
                         f"{result['trainer']['divergences']} divergence(s)")
        print(f"wrote {result['path']} ({result['bytes'] / 1e6:.1f} MB; {'; '.join(parts)})")
