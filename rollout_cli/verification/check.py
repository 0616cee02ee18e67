"""verify: check a converted output against its manifest, shard by shard.

`verify_output(out, quick=False)` returns plain data: what was checked and a list of failures,
each `{"file", "invariant", "detail"}` (`file` relative to OUT). It never raises for a broken
output (only `UsageError` when OUT is not a directory); `failure_message` words the first
failure, as `verify` prints it before exiting 4.

This module walks the output; the checks live in modules by job: manifest.py (the manifest
alone), files.py (the listed files and the shards' reading), rows.py (row invariants),
denominators.py, schedule.py, rejects.py, card.py and strays.py; common.py holds the report they fill.

Full mode reads every shard once, one row group at a time (memory is bounded by the row-group
size plus a small per-rollout summary of one step), and the Arrow IPC copy through a memory map.
`quick` checks only what needs no data pages: presence and sizes, footers (schema, row counts),
the manifest's arithmetic, the layout, stray files and the rejects line count.

Invariants (the `invariant` names in failures):

manifest           manifest.json is present, JSON, and a rollout-cli manifest
schema_version     the manifest's schema version is one this tool reads (core.versions.READ_SCHEMA_VERSIONS),
                   and every shard's is the manifest's
manifest_structure the manifest has the fields and types verify needs; paths stay inside OUT
duplicate_step     no (split, step) appears twice
shard_layout       a step has `options.shards` shards named {data|eval}/step-S/shard-r-of-N.parquet
                   (on an object store inside a generation folder gen/<id>/, core/layout.py)
file_present       every file the manifest lists exists, a regular file inside OUT (a FIFO, device, socket or
                   a link resolving outside OUT is never opened)
size               its size is the recorded `bytes`
checksum           its digest (the manifest's `blake3`, or `sha256`, key) is the recorded one (full mode)
readable           Parquet / Arrow IPC that parses
structure          each IPC record batch and Parquet row group passes Arrow's full validation (offsets in
                   bounds, buffer sizes, UTF-8; output/files.check_arrow), before anything reads through it
schema             the shard's Arrow schema equals `schema.train_schema(keep_text, the manifest's schema_version)`
                   (an output of schema version 2 has no remove_sample column)
rows, tokens, rollouts   per shard and per step, as recorded (rows from the footer in quick mode)
not_null           the non-nullable columns hold no nulls
step_column        every row's `step` is the step the manifest files it under
loss_mask_length   len(loss_mask) == response_length
loss_mask_values   loss_mask values are 0 or 1
remove_sample      a row whose remove_sample is true has a loss_mask of zeros (slime zeroes it)
total_length       total_length == len(tokens)
status             status is one of schema.STATUSES, and truncated == (status == "truncated")
rollout_split      no rollout is split across shards of a step (balanced layout; slime's may split one)
rollout_mask_sum_shared  siblings (same step, rollout_id) share rollout_mask_sum
rollout_mask_sum_total   ... and it equals the sum of their loss_mask totals
group_fields_shared  rows of one prompt group (same step, group_index) share group_mask_sum and
                   group_rollouts (rows without group_index are not checked)
group_fields_total   ... which equal the group's loss_mask total and its number of rollouts
rollout_reward_shared  under options.reward_baseline "rollout", samples of one rollout in one
                   prompt group share their reward
step_fields        every row's step_mask_sum, step_rollouts, step_samples, step_groups equal the step's
                   values in the manifest (so they are equal across its shards), and those equal
                   the step's loss_mask total, rollouts and rows
mmap_content       the Arrow IPC copy holds the same rows as the Parquet shard (full mode)
counts             rows + dropped + rejected = input samples, per step and in total; step and shard sums agree
schedule           --schedule slime: the step's record adds up (one num_microbatches and global batch size per
                   optimizer step, kept + dropped rollouts = the step's); every row carries rollout_position,
                   optimizer_step and micro_batch (none under balanced); positions are 0..n-1 once across
                   shards and dropped rollouts; each shard runs num_microbatches[s] micro-batches per optimizer
                   step, in order; no rollout spans two optimizer steps (full mode)
rejects            rejects.jsonl matches the manifest: count, line count, checksum, per-step counts
card               (schema version 6 on) the dataset card README.md is there, of the recorded size and
                   checksum (file_present, size, checksum, as for a shard: the manifest records its BLAKE3)
unexpected_file    nothing under OUT/data, OUT/eval or OUT/mmap (and, on an object store, under
                   those trees of the manifest's generation) that the manifest does not list;
                   other generations' files (an earlier dataset's, an interrupted run's: the next
                   commit removes them) are noted, not failed

OUT may be a local folder or an object-store URI (`s3://bucket/out`): files are then read
through the pyarrow filesystem, each once.
"""
from __future__ import annotations

