"""`rollout-cli convert INPUT... OUT`: flags -> `rollout_cli.convert` -> summary table or JSON."""
from __future__ import annotations

import json
import sys
from typing import Annotated, List, Optional

import typer

from ..core.choices import Compression, Engine, OnError, PrimeRlSubset, Schedule
from ..core.options import ConvertOptions
from . import options as o
from .common import run_command
from .render import Progress, print_convert_summary

D = ConvertOptions()  # every default, from the library

OnErrorOpt = Annotated[OnError, typer.Option(
    "--on-error", metavar="MODE", rich_help_panel=o.VALIDATION,
    help=o.per_value({OnError.fail: "exit 3 on invalid samples, nothing written",
                      OnError.skip: "reject their rollouts into OUT/rejects.jsonl and go on"}))]
MaxErrors = Annotated[Optional[int], typer.Option(
    "--max-errors", metavar="N", rich_help_panel=o.VALIDATION,
    help="fail: report up to N problems (default 20); skip: stop once more than N samples are "
         "rejected (default: no limit).")]

Shards = Annotated[int, typer.Option(
    "--shards", metavar="N", rich_help_panel=o.OUTPUT,
    help="Shard files per step (one per data-parallel rank), balanced by tokens; a rollout is "
         "never split.")]
KeepGroups = Annotated[bool, typer.Option(
    "--keep-groups", rich_help_panel=o.OUTPUT, help="Never split a prompt group across shards.")]
CompressionOpt = Annotated[Compression, typer.Option(
    "--compression", metavar="CODEC", rich_help_panel=o.OUTPUT,
    help=f"Parquet codec: {o.one_of(Compression)} (zstd at level {D.compression_level}).")]
RowGroupBytes = Annotated[int, typer.Option(
    "--row-group-bytes", metavar="BYTES", rich_help_panel=o.OUTPUT,
    help="Upper bound of a row group's uncompressed size.")]
Mmap = Annotated[bool, typer.Option(
    "--mmap/--no-mmap", rich_help_panel=o.OUTPUT,
    help="Also write an uncompressed Arrow IPC copy of each shard under OUT/mmap/ (zero-copy loading).")]
KeepText = Annotated[bool, typer.Option(
    "--keep-text", rich_help_panel=o.OUTPUT, help="Keep prompt, response and label as text columns.")]
Overwrite = Annotated[bool, typer.Option(
    "--overwrite", rich_help_panel=o.OUTPUT,
    help="Replace an existing output (only a rollout-cli output, and only its own entries); the old one "
         "stays whole until the new one is complete.")]
Resume = Annotated[bool, typer.Option(
    "--resume", rich_help_panel=o.OUTPUT,
    help="Finish an interrupted run, or bring a complete OUT up to date: only new or changed "
         "inputs are converted.")]
SkipIncomplete = Annotated[bool, typer.Option(
    "--skip-incomplete", rich_help_panel=o.OUTPUT,
    help="Leave out a step whose input is still being written (it ends inside a line or changes "
         "while read) and record it as pending, instead of exit 3; --resume converts it later.")]

Workers = Annotated[Optional[int], typer.Option(
    "--workers", metavar="N", rich_help_panel=o.EXECUTION, help="Worker processes (default: all cores).")]
EngineOpt = Annotated[Engine, typer.Option(
    "--engine", metavar="NAME", rich_help_panel=o.EXECUTION,
    help=o.per_value({Engine.local: "this machine",
                      Engine.ray: "a Ray cluster (pip install 'rollout-cli\\[ray]')"}))]
RayAddress = Annotated[Optional[str], typer.Option(
    "--ray-address", metavar="ADDR", rich_help_panel=o.EXECUTION,
    help="Ray cluster address, HOST:PORT (default: start or join a local Ray).")]

SCHEDULE = "Schedule"  # --schedule slime's settings, with slime's flag names
PIPELINE = "Schedule with --vpp-size > 1"  # a 36-character name: see cli/helpfmt.py
ScheduleOpt = Annotated[Schedule, typer.Option(
    "--schedule", metavar="NAME", rich_help_panel=SCHEDULE,
    help=o.per_value({Schedule.balanced: "whole rollouts spread over shards by tokens",
                      Schedule.slime: "shard r is what slime's trainer rank r gets (--shards is the dp size)"}))]
GlobalBatchSize = Annotated[Optional[int], typer.Option(
    "--global-batch-size", metavar="N", rich_help_panel=SCHEDULE, help="Rollouts per optimizer step.")]
NumStepsPerRollout = Annotated[Optional[int], typer.Option(
    "--num-steps-per-rollout", metavar="K", rich_help_panel=SCHEDULE,
    help="Or: global batch size = rollout batch size x n // K.")]
