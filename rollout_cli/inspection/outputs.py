"""Steps of a converted output: its model (output/model.py's open_output) and its shards, read one
record batch at a time and only the small columns (never `tokens`); rejects.jsonl and the
manifest's anomalies listed as the anomalies of dumps are."""
from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..core import layout, storage, tensors
from ..core.errors import IntegrityError, InvalidInputError, UsageError
from ..inputs.units import in_steps
from ..output.files import check_arrow, open_regular, random_access
from ..output.model import Output, open_output
from ..pipeline.rewards import group_keys
from ..pipeline.step import SIBLING_RULE
from .anomalies import Anomalies, problem_kind, reject_level, row_anomalies
from .lineage import lineage_anomalies
from .options import InspectOptions
from .rows import ROW_SCHEMA, StepData, dense

# the shard columns inspect reads (source_name may be missing in older outputs, remove_sample in
# outputs of schema version 2)
OUT_COLUMNS = ["rollout_id", "sample_index", "group_index", "response_length", "total_length", "loss_mask",
               "remove_sample", "reward", "raw_reward", "truncated", "status", "source_name", "rollout_mask_sum",
               "weight_versions", "token_exact"]
_MAY_LACK = ("source_name", "remove_sample", "weight_versions", "token_exact")
_BATCH_ROWS = 8192


is_output = layout.is_output  # a converted output folder (complete: it has its manifest)


def read_output(out: str) -> Output:
    """The output's model (its manifest read and checked); a broken one is invalid input here
    (exit 3)."""
    try:
        return open_output(out)
    except IntegrityError as e:
        raise InvalidInputError(str(e)) from None


