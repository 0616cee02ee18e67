"""open-instruct's saved traces (`--save_traces`): `{rollouts_save_path}/{run}_rollouts_{NNNNNN}.jsonl`
shards and `{run}_metadata.jsonl` beside them.

`save_rollouts_to_disk` (allenai/open-instruct@e6c3044a: open_instruct/rl_utils.py:131-160) appends
each training step's records (`json.dumps(asdict(RolloutRecord))` per line, rl_utils.py:29-43,
88-128) to shard `total_samples_written // ROLLOUT_SHARD_SIZE` (10000), so one shard holds many
steps and each record names its own (`step`, its first field). A resumed run starts counting at
0 again (open_instruct/data_loader.py:1361, 1486-1497): it appends the steps after its checkpoint
once more, to the first shards. The metadata file (rl_utils.py:46-64) is not samples.

A step is the records of one `step` value. When a step was written more than once (the same
`sample_idx` again), one copy is kept: the last one in the lowest-numbered shard that holds it.
A later session counted fewer samples before that step than the session before it, so it wrote
the step to the same or an earlier shard, after what that shard held; the others are left out
with a note. Records of a step in consecutive shards with no `sample_idx` in common are one
copy. No numpy here: discovery imports it.
"""
from __future__ import annotations

import os
import re

from ...core import storage
from ...core.errors import InvalidInputError

_SHARD = re.compile(r"^(.+)_rollouts_(\d{6,})\.jsonl(?:\.gz|\.zst)?$")
_META = re.compile(r"^(.+)_metadata\.jsonl$")
_HEAD = re.compile(rb'\s*\{"step": (\d+), "sample_idx": (\d+), "prompt_idx": ')  # RolloutRecord's first fields
_META_HEAD = re.compile(rb'\s*\{"run_name": ')


def _head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(256)
    except OSError:
        return b""


def claims(path: str) -> bool:
    """A rollouts shard by its name and first bytes (an empty one by its name), or the run's
    metadata file beside it."""
    if path == "-" or storage.is_uri(path):
        return False
    name = os.path.basename(path)
    if _SHARD.match(name):
        head = _head(path)
        return not head.strip() or bool(_HEAD.match(head))
    m = _META.match(name)
    return bool(m) and bool(_META_HEAD.match(_head(path)))


def step_and_split(path: str) -> tuple[int, str] | None:
    """None: a shard holds many steps (`units` tells them)."""
    return None


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    if _META.match(os.path.basename(path)):
        return f"{path}: open-instruct run metadata (run name, git commit, model), not samples, skipped"
    return None


def record_key(line: bytes) -> tuple[int, int]:
    """(step, sample_idx) of a record line: off its first bytes as `json.dumps` writes them, else
    parsed. Raises InvalidInputError naming the field."""
    m = _HEAD.match(line)
    if m:
        return int(m.group(1)), int(m.group(2))
    import orjson

    from ..jsonl.lenient import loads

    try:
        rec = loads(line)
    except orjson.JSONDecodeError as e:
        from ..base import line_json_error

        raise InvalidInputError(line_json_error(e)) from None
    if not isinstance(rec, dict):
        raise InvalidInputError(f"expected a JSON object, got {type(rec).__name__}")
    out = []
    for k in ("step", "sample_idx"):
        v = rec.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise InvalidInputError(f"{k}: expected an integer >= 0, got {'missing' if v is None else repr(v)}")
        out.append(v)
    return out[0], out[1]


def _lines_words(lines: list) -> str:
    """`file:lines a-b` for each file a copy's lines are in."""
    spans: dict[str, list[int]] = {}
    for path, line_no, _, _ in lines:
        spans.setdefault(path, [line_no, line_no])[1] = line_no
    return ", ".join(f"{p}:line {a}" if a == b else f"{p}:lines {a}-{b}" for p, (a, b) in spans.items())


def units(paths: list[str], options=None) -> tuple[list[tuple], list[str]]:
    """One unit per (run, step), the copy of the step kept (see the module's docstring)."""
    from ..linesteps import ranges, scan

    runs: dict[str, list[tuple[int, str]]] = {}
    for path in paths:
        m = _SHARD.match(os.path.basename(path))
        if m is None:  # a file forced to this format
            runs.setdefault(path, []).append((0, path))
        else:
            runs.setdefault(os.path.join(os.path.dirname(path), m.group(1)), []).append((int(m.group(2)), path))
    out, notes = [], []
    for run, shards in sorted(runs.items()):
        copies: dict[int, list[dict]] = {}  # step -> its copies, in shard then line order
        for shard, path in sorted(shards):
            current: dict[int, dict] = {}
            for line_no, start, end, (step, idx) in scan(path, path, record_key):
                c = current.get(step)
                if c is None or idx in c["idx"]:
                    c = current[step] = {"shard": shard, "last_shard": shard, "idx": set(), "lines": []}
                    copies.setdefault(step, []).append(c)
                c["idx"].add(idx)
                c["lines"].append((path, line_no, start, end))
        for step in sorted(copies):
            writes: list[dict] = []
            for c in copies[step]:
                w = writes[-1] if writes else None
                if w is not None and c["shard"] == w["last_shard"] + 1 and not (w["idx"] & c["idx"]):
                    w["idx"] |= c["idx"]
                    w["lines"] += c["lines"]
                    w["last_shard"] = c["shard"]
                else:
                    writes.append(c)
            low = min(w["shard"] for w in writes)
            kept = [w for w in writes if w["shard"] == low][-1]
            if len(writes) > 1:
                dropped = "; ".join(_lines_words(w["lines"]) for w in writes if w is not kept)
                notes.append(f"{run}: step {step} was written {len(writes)} times (a resumed run appends the steps "
                             f"after its checkpoint again): kept {_lines_words(kept['lines'])}, left out {dropped}")
            rs = ranges(kept["lines"])
            out.append((rs[0][0], f"{run}_rollouts#step={step}", step, "train", rs))
    return out, notes
