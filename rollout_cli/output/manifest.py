"""The manifest: what a run wrote, with checksums; the commit marker of an output directory.

`pending` (present only when a step was left out because its input was still being written,
`convert --skip-incomplete`, run/live.py) lists those inputs: `{path, format, split, step,
reason}`, `step` null where only the payload tells it (a `.pt` dump). The key is optional, so
a manifest without it (every earlier one) has nothing pending and reads as before; the schema
version is the shards' too, so an added key that no shard sees does not change it."""
from __future__ import annotations

import json
import os
import re
import stat

from ..core import hashing, storage
from ..core.hashing import DIGEST_KEYS, digest_of
from ..core.errors import IntegrityError
from ..core.versions import FORMAT, READ_SCHEMA_VERSIONS, SCHEMA_VERSION, __version__
from ..core import layout
from ..core.layout import REJECTS


SIZE_MTIME = "size+mtime"  # the `fingerprint` of an input on an object store: what its listing reports


@storage.reads_input  # unreachable, refused: InputUnavailableError naming the input
def file_fingerprint(path: str, algorithm: str = hashing.INPUT_ALGORITHM) -> dict:
    """Size, mtime and digest (XXH3-128 unless `algorithm` says otherwise: one of
    hashing.INPUT_KEYS) of a local input file. An input on an object store is not read a
    second time to be hashed: its fingerprint is the size and modification time the store
    reports (`"fingerprint": "size+mtime"`; an object rewritten gets a new mtime)."""
    if storage.is_uri(path):
        info = storage.file_info(path)
        return {"size": info.size, "mtime_ns": info.mtime_ns or 0, "fingerprint": SIZE_MTIME}
    st = os.stat(path)
    # read, not mapped: a trainer may cut the file short while it is hashed
    return hashing.fingerprint(st.st_size, st.st_mtime_ns, hashing.file_digest(path, algorithm, mapped=False), algorithm)


def fingerprint_algorithm(recorded: dict | None) -> str:
    """The algorithm to fingerprint an input with so that it compares with `recorded` (a
    previous fingerprint of it): the one recorded, else XXH3-128."""
    return next((k for k in hashing.INPUT_KEYS if k in (recorded or {})), hashing.INPUT_ALGORITHM)


def same_content(a: dict | None, b: dict | None) -> bool:
    """Whether two fingerprints name the same bytes: size and a digest of one algorithm, or
    (object stores) size and mtime."""
    if not (a and b) or a.get("size") != b.get("size"):
        return False
    if a.get("fingerprint") == SIZE_MTIME or b.get("fingerprint") == SIZE_MTIME:
        return a.get("fingerprint") == b.get("fingerprint") and a.get("mtime_ns") is not None and a.get("mtime_ns") == b.get("mtime_ns")
    alg = next((k for k in hashing.INPUT_KEYS if a.get(k) is not None and b.get(k) is not None), None)
    return alg is not None and a[alg] == b[alg]


def build(*, options: dict, inputs: list[dict], steps: list[dict], counts: dict, rejects: dict | None,
          anomalies: list[dict], volatile: dict, generation: str | None = None,
          pending: list[dict] | None = None, tokenizer: dict | None = None) -> dict:
    """The manifest. `generation` (object stores only) names the folder OUT/gen/<id>/ this
    run wrote its files in; local manifests have no such key."""
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "options": options,
        "counts": counts,
        "inputs": inputs,
        "steps": steps,
        "rejects": rejects,
        "anomalies": anomalies,
        **({"pending": pending} if pending else {}),
        **({"tokenizer": tokenizer} if tokenizer else {}),
        "volatile": volatile,
        **({"generation": generation} if generation else {}),
    }


def _regular(path: str) -> None:
    """A local manifest is read only when it is a regular file (a FIFO would block the read)."""
    st = os.stat(path)  # FileNotFoundError: missing
    if not stat.S_ISREG(st.st_mode):
        raise ManifestError(path, "manifest", "not a regular file (a FIFO, device, socket or folder): not read", parsed=False)


class ManifestError(IntegrityError):
    """OUT/manifest.json is missing, unreadable, not ours, or of a schema version this tool does
    not read. `invariant` names what broke (`manifest` or `schema_version`), as verify reports it."""

    def __init__(self, path: str, invariant: str, detail: str, parsed: bool = True):
        super().__init__(f"{path}: {detail}")
        self.path, self.invariant, self.detail, self.parsed = path, invariant, detail, parsed


def _load(path: str) -> dict:
    """The manifest file at `path` parsed (a local one opened only when it is a regular file);
    ManifestError when it is missing, not a regular file or not JSON."""
    try:
        if not storage.is_uri(path):
            _regular(path)
        return json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise ManifestError(path, "manifest", "missing: not a complete rollout-cli output (an interrupted run, or not converted)",
                           parsed=False) from None
    except (OSError, ValueError) as e:
        raise ManifestError(path, "manifest", f"unreadable: {e}", parsed=False) from None


def _not_ours(m) -> str | None:
    """Why a parsed manifest is not one this tool wrote (None when it is)."""
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        got = m.get("format") if isinstance(m, dict) else None
        return f"not a rollout-cli manifest (format {got!r}, expected {FORMAT!r})"
    return None


