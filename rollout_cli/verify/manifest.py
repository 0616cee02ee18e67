"""The manifest on its own: that it parses, has the structure and types the other checks rely
on, keeps its paths inside OUT, lays its shards out as core/layout.py says, and adds up
(rows + dropped + rejected = input samples, step and shard sums); its pending steps are notes."""
from __future__ import annotations

import re

from ..core import layout
from ..core.hashing import DIGEST_KEYS, digest_of
from ..core.layout import MANIFEST, REJECTS
from ..output import manifest as manifest_mod
from ..pipeline.fields import STEP_FIELDS
from .common import Report, is_int
from .schedule import check_record


_HEX = re.compile(r"[0-9a-f]{64}")


def read_manifest(out: str, rep: Report) -> dict | None:
    try:
        m = manifest_mod.read(out)
    except manifest_mod.ManifestError as e:
        if e.parsed:
            rep.files.append(MANIFEST)
        rep.fail(MANIFEST, e.invariant, e.detail)
        return None
    rep.files.append(MANIFEST)
    return m


def check_structure(m: dict, rep: Report) -> bool:
    """Check the fields verify relies on; False (with failures) when it cannot go on."""
    bad: list[str] = []

    def need_int(d: dict, key: str, where: str, lo: int = 0) -> None:
        v = d.get(key)
        if not is_int(v) or v < lo:
            bad.append(f"{where}.{key}: expected an integer >= {lo}, got {v!r}")

    def need_digest(d: dict, where: str) -> None:
        dg = digest_of(d)
        if dg is None:
            bad.append(f"{where}: no checksum (expected one of the keys {', '.join(DIGEST_KEYS)})")
        elif not isinstance(dg[1], str) or not _HEX.fullmatch(dg[1]):
            bad.append(f"{where}.{dg[0]}: expected 64 hex digits, got {dg[1]!r}")

    opts = m.get("options")
    if not isinstance(opts, dict):
        bad.append(f"options: expected an object, got {type(opts).__name__}")
    else:
        need_int(opts, "shards", "options", 1)
        if not isinstance(opts.get("keep_text", False), bool):
            bad.append(f"options.keep_text: expected true/false, got {opts.get('keep_text')!r}")
    counts = m.get("counts")
    if not isinstance(counts, dict):
        bad.append(f"counts: expected an object, got {type(counts).__name__}")
    else:
        for k in ("input_samples", "rows", "rejected", "steps", "eval_steps"):
            need_int(counts, k, "counts")
    if not isinstance(m.get("inputs", []), list):
        bad.append("inputs: expected a list")
    if "generation" in m and not layout.is_generation(m["generation"]):
        bad.append(f"generation: expected lowercase hex digits, got {m['generation']!r}")
    rj = m.get("rejects")
    if rj is not None:
        if not isinstance(rj, dict):
            bad.append(f"rejects: expected an object or null, got {type(rj).__name__}")
        else:
            if rj.get("path") != layout.in_generation(m.get("generation"), REJECTS):
                bad.append(f"rejects.path: expected {layout.in_generation(m.get('generation'), REJECTS)!r}, got {rj.get('path')!r}")
            need_int(rj, "count", "rejects")
            need_digest(rj, "rejects")
    steps = m.get("steps")
    if not isinstance(steps, list):
        bad.append(f"steps: expected a list, got {type(steps).__name__}")
        steps = []
    for i, s in enumerate(steps):
        where = f"steps[{i}]"
        if not isinstance(s, dict):
            bad.append(f"{where}: expected an object")
            continue
        if s.get("split") not in layout.SPLITS:
            bad.append(f"{where}.split: expected 'train' or 'eval', got {s.get('split')!r}")
        need_int(s, "step", where, -(2**63))
        for k in ("samples", "rows", "rejected", "rollouts", "tokens", *STEP_FIELDS):
            need_int(s, k, where)
        tps = s.get("tokens_per_shard")
        if not isinstance(tps, list) or not all(is_int(t) for t in tps):
            bad.append(f"{where}.tokens_per_shard: expected a list of integers")
        shards = s.get("shards")
        if not isinstance(shards, list):
            bad.append(f"{where}.shards: expected a list")
            continue
        for r, sh in enumerate(shards):
            w = f"{where}.shards[{r}]"
            if not isinstance(sh, dict):
                bad.append(f"{w}: expected an object")
                continue
            if not layout.is_safe(sh.get("path"), tuple(layout.SPLIT_TREES.values())) or not sh["path"].endswith(".parquet"):
                bad.append(f"{w}.path: expected a .parquet path under data/ or eval/, got {sh.get('path')!r}")
            for k in ("rows", "rollouts", "tokens", "bytes"):
                need_int(sh, k, w)
            need_digest(sh, w)
            mm = sh.get("mmap")
            if mm is not None:
                if not isinstance(mm, dict):
                    bad.append(f"{w}.mmap: expected an object or null")
                    continue
                if not layout.is_safe(mm.get("path"), (layout.MMAP,)) or not mm["path"].endswith(".arrow"):
                    bad.append(f"{w}.mmap.path: expected an .arrow path under mmap/, got {mm.get('path')!r}")
                need_int(mm, "bytes", w + ".mmap")
                need_digest(mm, w + ".mmap")
    for b in bad[:20]:
        rep.fail(MANIFEST, "manifest_structure", b)
    if len(bad) > 20:
        rep.fail(MANIFEST, "manifest_structure", f"... and {len(bad) - 20} more")
    return not bad


