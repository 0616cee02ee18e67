"""PipelineRL's file streams: `{output_dir}/streams/{topic}/{instance}/{partition}/0.jsonl`.

`FileStreamWriter.write` (ServiceNow/PipelineRL@58d39345: pipelinerl/streams.py:238-277) appends
one `orjson.dumps` line per write to the only file of a stream, `0.jsonl`; the actor writes each
finished prompt group to the `actor` stream (the `actor_test` stream in its eval loop) as one line,
a JSON list of `TrainingText.model_dump()`s (pipelinerl/actor.py:643-652, 798-801). The other
topics (`stats`, `stats_test`, the preprocessor's and trainer's streams) are not samples: claimed
here so that they are left out with a note.

PipelineRL records no step. Each text's `metadata.model_version` is the weights' version (a
count of the samples the trainer had consumed when it published them) read when the text's
rollout started (actor.py:186, 214-219), so one group can hold two versions under in-flight
weight updates. rollout-cli's step of a prompt group (a line) is the oldest version in it: the
groups begun under the same weights form a step, a group is never split, and a step's lines
are wherever they are in the stream (inputs/linesteps.py). No numpy here: discovery imports it.
"""
from __future__ import annotations

import os
import re

from ...core import storage
from ...core.errors import InvalidInputError

SAMPLE_TOPICS = {"actor": "train", "actor_test": "eval"}
_PATH = re.compile(r"(?:^|/)streams/([^/]+)/\d+/\d+/\d+\.jsonl(?:\.gz|\.zst)?$")
# TrainingText's first fields, in declaration order (pipelinerl/rollouts.py:35-47), as orjson writes them
_HEAD = re.compile(rb'\s*\[\s*\{"text":"(?:[^"\\]|\\.)*","n_predicted":')
_VERSION = re.compile(rb'"model_version":(-?\d+)')


def _posix(path: str) -> str:
    return path.replace(os.sep, "/") if os.sep != "/" else path


def topic(path: str) -> str | None:
    m = _PATH.search(_posix(path))
    return m.group(1) if m else None


def claims(path: str) -> bool:
    """A file of a PipelineRL stream (any topic: the non-sample ones are left out by
    `skip_note`), or a local JSONL file whose first line is a list of TrainingText dumps."""
    if path == "-":
        return False
    if topic(path) is not None:
        return True
    if storage.is_uri(path) or not path.lower().endswith(".jsonl"):
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:  # unreadable here: the reader of its extension reports it
        return False
    return bool(_HEAD.match(head))


def step_and_split(path: str) -> tuple[int, str] | None:
    """None: a stream file holds many steps (`units` tells them)."""
    return None


def split_of(path: str) -> str:
    return SAMPLE_TOPICS.get(topic(path) or "actor", "train")


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    t = topic(path)
    if t is None or t in SAMPLE_TOPICS:
        return None
    return f"{path}: a PipelineRL `{t}` stream, not samples, skipped"


def group_version(line: bytes) -> int:
    """The oldest `model_version` in a group's line, read off its bytes (the reader checks it
    against the parsed line). Raises InvalidInputError naming the field."""
    found = _VERSION.findall(line)
    if not found:
        raise InvalidInputError("metadata.model_version: missing (PipelineRL's actor writes it on every text)")
    v = min(int(x) for x in found)
    if v < 0:
        raise InvalidInputError(f"metadata.model_version: expected a version >= 0, got {v}")
    return v


def _stream(path: str) -> str:
    """What a file's units are named by: its stream folder (`.../streams/actor`), else the file."""
    p = _posix(path)
    return p.rsplit("/", 3)[0] if _PATH.search(p) else path  # less {instance}/{partition}/0.jsonl


def units(paths: list[str], options=None) -> tuple[list[tuple], list[str]]:
    """One unit per (stream, split, step): the lines of every file of the stream whose group's
    oldest version is the step, in file then line order."""
    from ..linesteps import ranges, scan

    found: dict[tuple[str, str, int], list] = {}
    for path in sorted(paths):
        base, split = _stream(path), split_of(path)
        for line_no, start, end, step in scan(path, path, group_version):
            found.setdefault((base, split, step), []).append((path, line_no, start, end))
    out = []
    for (base, split, step), lines in sorted(found.items(), key=lambda kv: (kv[0][1] != "train", kv[0][2], kv[0][0])):
        rs = ranges(lines)
        out.append((rs[0][0], f"{base}#model_version={step}", step, split, rs))
    return out, []
