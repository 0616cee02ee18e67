"""`rollout-cli derive OUT DEST --as sft|dpo|kto|rm`: the next run's training rows from a
converted output (`rollout_cli.derive`, docs/derive.md)."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from ..core.choices import DeriveKind, DerivePairs, DeriveSelect, Split
from . import options as o
from ..derivation.options import DeriveOptions
from .common import run_command

RULES = "Rules"
D = DeriveOptions()  # the defaults


def derive_cmd(
    out: Annotated[str, typer.Argument(
        metavar="OUT", show_default=False, help="A converted output (a folder or an object-store URI).")],
    dest: Annotated[str, typer.Argument(
        metavar="DEST", show_default=False,
        help="Folder to write: data/*.parquet, README.md (dataset card) and provenance.json.")],
    as_: Annotated[DeriveKind, typer.Option(
        "--as", metavar="KIND", show_default=False,
        help=o.per_value({DeriveKind.sft: "rows of the best (or every) candidate rollout",
                          DeriveKind.dpo: "preference pairs (chosen, rejected) per prompt group",
                          DeriveKind.kto: "prompt, completion and a label (reward >= --min-reward)",
                          DeriveKind.rm: "preference pairs, or with --pointwise a score per completion"}))],
    split: Annotated[Split, typer.Option(
        "--split", metavar="SPLIT", rich_help_panel=o.INPUTS, help=f"Which steps: {o.one_of(Split)}.")] = Split(D.split),
    steps: o.Steps = None,
    select: Annotated[DeriveSelect, typer.Option(
        "--select", metavar="WHICH", rich_help_panel=RULES,
        help="SFT: " + o.per_value({DeriveSelect.best: "each prompt group's best candidate",
                                    DeriveSelect.all: "every candidate"}))] = DeriveSelect(D.select),
    min_reward: Annotated[Optional[float], typer.Option(
        "--min-reward", metavar="X", rich_help_panel=RULES,
        help="SFT: keep rollouts with reward >= X; KTO (required): label = reward >= X.")] = D.min_reward,
    min_margin: Annotated[float, typer.Option(
        "--min-margin", metavar="X", rich_help_panel=RULES,
        help="Pairs: chosen reward - rejected reward must exceed X.")] = D.min_margin,
    pairs: Annotated[DerivePairs, typer.Option(
        "--pairs", metavar="WHICH", rich_help_panel=RULES,
        help="Pairs: " + o.per_value({DerivePairs.extremes: "highest against lowest of each group",
                                      DerivePairs.all: "every (higher, lower) pair of the group"}))] = DerivePairs(D.pairs),
    pointwise: Annotated[bool, typer.Option(
        "--pointwise", rich_help_panel=RULES, help="With --as rm: prompt, completion and score = reward.")] = D.pointwise,
    test_fraction: Annotated[float, typer.Option(
        "--test-fraction", metavar="F", rich_help_panel=RULES,
        help="Put about this fraction of prompt groups in a test split (by a stable hash of step and group).")] = D.test_fraction,
    dedupe: Annotated[bool, typer.Option(
        "--dedupe", rich_help_panel=RULES, help="Drop rollouts repeating an earlier response of their prompt group.")] = D.dedupe,
    max_rows_per_group: Annotated[Optional[int], typer.Option(
        "--max-rows-per-group", metavar="N", rich_help_panel=RULES,
        help="With --select all: at most the N best rollouts of each prompt group.")] = D.max_rows_per_group,
    tokenizer: o.Tokenizer = D.tokenizer,
    overwrite: o.OverwriteOwn = D.overwrite,
    wait: o.Wait = D.wait,
    as_json: o.Json = False,
    quiet: o.Quiet = False,
    verbose: o.Verbose = False,
) -> None:
    """Write SFT, DPO, KTO or reward-model rows derived from OUT's rollouts into DEST, a folder
    datasets.load_dataset(DEST) reads (staged, then renamed into place)."""

    def work():
        from ..api.commands import derive

        return derive(out, dest, as_=as_.value, split=split.value, steps=steps, select=select.value,
                      min_reward=min_reward, min_margin=min_margin, pairs=pairs.value, pointwise=pointwise,
                      test_fraction=test_fraction, dedupe=dedupe, max_rows_per_group=max_rows_per_group,
                      tokenizer=tokenizer, overwrite=overwrite, wait=wait)

    result = run_command(work, as_json, verbose).to_dict()
    if as_json:
        print(json.dumps(result))
        return
    if not quiet:
        for f in result["files"]:
            print(f"{dest}/{f['path']}: {f['rows']} rows, {f['bytes']} bytes")
        c = result["counts"]
        skipped = "; ".join(f"{n} {why}" for why, n in c["skipped"].items()) or "none"
        print(f"derived {sum(result['rows'].values())} {result['as']} rows from {c['candidates']} candidate "
              f"rollouts of {c['rollouts']} (skipped: {skipped}) in {result['elapsed_seconds']:.2f}s")