def mask_sums(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Per-row sum and length of a list<uint8> loss-mask column (nulls count as empty)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy().astype(np.int64)
    flat = pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    cs = np.r_[0, np.cumsum(flat)]
    ends = np.cumsum(lengths)
    return cs[ends] - cs[ends - lengths], lengths


@dataclass
class _Shards:
    """One step's shards, read: small per-row columns, and where each row is."""

    names: list[str] = field(default_factory=list)
    parts: list[pa.Table] = field(default_factory=list)
    shard_of: list[np.ndarray] = field(default_factory=list)
    row_in: list[np.ndarray] = field(default_factory=list)
    length_bad: list[tuple[str, int, int, int]] = field(default_factory=list)  # (shard, row, response_length, mask length)
    not_token_exact: int = 0  # rows whose token_exact is false (schema version 5 on)
    images: int = 0  # raw images the rows keep, and patches of their multimodal_train_inputs (schema version 7 on)
    patches: int = 0

    def where_row(self):
        sh = np.concatenate(self.shard_of) if self.shard_of else np.zeros(0, np.int64)
        ri = np.concatenate(self.row_in) if self.row_in else np.zeros(0, np.int64)
        names = self.names
        return lambda i: {"file": names[int(sh[i])], "row": int(ri[i])}


def _small_columns(b: pa.RecordBatch, names: set) -> pa.Table:
    msum, _ = mask_sums(b.column("loss_mask"))
    src = b.column("source_name") if "source_name" in names else pa.array(["unknown"] * b.num_rows)
    removed = b.column("remove_sample") if "remove_sample" in names else pa.nulls(b.num_rows, pa.bool_())
    versions = b.column("weight_versions") if "weight_versions" in names else pa.nulls(b.num_rows, pa.list_(pa.string()))
    return pa.table({
        "rollout_id": b.column("rollout_id"),
        "sample_index": b.column("sample_index"),
        "group_index": b.column("group_index"),
        "response_length": pc.cast(b.column("response_length"), pa.int64()),
        "total_length": pc.cast(b.column("total_length"), pa.int64()),
        "mask_sum": pa.array(msum, pa.int64()),
        "remove_sample": removed,
        "reward": pc.cast(b.column("reward"), pa.float32()),
        "raw_reward": pc.cast(b.column("raw_reward"), pa.float64()),
        "truncated": b.column("truncated"),
        "status": pc.cast(b.column("status"), pa.string()),
        "source_name": pc.cast(src, pa.string()),
        "rollout_mask_sum": pc.cast(b.column("rollout_mask_sum"), pa.int64()),
        "weight_versions": pc.cast(versions, pa.list_(pa.string())),
    })


# the leaves that give a row's images and patches without reading the bytes of either
MEDIA_LEAVES = ("images.list.element.path", "multimodal_train_inputs.list.element.key",
                "multimodal_train_inputs.list.element.shape")


def media_per_row(pf) -> tuple[np.ndarray, np.ndarray] | None:
    """Each row's raw images and patches (core/tensors.patches_per_row) of a shard, from the
    lists' structure and the tensors' keys and shapes alone; None for a shard without the typed
    columns (schema versions before 7)."""
    schema = pf.schema_arrow
    if "images" not in schema.names or not pa.types.is_list(schema.field("multimodal_train_inputs").type):
        return None
    t = pf.read(columns=list(MEDIA_LEAVES))
    images = t.column("images")
    counts = np.concatenate([np.diff(np.asarray(c.offsets)) for c in images.chunks]) if images.num_chunks else np.zeros(0, np.int64)
    return counts.astype(np.int64), tensors.patches_per_row(t.column("multimodal_train_inputs"))


def _read_shard(o: Output, path: str, k: int, got: _Shards) -> None:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(random_access(path, o.local_root))  # a regular file inside OUT only
        names = set(pf.schema_arrow.names)
        missing = [c for c in OUT_COLUMNS if c not in names and c not in _MAY_LACK]
        if missing:
            raise InvalidInputError(f"{path}: not a rollout-cli shard: no column {missing[0]}")
        r0 = 0
        for b in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[c for c in OUT_COLUMNS if c in names]):
            check_arrow(path, b, o.schema, subset=True)
            _, mlen = mask_sums(b.column("loss_mask"))
            rl = b.column("response_length").to_numpy(zero_copy_only=False).astype(np.int64)
            for i in np.flatnonzero(mlen != rl).tolist():
                got.length_bad.append((path, r0 + i, int(rl[i]), int(mlen[i])))
            nb = b.num_rows
            if "token_exact" in names:
                got.not_token_exact += nb - int(pc.sum(pc.cast(b.column("token_exact"), pa.int64())).as_py() or 0)
            got.parts.append(_small_columns(b, names))
            got.shard_of.append(np.full(nb, k, dtype=np.int64))
            got.row_in.append(np.arange(r0, r0 + nb, dtype=np.int64))
            r0 += nb
        media = media_per_row(pf)
        if media is not None:
            got.images += int(media[0].sum())
            got.patches += int(media[1].sum())
    except (OSError, pa.ArrowException) as e:
        raise InvalidInputError(f"{path}: cannot read shard: {e}") from None


def _prompt_keys(group_index: list, mopts: dict) -> tuple[list, bool]:
    """The rows' prompt-group keys as convert formed them, and whether they are known."""
    if mopts.get("n_samples_per_prompt") and mopts.get("shards", 1) == 1:
        return group_keys(group_index, mopts["n_samples_per_prompt"]), True  # rows kept input order: same chunks as convert
    return [g if g is not None else ("sample", k) for k, g in enumerate(group_index)], all(g is not None for g in group_index)


def _step_rows(got: _Shards, step: int, keys: list) -> pa.Table:
    if not got.parts:
        return ROW_SCHEMA.empty_table()
    t = pa.concat_tables(got.parts)
    n = t.num_rows
    return pa.Table.from_arrays(
        [pa.array(np.full(n, step, dtype=np.int64)), t.column("rollout_id"), t.column("sample_index"),
         t.column("group_index"), pa.array(dense(keys), pa.int64())]
        + [t.column(c) for c in ("response_length", "total_length", "mask_sum", "remove_sample", "reward", "raw_reward",
                                 "truncated", "status", "source_name", "rollout_mask_sum")]
        + [pa.array(np.arange(n, dtype=np.int64)), t.column("weight_versions")],
        schema=ROW_SCHEMA,
    )


