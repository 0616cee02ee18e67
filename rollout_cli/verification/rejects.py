"""rejects.jsonl against the manifest: present when samples were rejected (and only then), its
line count, checksum, and rejects per step."""
from __future__ import annotations

import io
import json
import os

from ..core import hashing, layout, storage
from ..core.hashing import digest_of
from ..core.errors import IntegrityError
from ..core.layout import MANIFEST, REJECTS
from ..output.files import open_regular
from .common import Report, full_path


def check_rejects(out: str, m: dict, rep: Report) -> None:
    rj = m.get("rejects")
    name = layout.in_generation(m.get("generation"), REJECTS)
    path = full_path(out, name)
    counts = m["counts"]
    if rj is None:
        if counts["rejected"]:
            rep.fail(MANIFEST, "rejects", f"counts.rejected is {counts['rejected']} but the manifest lists no rejects.jsonl")
        for n in dict.fromkeys((REJECTS, name)):
            if storage.exists(full_path(out, n)) if storage.is_uri(out) else os.path.lexists(full_path(out, n)):
                rep.fail(n, "unexpected_file", "present, but the manifest records no rejected samples")
        return
    rep.files.append(name)
    if rj["count"] != counts["rejected"]:
        rep.fail(name, "rejects", f"rejects.count {rj['count']} != counts.rejected {counts['rejected']}")
    if not storage.is_file(path):
        rep.fail(name, "file_present", "listed in the manifest but missing")
        return
    algorithm, want = digest_of(rj)
    h = hashing.new(algorithm)
    lines = 0
    per_step: dict = {}
    unparsed = 0
    size = 0
    try:
        f = io.BytesIO(storage.read_bytes(path)) if storage.is_uri(path) else os.fdopen(open_regular(path, out), "rb")
    except IntegrityError as e:  # not a regular file inside OUT: never opened
        msg = str(e)
        rep.fail(name, "file_present", "listed in the manifest but " + (msg[len(path) + 2:] if msg.startswith(path + ": ") else msg))
        return
    with f:
        for line in f:
            size += len(line)
            if not rep.quick:
                h.update(line)
            if not line.strip():
                continue
            lines += 1
            if rep.quick:
                continue
            try:
                rec = json.loads(line)
                key = (rec["split"], rec["step"])
            except (ValueError, KeyError, TypeError):
                unparsed += 1
                continue
            per_step[key] = per_step.get(key, 0) + 1
    rep.bytes += size
    if lines != rj["count"]:
        rep.fail(name, "rejects", f"{lines} lines, the manifest records {rj['count']} rejected samples")
    if rep.quick:
        return
    rep.hashed += size
    if h.hexdigest() != want:
        rep.fail(name, "checksum", f"{algorithm} {h.hexdigest()}, the manifest records {want}")
        return
    if unparsed:
        rep.fail(name, "rejects", f"{unparsed} line(s) are not reject records with split and step")
    for s in m["steps"]:
        got = per_step.pop((s["split"], s["step"]), 0)
        if got != s["rejected"]:
            rep.fail(name, "rejects", f"{s['split']} step {s['step']}: {got} rejects listed, the manifest records {s['rejected']}")
    for (split, step), n in sorted(per_step.items(), key=str):
        rep.fail(name, "rejects", f"{n} rejects of {split} step {step}, which the manifest does not list")
