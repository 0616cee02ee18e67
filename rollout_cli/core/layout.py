"""The output layout: every path inside OUT, and the check that a path read from a manifest
stays inside the tree it belongs to. The writer, the commit, verify, the loader and inspect all
take their paths from here.

```
OUT/
  manifest.json                                     the commit marker, written last
  README.md                                         the dataset card: which files form which split
  data/step-000003/shard-00000-of-00004.parquet     train steps, one file per rank
  eval/step-000003/shard-00000-of-00001.parquet     eval dumps
  mmap/data/step-000003/shard-00000-of-00004.arrow  uncompressed Arrow IPC copies
  rejects.jsonl                                     rejected samples, with reasons
  .staging/                                         a run in flight
  .lock                                             the writer lock (output/lock.py), while a run holds it
```

On an object store (no rename) each run writes its files once, under a generation folder of
its own that no committed dataset uses; the manifest names it (its `generation` key) and lists
the files by their paths inside OUT:

```
OUT/
  manifest.json                                     the commit point: one PUT, written last
  README.md                                         the dataset card (naming the generation's files), PUT next
  gen/5f0c.../data/step-000003/shard-00000-of-00004.parquet
  gen/5f0c.../mmap/data/step-000003/shard-00000-of-00004.arrow
  gen/5f0c.../rejects.jsonl
  gen/5f0c.../done/                                 a run in flight: its finished steps
  .staging/run.json                                 a run in flight: its generation and options
  .lock                                             the writer lease, while a run holds it
```

Readers follow the manifest's paths; a step reused by `--resume` keeps its files in the
generation that wrote them.

A folder is an output only when its manifest is one of ours (output/manifest.ownership: the
format id, an integer schema version, a list of steps), or, with no manifest yet, when it holds
a run's staging area (`.staging/`, made before anything else a run writes).
A folder holding `data/` or a foreign `manifest.json` is no output, and nothing in it is ever
replaced; in an output, `--overwrite` replaces `ENTRIES` (and the manifest) only.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Any

MANIFEST = "manifest.json"
REJECTS = "rejects.jsonl"
CARD = "README.md"  # the dataset card at OUT's root (output/card.py), since schema version 6
STAGING = ".staging"
LOCK = ".lock"  # the writer lock file (local) or lease object (object store): output/lock.py
MMAP = "mmap"
SPLIT_TREES = {"train": "data", "eval": "eval"}  # split -> its top folder
TREES = (*SPLIT_TREES.values(), MMAP)
# The entries a local output consists of besides its manifest: what a commit moves into place
# (the manifest last) and the only names `--overwrite` replaces; any other name in OUT is left
# alone. A layout change that adds an entry adds it here.
ENTRIES = (*TREES, REJECTS, CARD)
# Entries added by a schema version -> that version: an older output has none (and lacks nothing).
ENTRIES_SINCE = {CARD: 6}
SPLITS = tuple(SPLIT_TREES)
GENERATIONS = "gen"  # object stores: OUT/gen/<id>/ holds one run's trees and rejects
_GENERATION_ID = re.compile(r"[0-9a-f]{8,64}")


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


def generation_dir(generation: str) -> str:
    """The folder of one generation, relative to OUT (object stores)."""
    return f"{GENERATIONS}/{generation}"


def is_generation(generation: Any) -> bool:
    """A generation id as a manifest may name it (lowercase hex)."""
    return isinstance(generation, str) and bool(_GENERATION_ID.fullmatch(generation))


def in_generation(generation: str | None, rel: str) -> str:
    """`rel` (a layout path) as the manifest lists it: inside the generation's folder on an
    object store, as it is on a local output (generation None)."""
    return f"{generation_dir(generation)}/{rel}" if generation else rel


def split_generation(path: str) -> tuple[str | None, str]:
    """(generation, layout path) of a path a manifest lists: the inverse of in_generation."""
    parts = path.split("/", 2)
    if len(parts) == 3 and parts[0] == GENERATIONS and is_generation(parts[1]):
        return parts[1], parts[2]
    return None, path


def manifest_path(out: str) -> str:
    return f"{out.rstrip('/')}/{MANIFEST}" if "://" in out else os.path.join(out, MANIFEST)


def is_output(path: str) -> bool:
    """A folder that holds a committed output (its manifest)."""
    if "://" in path:
        from . import storage

        return storage.is_file(manifest_path(path))
    return os.path.isdir(path) and os.path.isfile(manifest_path(path))


def is_safe(rel: Any, tops: tuple[str, ...]) -> bool:
    """`rel` is a normalised relative POSIX path inside one of `tops` (no `..`, no absolute
    path, no backslash or NUL): what a manifest may name."""
    if not isinstance(rel, str) or not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel:
        return False
    if posixpath.normpath(rel) != rel or ".." in rel.split("/"):
        return False
    if any(rel.startswith(top + "/") for top in tops):
        return True
    generation, inner = split_generation(rel)  # an object store's generation folder
    return generation is not None and any(inner.startswith(top + "/") for top in tops)