def output_steps(o: Output, opts: InspectOptions, anomalies: Anomalies, seen: set) -> Iterator[StepData]:
    """The selected steps of one output, in manifest order."""
    out, mopts = o.root, o.options
    for s in o.steps:
        split, step = s.split, s.step
        if split != opts.split or not in_steps(step, opts.steps):
            continue
        if (split, step) in seen:
            raise UsageError(f"{out}: {split} step {step} is also given by another input")
        seen.add((split, step))
        got = _Shards()
        for k, sh in enumerate(s.shards):
            path = o.full_path(sh.path)
            got.names.append(path)
            _read_shard(o, path, k, got)
        keys, groups_known = _prompt_keys([g for p in got.parts for g in p.column("group_index").to_pylist()], mopts)
        rows = _step_rows(got, step, keys)
        rejected = s.rejected
        sd = StepData(split, step, out, rows.num_rows + rejected, rejected, rows, groups_known=groups_known,
                      not_token_exact=got.not_token_exact, images=got.images, patches=got.patches)
        for path, r, rl, ml in got.length_bad:
            anomalies.add("loss_mask_length", "error", split, step,
                          f"loss_mask: expected length {rl} (response_length), got {ml}", [{"file": path, "row": r}], field="loss_mask",
                          rule="loss_mask.length")
        for a in o.anomalies:
            if a.get("split") == split and a.get("step") == step:
                anomalies.add_recorded(a, split, step, {"file": layout.manifest_path(out)})
        _reject_anomalies(o, split, step, anomalies)
        sd.zero_variance_groups = row_anomalies(sd, got.where_row(), anomalies, mopts.get("n_samples_per_prompt"))
        lineage_anomalies(sd, got.where_row(), anomalies)
        yield sd


def _rule_before_ids(fld: str | None, reason: str) -> str | None:
    """The rule id of a reject record written before rejects.jsonl carried one (an output of
    an earlier version): the two its anomaly kinds tell apart, read from the wording those
    versions wrote; None (an invalid sample) otherwise."""
    if fld is None and str(reason).startswith("sibling of"):
        return SIBLING_RULE
    if fld == "loss_mask" and str(reason).startswith("expected length"):
        return "loss_mask.length"
    return None


def _reject_anomalies(o: Output, split: str, step: int, anomalies: Anomalies) -> None:
    """rejects.jsonl records of one step, as the anomalies inspect lists for invalid dump samples."""
    info = o.rejects
    if not info:
        return
    path = o.full_path(info.get("path", layout.REJECTS))
    try:
        f = io.BytesIO(storage.read_bytes(path)) if storage.is_uri(path) else os.fdopen(open_regular(path, o.local_root), "rb")
    except OSError as e:
        raise InvalidInputError(f"{path}: cannot open: {e.strerror or e}") from None
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise InvalidInputError(f"{path}: invalid JSON: {e}") from None
            if r.get("split") != split or r.get("step") != step:
                continue
            loc = {k: r[k] for k in ("file", "line", "row", "sample") if k in r}
            extra = {"rollout_id": r["rollout_id"]} if "rollout_id" in r else {}
            fld, reason = r.get("field"), r.get("reason", "")
            rule = r["rule"] if "rule" in r else _rule_before_ids(fld, reason)
            if rule == SIBLING_RULE:
                anomalies.add("rejected_sibling", "info", split, step, f"left out with its rollout: {reason}", [loc], **extra)
            else:
                kind = problem_kind(rule)
                anomalies.add(kind, reject_level(kind), split, step, f"{fld}: {reason}" if fld else str(reason), [loc],
                              field=fld, rule=rule, **extra)