def check_arithmetic(m: dict, rep: Report) -> None:
    """Counts, layout and duplicates, from the manifest alone."""
    opts, counts, steps = m["options"], m["counts"], m["steps"]
    n_shards = opts["shards"]
    seen: set = set()
    paths: set = set()
    for s in steps:
        label = f"{s['split']} step {s['step']}"
        key = (s["split"], s["step"])
        if key in seen:
            rep.fail(MANIFEST, "duplicate_step", f"{label} is listed twice")
        seen.add(key)
        dropped = s.get("dropped", 0)
        if s["rows"] + dropped + s["rejected"] != s["samples"]:
            rep.fail(MANIFEST, "counts", f"{label}: rows {s['rows']} + dropped {dropped} + rejected {s['rejected']} != input samples {s['samples']}")
        if isinstance(s.get("schedule"), dict):
            check_record(label, s, opts, rep)
        shards = s["shards"]
        for field in ("rows", "tokens"):
            total = sum(sh[field] for sh in shards)
            if total != s[field]:
                rep.fail(MANIFEST, "counts", f"{label}: its shards hold {total} {field}, the step records {s[field]}")
        if sum(sh["rollouts"] for sh in shards) != s["rollouts"] and "schedule" not in s:
            rep.fail(MANIFEST, "counts", f"{label}: its shards hold {sum(sh['rollouts'] for sh in shards)} rollouts, the step records {s['rollouts']}")
        for field, total in (("step_rollouts", s["rollouts"]), ("step_samples", s["rows"])):
            if s[field] != total:
                rep.fail(MANIFEST, "step_fields", f"{label}: {field} {s[field]}, the step records {total} {field[5:]}")
        if s["tokens_per_shard"] != [sh["tokens"] for sh in shards]:
            rep.fail(MANIFEST, "counts", f"{label}: tokens_per_shard {s['tokens_per_shard']} != the shards' tokens {[sh['tokens'] for sh in shards]}")
        if len(shards) != n_shards:
            rep.fail(MANIFEST, "shard_layout", f"{label}: {len(shards)} shards, options.shards is {n_shards}")
        for r, sh in enumerate(shards):
            want = layout.shard_path(s["split"], s["step"], r, len(shards))
            if not laid_out(sh["path"], want, m):
                rep.fail(MANIFEST, "shard_layout", f"{label}: shard {r} is {sh['path']!r}, expected {want!r}")
            mm = sh.get("mmap")
            want_mm = layout.mmap_path(s["split"], s["step"], r, len(shards))
            if mm is not None and not laid_out(mm["path"], want_mm, m):
                rep.fail(MANIFEST, "shard_layout", f"{label}: shard {r}'s mmap copy is {mm['path']!r}, expected {want_mm!r}")
            for p in (sh["path"], mm["path"] if mm else None):
                if p is None:
                    continue
                if p in paths:
                    rep.fail(MANIFEST, "shard_layout", f"{p} is listed twice")
                paths.add(p)
        if bool(opts.get("mmap", True)) != all(sh.get("mmap") is not None for sh in shards) and shards:
            rep.fail(MANIFEST, "shard_layout", f"{label}: options.mmap is {opts.get('mmap', True)}, but shards {'lack' if opts.get('mmap', True) else 'have'} mmap copies")
    totals = {
        "input_samples": sum(s["samples"] for s in steps),
        "rows": sum(s["rows"] for s in steps),
        "rejected": sum(s["rejected"] for s in steps),
        "steps": sum(1 for s in steps if s["split"] == "train"),
        "eval_steps": sum(1 for s in steps if s["split"] == "eval"),
    }
    for k, v in totals.items():
        if counts[k] != v:
            rep.fail(MANIFEST, "counts", f"counts.{k} is {counts[k]}, the steps add up to {v}")
    dropped = counts.get("dropped", 0)
    if dropped != sum(s.get("dropped", 0) for s in steps):
        rep.fail(MANIFEST, "counts", f"counts.dropped is {dropped}, the steps add up to {sum(s.get('dropped', 0) for s in steps)}")
    if counts["rows"] + dropped + counts["rejected"] != counts["input_samples"]:
        rep.fail(MANIFEST, "counts", f"counts: rows {counts['rows']} + dropped {dropped} + rejected {counts['rejected']} != input samples {counts['input_samples']}")
    inputs = m.get("inputs") or []
    if inputs and all(isinstance(i, dict) and is_int(i.get("samples")) for i in inputs):
        n_in = sum(i["samples"] for i in inputs)
        if n_in != counts["input_samples"]:
            rep.fail(MANIFEST, "counts", f"inputs hold {n_in} samples, counts.input_samples is {counts['input_samples']}")


def laid_out(path: str, want: str, m: dict) -> bool:
    """`path` is the layout path `want`: as it is (local), or inside a generation folder when the
    manifest names one (object stores; a step --resume reused keeps its earlier generation)."""
    if path == want:
        return True
    generation, inner = layout.split_generation(path)
    return generation is not None and "generation" in m and inner == want


def check_pending(m: dict, rep: Report) -> None:
    """Steps left out while their input was being written (convert --skip-incomplete): a note
    each, not a failure; a malformed list is a manifest_structure failure."""
    problem = manifest_mod.pending_problem(m)
    if problem:
        rep.fail(MANIFEST, "manifest_structure", problem)
        return
    rep.notes.extend(manifest_mod.pending_message(p) for p in manifest_mod.pending_steps(m))
