"""`--resume`: which steps need no work, and what a run records so that a later one can tell.

A step is reused when an interrupted run finished it (its record under the staging area's
done/ and its staged files) or when the last committed run converted the same input bytes
(its files are hard-linked, or copied, into the staging tree; on an object store they stay in
the generation that wrote them). A step whose input is no longer given is kept.

`--resume` on a complete output whose inputs are all unchanged: nothing to do.

Such a resume would convert nothing and commit a manifest equal to the one in place (but for
its `volatile` time stamps), so it commits nothing at all: no staging area is opened, the
manifest and shards are not rewritten (their bytes and modification times stay), and the run
exits 0. Any new, changed or removed input, or a manifest of another tool version, makes it an
ordinary resume.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import shutil

import orjson

from ..core.versions import __version__
from ..core import layout, storage
from ..core.options import ConvertOptions
from ..inputs.discover import InputFile
from ..inputs.units import Unit
from ..output import manifest as manifest_mod
from ..output.commit import RUN, check_resume
from ..output.commit import staged_path as _staged
from .tasks import UnitResult


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
        "elapsed_seconds": round(seconds, 3),
    }


prev_fp = manifest_mod.recorded_fingerprint  # the name convert and the tests use


def _result_to_dict(r: UnitResult) -> dict:
    return dataclasses.asdict(r)


def _result_from_dict(d: dict) -> UnitResult:
    d = dict(d)
    d["input"] = InputFile(**d["input"])
    return UnitResult(**d)


_same_content = manifest_mod.same_content


def _unit_files(res: UnitResult) -> list[str]:
    files = []
    for sh in res.shards:
        files.append(sh["path"])
        if "mmap" in sh:
            files.append(sh["mmap"]["path"])
    return files


_LINK_REFUSED = {errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EACCES, errno.ENOSYS}


def _link_into_staging(out: str, staging_root: str, rels: list[str]) -> bool:
    """Hard-link committed files into the staging tree (their bytes and inodes stay untouched),
    or copy them where the file system has no hard links (some network and overlay ones). On
    an object store the files stay where they are: the new manifest names them in the
    generation that wrote them (a file of the old top-level layout is converted again)."""
    if storage.is_uri(out):
        return all(layout.split_generation(rel)[0] is not None and storage.is_file(storage.join(out, rel)) for rel in rels)
    for rel in rels:
        src = os.path.join(out, rel)
        if not os.path.exists(src):
            return False
    for rel in rels:
        dst = _staged(staging_root, rel)
        if os.path.exists(dst):
            os.remove(dst)
        try:
            os.link(os.path.join(out, rel), dst)
        except OSError as e:
            if e.errno not in _LINK_REFUSED:
                raise
            shutil.copyfile(os.path.join(out, rel), dst)  # a copy of committed bytes, synced like any staged file
            with open(dst, "rb+") as f:
                os.fsync(f.fileno())
    return True


def _previous_results(out: str, prev: dict) -> dict[str, UnitResult]:
    """The committed output's steps as UnitResults, keyed by input path."""
    rejects_by: dict[tuple, list] = {}
    rj = prev.get("rejects")
    if rj:
        for line in storage.read_bytes(storage.join(out, rj["path"])).splitlines():
            if line.strip():
                r = orjson.loads(line)
                rejects_by.setdefault((r.get("split"), r.get("step")), []).append(r)
    inputs = {i["path"]: i for i in prev.get("inputs", [])}
    found = {}
    for st in prev.get("steps", []):
        key = (st["split"], st["step"])
        i = inputs.get(st["input"], {})
        inp = InputFile(st["input"], st["input"], i.get("format", "jsonl"), st["step"], st["split"], "manifest")
        found[st["input"]] = UnitResult(
            split=st["split"], step=st["step"], input=inp, samples=st["samples"], rows=st["rows"], rejected=st["rejected"],
            rollouts=st["rollouts"], tokens=st["tokens"], shards=st["shards"], tokens_per_shard=st["tokens_per_shard"],
            imbalance=st["imbalance"], rejects=rejects_by.get(key, []),
            anomalies=[a for a in prev.get("anomalies", []) if (a.get("split"), a.get("step")) == key], warnings=[],
            denominators={k: v for k, v in st.items() if k.startswith("step_")},  # step_mask_sum, ...
            schedule=st.get("schedule"),
            not_token_exact=st.get("not_token_exact", 0),
        )
    return found


def plan(out: str, units: list[Unit], opts: ConvertOptions, staging_root: str, prev: dict | None,
                 fingerprints: dict[str, dict], notes: list[str]) -> tuple[dict[int, UnitResult], list[UnitResult]]:
    """Which units need no work: finished by an interrupted run, or unchanged since the last one.
    Returns (reused per unit index, kept steps whose input is gone)."""
    done_dir = storage.join(staging_root, "done")
    staged_done: dict[str, dict] = {}
    names = sorted(storage.files_under(done_dir)) if storage.is_uri(done_dir) else (
        sorted(os.listdir(done_dir)) if os.path.isdir(done_dir) else [])
    for name in names:
        rec = orjson.loads(storage.read_bytes(storage.join(done_dir, name)))
        staged_done[rec["result"]["input"]["display"]] = rec
    committed = _previous_results(out, prev) if prev else {}
    prev_inputs = {i["path"]: prev_fp(prev, i["path"]) for i in (prev or {}).get("inputs", [])}
    reused: dict[int, UnitResult] = {}
    for k, unit in enumerate(units):
        d = unit.input.display
        fp = fingerprints.get(unit.input.path)
        rec = staged_done.get(d)
        if rec and _same_content(rec["fingerprint"], fp):
            res = _result_from_dict(rec["result"])
            if all(storage.exists(storage.join(staging_root, rel)) for rel in _unit_files(res)):
                reused[k] = res
                continue
        if d in committed and _same_content(prev_inputs.get(d), fp):
            res = committed[d]
            res.input = unit.input
            if _link_into_staging(out, staging_root, _unit_files(res)):
                reused[k] = res
    current = {u.input.display for u in units}
    kept = []
    for d, res in committed.items():
        if d not in current and _link_into_staging(out, staging_root, _unit_files(res)):
            res.warnings = [f"{d}: input no longer given; step {res.step} ({res.split}) kept from the previous run"]
            res.input.step_from = "missing"
            kept.append(res)
    return reused, kept


def _done_rel(res: UnitResult) -> str:
    return f"done/{res.split}-{res.step:012d}.json"


def record_done(staging_root: str, res: UnitResult, fingerprint: dict | None) -> None:
    path = _staged(staging_root, _done_rel(res))
    storage.write_durable(path, orjson.dumps({"fingerprint": fingerprint, "result": _result_to_dict(res)}))


def drop_staged(staging_root: str, res: UnitResult) -> None:
    """Forget a step left out at the commit (its input changed while it was read): its record
    for --resume, and locally its staged files (on an object store, the commit removes what
    its manifest does not list)."""
    done = storage.join(staging_root, _done_rel(res))
    if storage.exists(done):
        storage.delete_file(done)
    if not storage.is_uri(staging_root):
        for rel in _unit_files(res):
            path = os.path.join(staging_root, rel)
            if os.path.lexists(path):
                os.remove(path)
            folder = os.path.dirname(path)
            while folder != staging_root and os.path.isdir(folder) and not os.listdir(folder):
                os.rmdir(folder)  # its step's folder, then data/ or mmap/ when nothing else is in them
                folder = os.path.dirname(folder)
