"""`rollout-cli export OUT DEST --format slime-pt`: a converted output as dumps slime replays
(registered by app.py through `register(app)`)."""
from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Optional

import typer

from ..core.choices import Split


class ExportFormat(str, Enum):
    slime_pt = "slime-pt"


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        out: str = typer.Argument(..., help="A converted output folder (holding manifest.json).", show_default=False),
        dest: str = typer.Argument(..., help="Folder to write: DEST/{step}.pt and DEST/eval_{step}.pt.", show_default=False),
        fmt: ExportFormat = typer.Option(..., "--format", help="slime-pt: slime's rollout debug dump, for --load-debug-rollout-data."),
        steps: Optional[str] = typer.Option(None, "--steps", help="Select steps: A:B (inclusive), A:, :B or A."),
        split: Optional[Split] = typer.Option(None, "--split", help="Only train or only eval steps (default: both)."),
        overwrite: bool = typer.Option(False, "--overwrite", help="Replace a DEST that holds files (swapped in whole)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
        quiet: bool = typer.Option(False, "-q", "--quiet", help="No summary."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Notes on what an export cannot restore; tracebacks."),
    ) -> None:
        """Write OUT's steps as files another trainer replays (staged, then renamed)."""
        from .app import _run

        def work():
            from ..export.slime_pt import export_slime_pt

            return export_slime_pt(out, dest, steps=steps, split=split.value if split else None, overwrite=overwrite)

        result = _run(work, as_json, verbose)
        if as_json:
            print(json.dumps(result))
            return
        if verbose:
            for n in result["notes"]:
                print(f"note: {n}", file=sys.stderr)
        if not quiet:
            for f in result["files"]:
                print(f"{dest}/{f['path']}: {f['split']} step {f['step']}, {f['samples']} samples, {f['bytes']} bytes")
            print(f"exported {result['samples']} samples in {len(result['files'])} files in {result['seconds']:.2f}s")
