"""The output layout: every path inside OUT, and the check that a path read from a manifest
stays inside the tree it belongs to. The writer, the commit, verify, the loader and inspect all
take their paths from here.

```
OUT/
  manifest.json                                     the commit marker, written last
  data/step-000003/shard-00000-of-00004.parquet     train steps, one file per rank
  eval/step-000003/shard-00000-of-00001.parquet     eval dumps
  mmap/data/step-000003/shard-00000-of-00004.arrow  uncompressed Arrow IPC copies
  rejects.jsonl                                     rejected samples, with reasons
  .staging/                                         a run in flight
```
"""
from __future__ import annotations

import os
import posixpath
from typing import Any

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
STAGING = ".staging"
MMAP = "mmap"
SPLIT_TREES = {"train": "data", "eval": "eval"}  # split -> its top folder
TREES = (*SPLIT_TREES.values(), MMAP)
ENTRIES = (*TREES, REJECTS)  # what a commit moves into place (the manifest comes last)
SPLITS = tuple(SPLIT_TREES)


def split_tree(split: str) -> str:
    """The top folder of a split's shards: `data` (train) or `eval`."""
    return SPLIT_TREES[split]


def step_dir(split: str, step: int) -> str:
    return f"{SPLIT_TREES[split]}/step-{step:06d}"


def shard_path(split: str, step: int, shard: int, shards: int) -> str:
    """The Parquet file of one shard, relative to OUT."""
    return f"{step_dir(split, step)}/shard-{shard:05d}-of-{shards:05d}.parquet"


def mmap_path(split: str, step: int, shard: int, shards: int) -> str:
    """The Arrow IPC copy of one shard, relative to OUT."""
    return f"{MMAP}/{shard_path(split, step, shard, shards)[: -len('.parquet')]}.arrow"


def manifest_path(out: str) -> str:
    return os.path.join(out, MANIFEST)


def is_output(path: str) -> bool:
    """A folder that holds a committed output (its manifest)."""
    return os.path.isdir(path) and os.path.isfile(manifest_path(path))


def is_safe(rel: Any, tops: tuple[str, ...]) -> bool:
    """`rel` is a normalised relative POSIX path inside one of `tops` (no `..`, no absolute
    path, no backslash or NUL): what a manifest may name."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return False
    if posixpath.normpath(rel) != rel or ".." in rel.split("/"):
        return False
    return any(rel.startswith(top + "/") for top in tops)
