"""`rollout-cli report`: flags -> `report.build_report` -> one HTML file; a line or JSON on stdout."""
from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from ..core.choices import Estimator, Scope


def report_cmd(
    paths: List[str] = typer.Argument(..., help="Dump files or folders (searched recursively), or converted output folders (with manifest.json).", show_default=False),
    out: str = typer.Option(..., "-o", "--out", help="The HTML file to write.", show_default=False),
    details: int = typer.Option(100, "--details", help="Rollouts whose samples (loss mask, text) the page embeds: those anomalies name first, then spread over the steps."),
    rollout_id_scope: Scope = typer.Option(Scope.strict, "--rollout-id-scope", help="As convert (dumps): strict, step or group."),
    reward_key: Optional[str] = typer.Option(None, "--reward-key", help="As convert (dumps): pick this key from dict rewards."),
    n_samples_per_prompt: Optional[int] = typer.Option(None, "--n-samples-per-prompt", help="As convert (dumps): group size where group_index is missing; also the expected group size."),
    advantage_estimator: Estimator = typer.Option(Estimator.grpo, "--advantage-estimator", help="As convert (dumps)."),
    disable_rewards_normalization: bool = typer.Option(False, "--disable-rewards-normalization", help="As convert (dumps)."),
    disable_grpo_std_normalization: bool = typer.Option(False, "--disable-grpo-std-normalization", help="As convert (dumps)."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Select steps: A:B (inclusive), A:, :B or A."),
    trust_pickle: bool = typer.Option(False, "--trust-pickle", help="Allow .pt dumps that need full unpickling. Unpickling can run code: only for files you trust."),
    max_anomalies: int = typer.Option(100, "--max-anomalies", help="List at most N anomalies of each kind (the counts stay complete; 0: all)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing file."),
    as_json: bool = typer.Option(False, "--json", help="Print {path, bytes, counts} as JSON on stdout."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress or summary."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Tracebacks for internal errors."),
) -> None:
    """Write one self-contained HTML page of a run's rollouts (no network needed to open it)."""
    from .app import _run

    def work():
        from ..inspect import InspectOptions
        from ..report import ReportOptions, build_report

        iopts = InspectOptions(
            advantage_estimator=advantage_estimator.value,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_key=reward_key,
            rewards_normalization=not disable_rewards_normalization,
            grpo_std_normalization=not disable_grpo_std_normalization,
            rollout_id_scope=rollout_id_scope.value,
            steps=steps,
            trust_pickle=trust_pickle,
        )
        opts = ReportOptions(iopts, details=details, max_anomalies=max_anomalies or None)
        with _Progress(quiet or as_json) as progress:
            return build_report(paths, out, opts, overwrite=overwrite, progress=progress)

    result = _run(work, as_json, verbose)
    if as_json:
        print(json.dumps(result))
        return
    if not quiet:
        parts = [f"{split}: {c['steps']} step(s), {c['samples']} samples, {c['rollouts']} rollouts, {c['anomalies']} anomalies"
                 for split, c in result["counts"].items()]
        print(f"wrote {result['path']} ({result['bytes'] / 1e6:.1f} MB; {'; '.join(parts)})")


class _Progress:
    """A rich progress line on stderr when it is a terminal; no callback otherwise."""

    def __init__(self, silent: bool):
        self.silent = silent
        self.bar = None

    def __enter__(self):
        if self.silent or not sys.stderr.isatty():
            return None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            transient=True, console=Console(stderr=True))
        self.bar.start()
        task = self.bar.add_task("reading", total=None)

        def cb(what: str, done: int, total: int) -> None:
            self.bar.update(task, total=total or None, completed=done, description=what)

        return cb

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