import os

from ..core import storage
from ..core.errors import UsageError
from ..core.hashing import DIGEST_KEYS, digest_of, file_digest  # noqa: F401 (re-exported)
from ..core.layout import MANIFEST
from .common import EXAMPLES, Report, full_path
from .card import check_card
from .denominators import check_groups, check_rollouts
from .files import check_bytes, check_ipc, check_parquet_shard
from .manifest import check_arithmetic, check_pending, check_structure, read_manifest
from .rejects import check_rejects
from .rows import StepState
from .schedule import check_columns
from .strays import check_strays


def _check_step(out: str, s: dict, expected, rep: Report, rollout_baseline: bool = False) -> None:
    label = f"{s['split']} step {s['step']}"
    st = StepState()
    st.rollout_baseline = rollout_baseline and s["split"] == "train"
    for r, sh in enumerate(s["shards"]):
        rep.shards += 1
        rel = sh["path"]
        full = full_path(out, rel)
        mm = sh.get("mmap")
        mm_full = full_path(out, mm["path"]) if mm else None
        mm_ok = False
        if mm:
            mm_ok = check_bytes(mm["path"], mm_full, mm, rep) and check_ipc(mm["path"], mm_full, sh, expected, rep)
        if check_bytes(rel, full, sh, rep):
            check_parquet_shard(rel, full, sh, s["step"], r, expected, rep, st, mm_full, mm_ok)
        else:
            st.complete = False
    paths = [sh["path"] for sh in s["shards"]]
    for rid, a, b in ([] if "schedule" in s else st.split[:EXAMPLES]):
        rep.fail(paths[b], "rollout_split", f"{label}: rollout {rid} is in {paths[a]} and {paths[b]}")
    if len(st.split) > EXAMPLES and "schedule" not in s:
        rep.fail(paths[st.split[EXAMPLES][2]], "rollout_split", f"{label}: ... {len(st.split) - EXAMPLES} more split rollouts")
    scheduled = isinstance(s.get("schedule"), dict)
    if scheduled or st.sched:
        check_columns(label, s, st, paths, rep)
    check_rollouts(label, paths, st, rep)
    check_groups(label, s, paths, st, rep)
    if st.complete and len(st.rollouts) != s["rollouts"]:
        rep.fail(MANIFEST, "rollouts", f"{label}: {len(st.rollouts)} rollouts in its shards, the manifest records {s['rollouts']}")


def verify_output(out: str, quick: bool = False) -> dict:
    """Check OUT against its manifest; returns the result (plain data). See the module docstring."""
    from ..core.schema import train_schema

    out = os.fspath(out)
    if not storage.is_dir(out):
        raise UsageError(f"{out}: no such directory" if not storage.exists(out) else f"{out}: not a directory")
    rep = Report(out, quick)
    m = read_manifest(out, rep)
    if m is None or not check_structure(m, rep):
        return rep.result(m)
    check_arithmetic(m, rep)
    check_pending(m, rep)
    expected = train_schema(bool(m["options"].get("keep_text", False)), m["schema_version"])
    for s in m["steps"]:
        _check_step(out, s, expected, rep, m["options"].get("reward_baseline") == "rollout")
    check_rejects(out, m, rep)
    check_card(out, m, rep)
    check_strays(out, m, rep)
    return rep.result(m)


def failure_message(result: dict) -> str:
    f = result["failures"]
    first = f[0]
    more = f" (and {len(f) - 1} more failure{'s' if len(f) > 2 else ''})" if len(f) > 1 else ""
    return f"{result['out']}: {first['file']}: {first['invariant']}: {first['detail']}{more}"
