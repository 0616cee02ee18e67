"""Typer commands: flags -> library call -> rich table or JSON; errors -> exit codes.

Heavy modules (pyarrow, numpy, torch) are imported inside the commands so that
`rollout-cli --help` stays fast and never imports torch.
"""
from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from ..core.choices import Compression, Estimator, OnError, Scope
from ..core.errors import ExitCode, RolloutCliError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Convert RL rollout sample dumps (slime .pt, JSONL, Parquet) into sharded train-data Parquet.\n\n"
    "Exit codes: 0 ok, 1 internal error, 2 usage, 3 invalid input, 4 integrity, 5 output exists, 6 output not writable.",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from ..core.versions import __version__

        print(f"rollout-cli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Convert RL rollout sample dumps (slime .pt, JSONL, Parquet) into sharded train-data Parquet."""


def _err_console():
    from rich.console import Console

    return Console(stderr=True)


def _fail(e: RolloutCliError, as_json: bool, verbose: bool = False) -> None:
    con = _err_console()
    con.print(f"[bold red]error[/]: {e}", highlight=False, markup=True, soft_wrap=True) if con.is_terminal else print(f"error: {e}", file=sys.stderr)
    problems = getattr(e, "problems", None) or []
    for p in problems[1:] if len(problems) > 1 else []:
        print(f"  {p}", file=sys.stderr)
    if as_json:
        print(json.dumps(e.to_dict()))
    raise typer.Exit(int(e.exit_code))


def _run(fn, as_json: bool, verbose: bool):
    try:
        return fn()
    except RolloutCliError as e:
        _fail(e, as_json, verbose)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise typer.Exit(130)
    except typer.Exit:
        raise
    except Exception as e:  # an unexpected failure is ours: say so, exit 1
        if verbose:
            import traceback

            traceback.print_exc()
        print(f"internal error: {type(e).__name__}: {e} (rerun with -v for the traceback)", file=sys.stderr)
        if as_json:
            print(json.dumps({"error": "InternalError", "message": f"{type(e).__name__}: {e}", "exit_code": 1}))
        raise typer.Exit(int(ExitCode.INTERNAL))


@app.command()
def convert(
    inputs: List[str] = typer.Argument(..., help="Dump files or folders (searched recursively; local paths or s3://, gs:// URIs), or - for stdin JSONL.", show_default=False),
    out: str = typer.Argument(..., help="Output folder (a local path or an s3://, gs:// URI).", show_default=False),
    advantage_estimator: Estimator = typer.Option(Estimator.grpo, "--advantage-estimator", help="As slime's flag: decides mean-centring and std-scaling."),
    n_samples_per_prompt: Optional[int] = typer.Option(None, "--n-samples-per-prompt", help="Group size; needed only where group_index is missing (consecutive chunks), and by --slime-compat (default there: 1)."),
    reward_key: Optional[str] = typer.Option(None, "--reward-key", help="Pick this key from dict rewards."),
    disable_rewards_normalization: bool = typer.Option(False, "--disable-rewards-normalization", help="Keep rewards as they are."),
    disable_grpo_std_normalization: bool = typer.Option(False, "--disable-grpo-std-normalization", help="Mean-centre only."),
    slime_compat: bool = typer.Option(False, "--slime-compat", help="Reproduce slime's position-based reward normalisation exactly (needs torch)."),
    rollout_batch_size: Optional[int] = typer.Option(None, "--rollout-batch-size", help="Prompts per step; used by --slime-compat."),
    rollout_id_scope: Scope = typer.Option(Scope.strict, "--rollout-id-scope", help="strict: an explicit id in two prompt groups is an error; step: merge as slime; group: ids unique per group."),
    on_error: OnError = typer.Option(OnError.fail, "--on-error", help="fail: exit 3 on invalid samples; skip: reject their rollouts into OUT/rejects.jsonl."),
    max_errors: Optional[int] = typer.Option(None, "--max-errors", help="fail: report up to N problems (default 20); skip: stop once more than N samples are rejected (default: no limit)."),
    shards: int = typer.Option(1, "--shards", help="Shard files per step (one per data-parallel rank), balanced by tokens."),
    keep_groups: bool = typer.Option(False, "--keep-groups", help="Never split a prompt group across shards."),
    compression: Compression = typer.Option(Compression.zstd, "--compression", help="Parquet codec (zstd at level 1)."),
    row_group_bytes: int = typer.Option(64 << 20, "--row-group-bytes", help="Upper bound of a row group's uncompressed size."),
    mmap: bool = typer.Option(True, "--mmap/--no-mmap", help="Also write an uncompressed Arrow IPC copy per shard under OUT/mmap/ for zero-copy loading."),
    keep_text: bool = typer.Option(False, "--keep-text", help="Keep prompt, response and label as text columns."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Select steps: A:B (inclusive), A:, :B or A."),
    step: Optional[int] = typer.Option(None, "--step", help="Step number of a single input (required for stdin)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Worker processes (default: all cores)."),
    engine: str = typer.Option("local", "--engine", help="local (this machine) or ray (a Ray cluster; pip install 'rollout-cli[ray]')."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address (default: start or join a local Ray)."),
    trust_pickle: bool = typer.Option(False, "--trust-pickle", help="Allow .pt dumps that need full unpickling. Unpickling can run code: only for files you trust."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output (the old one stays whole until the new one is complete)."),
    resume: bool = typer.Option(False, "--resume", help="Finish an interrupted run in OUT."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No progress or summary."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="List skipped files and notes; tracebacks for internal errors."),
) -> None:
    """Convert rollout dumps into sharded train-data Parquet plus a manifest."""

    def work():
        from ..run.convert import ConvertOptions, convert as run_convert

        opts = ConvertOptions(
            advantage_estimator=advantage_estimator.value,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_key=reward_key,
            rewards_normalization=not disable_rewards_normalization,
            grpo_std_normalization=not disable_grpo_std_normalization,
            slime_compat=slime_compat,
            rollout_batch_size=rollout_batch_size,
            rollout_id_scope=rollout_id_scope.value,
            on_error=on_error.value,
            max_errors=max_errors,
            shards=shards,
            keep_groups=keep_groups,
            compression=compression.value,
            row_group_bytes=row_group_bytes,
            mmap=mmap,
            keep_text=keep_text,
            steps=steps,
            step=step,
            trust_pickle=trust_pickle,
            workers=workers,
            engine=engine,
            ray_address=ray_address,
            overwrite=overwrite,
            resume=resume,
        )
        if opts.engine == "local" and opts.worker_count() > 1:
            from ..run.preload import start_pool_early

            start_pool_early()  # a no-op when the executable already started it
        with _progress(quiet or as_json) as progress:
            return run_convert(inputs, out, opts, progress=progress)

    result = _run(work, as_json, verbose)
    if as_json:
        print(json.dumps(result))
        return
    if verbose:
        for s in result["skipped"]:
            print(f"skipped (not an input): {s}", file=sys.stderr)
        for s in result["notes"]:
            print(f"note: {s}", file=sys.stderr)
    for w in result["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if not quiet:
        _print_convert_summary(result)


class _progress:
    """rich progress on stderr when it is a terminal; a no-op callback otherwise."""

    def __init__(self, silent: bool):
        self.silent = silent
        self.bar = None

    def __enter__(self):
        if self.silent or not sys.stderr.isatty():
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True,
                            console=_err_console())
        self.bar.start()
        self.task = self.bar.add_task("converting", total=None)

        def cb(what: str, done: int, total: int) -> None:
            self.bar.update(self.task, total=total, completed=done, description=f"steps {what}")

        return cb

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def _print_convert_summary(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console()
    c = result["counts"]
    t = Table(title=f"{result['out']}: {c['rows']} rows from {c['input_samples']} samples, {c['rejected']} rejected", title_justify="left")
    for col in ("split", "step", "samples", "rows", "rejected", "rollouts", "tokens", "shard max/mean"):
        t.add_column(col, justify="right" if col not in ("split",) else "left")
    for s in result["steps"]:
        t.add_row(s["split"], str(s["step"]), str(s["samples"]), str(s["rows"]), str(s["rejected"]), str(s["rollouts"]), str(s["tokens"]),
                  f"{s['imbalance']:.3f}")
    con.print(t)
    if result["rejects"]:
        con.print(f"rejected samples and reasons: {result['out']}/rejects.jsonl")
    con.print(f"done in {result['seconds']:.2f}s")


def _register_optional_commands() -> None:
    # inspect and verify live in their own modules; each exposes `register(app)`
    import importlib

    for name in ("inspect", "verify"):
        try:
            mod = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__package__}.{name}":
                raise
            continue
        mod.register(app)


_register_optional_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
