"""`rollout-cli verify OUT`: the CI gate. Exit 4 names each broken file and invariant."""
from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..core.errors import ExitCode
from . import options as o
from .common import run_command


def verify(
    out: Annotated[str, typer.Argument(
        metavar="OUT", show_default=False, help="A converted output folder (holding manifest.json).")],
    quick: Annotated[bool, typer.Option(
        "--quick", help="Sizes, footers and the manifest's arithmetic only: no checksums, no row checks.")] = False,
    as_json: o.Json = False,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="No summary on success.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Also list notes and every checked file.")] = False,
) -> None:
    """Check OUT against its manifest: checksums, schema and invariants. Exit 4 on any failure."""
    from ..api.commands import verify as run_verify
    from ..output import manifest as manifest_mod
    from ..verification.check import failure_message

    result = run_command(lambda: run_verify(out, quick=quick), as_json, verbose).to_dict()
    if as_json:
        print(json.dumps(result))
    if verbose and not as_json:
        for f in result["files"]:
            print(f"checked: {f}", file=sys.stderr)
    pending = {manifest_mod.pending_message(p) for p in result.get("pending") or []}
    if verbose or result["failures"] or pending:
        for n in result["notes"]:
            if not (verbose or result["failures"]) and n not in pending:
                continue  # a pending step is always said: the output lacks it
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
