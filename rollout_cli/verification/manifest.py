"""The manifest on its own: that it parses, has the structure and types the other checks rely
on, keeps its paths inside OUT, lays its shards out as core/layout.py says, and adds up
(rows + dropped + rejected = input samples, step and shard sums); its pending steps are notes."""
from __future__ import annotations

from ..core import layout
from ..core.layout import MANIFEST
from ..output import manifest as manifest_mod
from .common import Report, is_int
from .schedule import check_record


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
    """Check the fields verify relies on (output/manifest.structure_problems, the one structure
    check); False (with failures) when it cannot go on."""
    bad = manifest_mod.structure_problems(m)
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
