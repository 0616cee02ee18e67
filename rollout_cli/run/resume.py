"""`--resume` on a complete output whose inputs are all unchanged: nothing to do.

Such a resume would convert nothing and commit a manifest equal to the one in place (but for
its `volatile` time stamps), so it commits nothing at all: no staging area is opened, the
manifest and shards are not rewritten (their bytes and modification times stay), and the run
exits 0. Any new, changed or removed input, or a manifest of another tool version, makes it an
ordinary resume.
"""
from __future__ import annotations

from ..core.versions import __version__
from ..core import layout, storage
from ..inputs.units import Unit
from ..output import manifest as manifest_mod
from ..output.commit import RUN, check_resume


def has_staging(out: str) -> bool:
    """Whether OUT holds a staging area (an interrupted run, or a commit to finish)."""
    if storage.is_uri(out):
        return storage.exists(storage.join(out, f"{layout.STAGING}/{RUN}"))
    return storage.exists(storage.join(out, layout.STAGING))


def up_to_date(out: str, units: list[Unit], options: dict, fingerprints: dict[str, dict]) -> dict | None:
    """The manifest of OUT when it is complete and what this resume would commit again: made
    with `options` (else UsageError, before anything is written), every input it converted
    given again with the same bytes, no other given, and of this version; else None. Fills
    `fingerprints` (input path -> fingerprint) with the inputs it hashes, for the resume that
    follows when it is not."""
    if has_staging(out) or not layout.is_output(out):
        return None
    check_resume(out, options)
    from ..output.model import open_output  # pyarrow: not at the converting process's start-up

    model = open_output(out)
    if model.pending:  # steps left out while their inputs were being written: convert them now
        return None
    prev = model.manifest
    return prev if prev.get("tool_version") == __version__ and _same_inputs(prev, units, fingerprints) else None


def _same_inputs(prev: dict, units: list[Unit], fingerprints: dict[str, dict]) -> bool:
    recorded = {i["path"]: i for i in prev.get("inputs", [])}
    missing = {s["input"] for s in prev.get("steps", []) if s.get("input_missing")}
    given = set()
    for u in units:
        d = u.input.display
        if u.input.path == "-" or d not in recorded or d in missing or recorded[d].get("format") != u.input.format:
            return False
        was = manifest_mod.recorded_fingerprint(prev, d)
        fingerprints[u.input.path] = fp = manifest_mod.file_fingerprint(u.input.path, manifest_mod.fingerprint_algorithm(was))
        if not manifest_mod.same_content(was, fp):
            return False
        given.add(d)
    return set(recorded) - given <= missing


def summary_of(out: str, prev: dict, skipped: list[str], notes: list[str], seconds: float) -> dict:
    """convert's result for an output left as it was."""
    keys = ("split", "step", "input", "samples", "rows", "rejected", "rollouts", "tokens", "imbalance", "dropped")
    return {
        "out": out,
        "counts": prev["counts"],
        "steps": [{k: s[k] for k in keys if k in s} for s in prev["steps"]],
        "rejects": prev.get("rejects"),
        "skipped": skipped,
        "notes": notes + [f"{out}: up to date (no input new or changed since it was converted); nothing written"],
        "warnings": [],
        "anomalies": prev.get("anomalies", []),
        "seconds": round(seconds, 3),
    }
