"""`rollout-cli verify OUT`: the CI gate (registered by cli.py through `register(app)`)."""
from __future__ import annotations

import json
import sys

import typer

from ..core.errors import ExitCode


def register(app: typer.Typer) -> None:
    @app.command()
    def verify(
        out: str = typer.Argument(..., help="A converted output folder (holding manifest.json).", show_default=False),
        quick: bool = typer.Option(False, "--quick", help="Sizes, footers and the manifest's arithmetic only: no checksums, no row checks."),
        as_json: bool = typer.Option(False, "--json", help="Print the result object as JSON on stdout."),
        quiet: bool = typer.Option(False, "-q", "--quiet", help="No summary on success."),
        verbose: bool = typer.Option(False, "-v", "--verbose", help="Also list notes and every checked file."),
    ) -> None:
        """Check OUT against its manifest: checksums, schema and invariants. Exit 4 on any failure."""
        from .app import _run
        from ..verify.check import failure_message, verify_output

        result = _run(lambda: verify_output(out, quick=quick), as_json, verbose)
        if as_json:
            print(json.dumps(result))
        if verbose and not as_json:
            for f in result["files"]:
                print(f"checked: {f}", file=sys.stderr)
        if verbose or result["failures"]:
            for n in result["notes"]:
                print(f"note: {n}", file=sys.stderr)
        failures = result["failures"]
        if failures:
            for f in failures:
                print(f"  {f['file']}: {f['invariant']}: {f['detail']}", file=sys.stderr)
            print(f"error: {failure_message(result)}", file=sys.stderr)
            raise typer.Exit(int(ExitCode.INTEGRITY))
        if not (quiet or as_json):
            c = result["checked"]
            how = ("sizes, footers, schema and the manifest's counts (--quick)" if quick
                   else f"checksums of {c['bytes']} bytes, schema and every invariant")
            print(f"{out}: ok: {c['shards']} shards in {c['steps']} train + {c['eval_steps']} eval steps, "
                  f"{c['rows']} rows, {c['files']} files; checked {how}")