MicroBatchSize = Annotated[int, typer.Option(
    "--micro-batch-size", metavar="N", rich_help_panel=SCHEDULE, help="Samples per micro-batch (static batching).")]
UseDynamicBatchSize = Annotated[bool, typer.Option(
    "--use-dynamic-batch-size", rich_help_panel=SCHEDULE, help="Pack micro-batches first-fit by tokens.")]
MaxTokensPerGpu = Annotated[Optional[int], typer.Option(
    "--max-tokens-per-gpu", metavar="N", rich_help_panel=SCHEDULE, help="Token cap per micro-batch (x --cp-size).")]
BalanceData = Annotated[bool, typer.Option(
    "--balance-data", rich_help_panel=SCHEDULE, help="Spread micro-batches over ranks by Karmarkar-Karp (tokens).")]
CpSize = Annotated[int, typer.Option(
    "--cp-size", metavar="N", rich_help_panel=SCHEDULE, help="Context-parallel size.")]
VppSize = Annotated[int, typer.Option(
    "--vpp-size", metavar="N", rich_help_panel=SCHEDULE, help="Virtual pipeline stages.")]
MicrobatchGroupSize = Annotated[Optional[int], typer.Option(
    "--microbatch-group-size-per-vp-stage", metavar="N", rich_help_panel=PIPELINE,
    help="vpp > 1: align to dp x N.")]
KeepTrailing = Annotated[bool, typer.Option(
    "--keep-trailing", rich_help_panel=SCHEDULE, help="Train the rollouts slime drops as a short last step.")]


@o.rule_options
def convert(
    inputs: Annotated[List[str], typer.Argument(
        metavar="INPUT...", show_default=False,
        help="Dump files or folders (searched recursively; local paths or s3://, gs:// URIs), "
             "or - for JSONL on stdin.")],
    out: Annotated[str, typer.Argument(
        metavar="OUT", show_default=False, help="Output folder (a local path or an s3://, gs:// URI).")],
    rules: o.RuleOptions = o.RULES,  # the rule group (cli/options.rule_options)
    steps: o.Steps = D.steps,
    step: o.Step = D.step,
    trust_pickle: o.TrustPickle = D.trust_pickle,
    max_line_bytes: o.MaxLineBytes = D.max_line_bytes,
    max_storage_bytes: o.MaxStorageBytes = D.max_storage_bytes,
    input_format: o.InputFormat = D.input_format,
    tokenizer: o.Tokenizer = D.tokenizer,
    prime_rl_subset: o.PrimeRlSubsetOpt = PrimeRlSubset(D.prime_rl_subset),
    on_error: OnErrorOpt = OnError(D.on_error),
    max_errors: MaxErrors = D.max_errors,
    shards: Shards = D.shards,
    keep_groups: KeepGroups = D.keep_groups,
    compression: CompressionOpt = Compression(D.compression),
    row_group_bytes: RowGroupBytes = D.row_group_bytes,
    mmap: Mmap = D.mmap,
    keep_text: KeepText = D.keep_text,
    overwrite: Overwrite = D.overwrite,
    resume: Resume = D.resume,
    skip_incomplete: SkipIncomplete = D.skip_incomplete,
    wait: o.Wait = D.wait,
    workers: Workers = D.workers,
    engine: EngineOpt = Engine(D.engine),
    ray_address: RayAddress = D.ray_address,
    schedule: ScheduleOpt = Schedule(D.schedule),
    global_batch_size: GlobalBatchSize = D.global_batch_size,
    num_steps_per_rollout: NumStepsPerRollout = D.num_steps_per_rollout,
    micro_batch_size: MicroBatchSize = D.micro_batch_size,
    use_dynamic_batch_size: UseDynamicBatchSize = D.use_dynamic_batch_size,
    max_tokens_per_gpu: MaxTokensPerGpu = D.max_tokens_per_gpu,
    balance_data: BalanceData = D.balance_data,
    cp_size: CpSize = D.cp_size,
    vpp_size: VppSize = D.vpp_size,
    microbatch_group_size_per_vp_stage: MicrobatchGroupSize = D.microbatch_group_size_per_vp_stage,
    keep_trailing: KeepTrailing = D.keep_trailing,
    as_json: o.Json = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No progress or summary.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="List skipped files and notes; tracebacks for internal errors.")] = False,
) -> None:
    """Convert rollout dumps into sharded train-data Parquet plus a manifest."""
    opts = o.options_of(ConvertOptions, rules, locals())  # parameters are named as its fields

    def work():
        from ..api.commands import convert as run_convert

        with Progress(quiet or as_json) as progress:
            return run_convert(inputs, out, opts, progress=progress)

    result = run_command(work, as_json, verbose).to_dict()
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
        print_convert_summary(result)
