"""`rollout-cli export OUT DEST --format slime-pt`: a converted output as dumps slime replays."""
from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from ..core.choices import ExportFormat, Split
from . import options as o
from .common import run_command


def export_cmd(
    out: Annotated[str, typer.Argument(
        metavar="OUT", show_default=False, help="A converted output folder (holding manifest.json).")],
    dest: Annotated[str, typer.Argument(
        metavar="DEST", show_default=False, help="Folder to write: DEST/{step}.pt and DEST/eval_{step}.pt.")],
    fmt: Annotated[ExportFormat, typer.Option(
        "--format", metavar="FORMAT", show_default=False,
        help=f"{o.one_of(ExportFormat)}: slime's rollout debug dump, for --load-debug-rollout-data.")],
    steps: o.Steps = None,
    split: Annotated[Optional[Split], typer.Option(
        "--split", metavar="SPLIT", rich_help_panel=o.INPUTS,
        help=f"Only {o.one_of(Split)} steps (default: both).")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", rich_help_panel=o.OUTPUT, help="Replace a DEST an earlier export wrote (swapped in whole); any other folder is never replaced.")] = False,
    wait: o.Wait = None,
    as_json: o.Json = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No summary.")] = False,
    verbose: Annotated[bool, typer.Option(
        "-v", "--verbose", help="Notes on what an export cannot restore; tracebacks.")] = False,
) -> None:
    """Write OUT's steps as files slime replays (staged, then renamed into place)."""

    def work():
        from ..api.commands import export

        return export(out, dest, format=fmt, steps=steps, split=split, overwrite=overwrite, wait=wait)

    result = run_command(work, as_json, verbose).to_dict()
    if as_json:
        print(json.dumps(result))
        return
    if verbose:
        for n in result["notes"]:
            print(f"note: {n}", file=sys.stderr)
    if not quiet:
        for f in result["files"]:
            print(f"{dest}/{f['path']}: {f['split']} step {f['step']}, {f['samples']} samples, {f['bytes']} bytes")
        print(f"exported {result['samples']} samples in {len(result['files'])} files in {result['elapsed_seconds']:.2f}s")
