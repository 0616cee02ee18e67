"""Telling Atropos' `data_path_to_save_groups` files, their step and what beside them is no
sample data. Discovery imports this module in the converting process: no numpy here.

The writer (NousResearch/atropos@296a0bc5: atroposlib/envs/base.py:273-297) opens the
configured path, or, when a file is there already, the first free `{stem}_{K}{suffix}`
(K = 1, 2, ...), and writes one scored group per line with `jsonlines` (`json.dumps`: `"key":
value` with a space). When the environment's process ends, `generate_html` writes a viewer
page `{stem}.html` beside it (atroposlib/frontend/jsonl2html.py:138-139). An evaluation writes
`metrics.json` and text-only `samples.jsonl` into `data_dir_to_save_evals` (base.py:718-790).

A step is one file: the writer starts a new file each time an environment process starts with
the same path (a restart that continues feeding the same trainer, or a new run: the files do
not say which), so the file the writer opened K-th (`{stem}_{K}`) is step K and the first one
(`{stem}`) step 0. A prompt group is one line, so a step never splits a group.
"""
from __future__ import annotations

import os
import re

_SUFFIX = re.compile(r"_(\d+)$")
# a scored group's first line: an object whose `tokens` (or `masks`) is a list of lists
_NESTED = re.compile(rb'"(tokens|masks)"\s*:\s*\[\s*\[')
_OPENS = re.compile(rb'\{\s*"(tokens|masks)"\s*:\s*\[\s*\[')
_HEAD_BYTES = 64 << 10  # every local JSONL file is asked: a small read
_ENDINGS = (".jsonl", ".jsonl.gz", ".jsonl.zst")


def _head(path: str) -> bytes | None:
    from ..jsonl.reader import open_binary

    try:
        with open_binary(path) as f:
            return f.read(_HEAD_BYTES)
    except Exception:  # unreadable or corrupt: the reader of its extension words it
        return None


def _is_groups_file(path: str) -> bool:
    from ...core import storage

    if storage.is_uri(path) or not path.lower().endswith(_ENDINGS):
        return False
    head = _head(path)
    if head is None:
        return False
    first = head.split(b"\n", 1)[0].lstrip()
    if not first.startswith(b"{"):
        return False
    keys = {m.group(1) for m in _NESTED.finditer(first)}
    # both keys, or a first line longer than the head that opens with its token (or mask) lists
    return keys == {b"tokens", b"masks"} or (b"\n" not in head and _OPENS.match(first) is not None)


def _stem_and_ending(name: str) -> tuple[str, str]:
    low = name.lower()
    for end in _ENDINGS:
        if low.endswith(end):
            return name[: -len(end)], name[-len(end):]
    stem, dot, ext = name.rpartition(".")
    return (stem, dot + ext) if dot else (name, "")


def _viewer_of(path: str) -> str | None:
    """The groups file an `.html` file is the viewer page of, or None."""
    if not path.lower().endswith(".html"):
        return None
    base = path[: -len(".html")]
    for end in _ENDINGS:
        if os.path.isfile(base + end) and _is_groups_file(base + end):
            return base + end
    return None


def _eval_samples(path: str) -> bool:
    """An Atropos evaluation's `samples.jsonl` (text only): `metrics.json` beside it names an
    `atropos|` task (base.py:763-775)."""
    if os.path.basename(path) != "samples.jsonl":
        return False
    metrics = os.path.join(os.path.dirname(path), "metrics.json")
    try:
        with open(metrics, "rb") as f:
            return b'"atropos|' in f.read(1 << 16)
    except OSError:
        return False


def claims(path: str) -> bool:
    """A groups file (by its first line), or a file an Atropos run leaves beside one that is no
    sample data (a groups file's viewer page, an evaluation's samples), claimed so that
    `skip_note` leaves it out."""
    if path == "-":
        return False
    return _is_groups_file(path) or _viewer_of(path) is not None or _eval_samples(path)


def step_and_split(path: str) -> tuple[int, str] | None:
    """(K, "train") for `{stem}_{K}.jsonl`, (0, "train") for any other groups file name: the
    K-th file the writer opened for one configured path. Atropos writes no eval groups."""
    if path.lower().endswith(".html") or os.path.basename(path) == "samples.jsonl":
        return None
    stem, _ = _stem_and_ending(os.path.basename(path))
    m = _SUFFIX.search(stem)
    return (int(m.group(1)) if m else 0), "train"


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    """A viewer page or an evaluation's samples: not sample data, skipped."""
    viewer = _viewer_of(path)
    if viewer is not None:
        return f"{path}: the Atropos viewer page of {os.path.basename(viewer)}, not sample data, skipped"
    if _eval_samples(path):
        return f"{path}: Atropos evaluation samples (text, no tokens), not train data, skipped"
    return None