def ownership(out: str) -> str | None:
    """None when OUT's manifest is one this tool wrote (its format id, an integer schema
    version, a list of steps: any version's, readable or not); else why it is not, in words."""
    try:
        m = _load(layout.manifest_path(out))
    except ManifestError as e:
        return f"its manifest.json: {e.detail.split(':')[0]}"
    why = _not_ours(m)
    if why is not None:
        return f"its manifest.json is {why}"
    v = m.get("schema_version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1 or not isinstance(m.get("steps"), list):
        return "its manifest.json names the rollout-cli format but has no schema version or list of steps"
    return None


def read(out: str) -> dict:
    """Load OUT/manifest.json, checking it is one of ours with a schema version this tool reads
    (READ_SCHEMA_VERSIONS: an older output lacks the columns core.schema.COLUMNS_SINCE names;
    the one manifest reader: convert's --resume, the loader, inspect and verify all use it)."""
    path = layout.manifest_path(out)
    m = _load(path)
    why = _not_ours(m)
    if why is not None:
        raise ManifestError(path, "manifest", why)
    v = m.get("schema_version")
    if not isinstance(v, int) or isinstance(v, bool) or v not in READ_SCHEMA_VERSIONS:
        reads = ", ".join(map(str, READ_SCHEMA_VERSIONS))
        raise ManifestError(path, "schema_version", f"schema_version {v!r}; this tool reads {reads}")
    return m


_HEX = re.compile(r"[0-9a-f]{64}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def structure_problems(m: dict) -> list[str]:
    """Every field of the manifest `m` (as read() returned it) that verify relies on and finds
    missing or of the wrong type, as `where: what` lines (invariant `manifest_structure`):
    options, counts, rejects, the dataset card (schema version 6 on), each step's counts and
    denominators, each shard's path inside OUT, counts and digest, its IPC copy's. [] for a
    well-formed manifest. output/model.py's open_output checks less (what reading needs: a manifest without digests still loads)."""
    from ..pipeline.fields import STEP_FIELDS  # pyarrow: not at the converting process's start-up

    bad: list[str] = []

    def need_int(d: dict, key: str, where: str, lo: int = 0) -> None:
        v = d.get(key)
        if not _is_int(v) or v < lo:
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
    card = m.get("card")
    if card is None:
        if _is_int(m.get("schema_version")) and m["schema_version"] >= layout.ENTRIES_SINCE[layout.CARD]:
            bad.append(f"card: missing (an output of schema version {m['schema_version']} has a dataset card, {layout.CARD})")
    elif not isinstance(card, dict):
        bad.append(f"card: expected an object, got {type(card).__name__}")
    else:
        if card.get("path") != layout.CARD:
            bad.append(f"card.path: expected {layout.CARD!r}, got {card.get('path')!r}")
        need_int(card, "bytes", "card")
        need_digest(card, "card")
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
        if not isinstance(tps, list) or not all(_is_int(t) for t in tps):
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
    return bad


PENDING_KEYS = ("path", "format", "split", "step", "reason")


def pending_steps(m: dict, split: str | None = None) -> list[dict]:
    """The manifest's pending inputs (of `split` when given); [] when none (or an older manifest)."""
    found = m.get("pending") or []
    return [p for p in found if isinstance(p, dict) and (split is None or p.get("split") == split)]


def pending_problem(m: dict) -> str | None:
    """What is wrong with the manifest's `pending` list, or None when it is well formed."""
    found = m.get("pending")
    if found is None:
        return None
    if not isinstance(found, list):
        return f"pending: expected a list, got {type(found).__name__}"
    for k, p in enumerate(found):
        if not isinstance(p, dict) or not isinstance(p.get("path"), str) or not isinstance(p.get("reason"), str) \
                or p.get("split") not in ("train", "eval") \
                or not (p.get("step") is None or (isinstance(p["step"], int) and not isinstance(p["step"], bool))):
            return f"pending[{k}]: expected {{path, format, split, step, reason}}, got {str(p)[:200]}"
    return None


def pending_message(p: dict) -> str:
    """One pending input, as verify, inspect and the loader word it."""
    what = f"{p.get('split')} step {p['step']}" if p.get("step") is not None else f"its {p.get('split')} step"
    return (f"{p.get('path')}: {what} is pending, not in this output: {p.get('reason')} "
            "(`convert --resume` converts it once complete)")


def recorded_fingerprint(prev: dict, display: str) -> dict:
    """An input's fingerprint as the manifest `prev` records it (an object's mtime, which
    identifies it, from the volatile section it is kept in); {} when it names no such input."""
    for i in prev.get("inputs", []):
        if i["path"] == display:
            fp = {k: i[k] for k in ("size", "mtime_ns", *hashing.INPUT_KEYS, "fingerprint") if k in i}
            if fp.get("fingerprint") == SIZE_MTIME:
                mtime = (prev.get("volatile") or {}).get("input_mtime_ns", {}).get(display)
                if mtime is not None:
                    fp["mtime_ns"] = mtime
            return fp
    return {}
