"""`inspect --show`: one rollout's samples, with text and loss-mask runs. On dumps the step is
read once for the ids (dumps.dump_step), then again for the text of the wanted samples only."""
from __future__ import annotations


import base64

import numpy as np
import pyarrow as pa

from ..core import storage, tensors
from ..core.errors import InvalidInputError, UsageError
from ..inputs.registry import format_of
from ..output.files import check_arrow, random_access
from .aggregate import r6
from .anomalies import Anomalies, loc_dict
from .dumps import dump_step, read_chunks, validate_chunk
from .options import InspectOptions
from .outputs import OUT_COLUMNS, media_per_row
from .rows import StepData
from .sources import Sources, resolve

_TEXT = ("prompt", "response", "label")


def parse_rollout_ref(ref: str) -> tuple[int | None, int]:
    """`STEP:ID` or `ID`."""
    try:
        if ":" in ref:
            a, b = ref.split(":", 1)
            return int(a), int(b)
        return None, int(ref)
    except ValueError:
        raise UsageError(f"--show: expected STEP:ID or ID (integers), got {ref!r}") from None


def mask_runs(mask: list | np.ndarray) -> list[list[int]]:
    """Run-length encoding [[value, length], ...] of a loss mask."""
    a = np.asarray(mask, dtype=np.int64)
    if not len(a):
        return []
    cut = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    lens = np.diff(np.r_[cut, len(a)])
    return [[int(a[c]), int(n)] for c, n in zip(cut.tolist(), lens.tolist())]


def _sample_view(r: dict, where: dict, text: bool) -> dict:
    d = {
        "where": where,
        "sample_index": r["sample_index"],
        "group_index": r["group_index"],
        "status": r["status"],
        "response_length": r["response_length"],
        "prompt_length": r["total_length"] - r["response_length"],
        "total_length": r["total_length"],
        "mask_sum": r["mask_sum"],
        "mask_runs": r.get("mask_runs"),
        "remove_sample": r.get("remove_sample"),  # null for an output of schema version 2
        "reward": r6(r["reward"]),
        "raw_reward": r6(r["raw_reward"]),  # null with reward where the framework recorded none
        "source_name": r["source_name"],
        "weight_versions": r.get("weight_versions"),
    }
    if text:
        d["prompt"], d["response"], d["label"] = r.get("prompt"), r.get("response"), r.get("label")
    if r.get("decoded") is not None:
        d["decoded"] = r["decoded"]
    if r.get("images"):  # the raw images, lossless: PNG, base64
        d["images"] = [base64.b64encode(e["bytes"]).decode() for e in r["images"]]
    if r.get("patches"):
        d["patches"] = r["patches"]
    return d


def show_rollout(paths: list[str], rollout: str, options: InspectOptions | None = None) -> dict:
    """One rollout's samples: `{"rollout": {"split", "step", "rollout_id", "samples": [...], ...}}`."""
    opts = options or InspectOptions()
    opts.check()
    want_step, want_id = parse_rollout_ref(rollout)
    src = resolve(list(paths), opts)
    if src.kind == "converted":
        return _show_output(src, opts, want_step, want_id)
    sd = _find_dump_step(src, opts, rollout, want_step)
    return _show_dump(sd, opts, want_id)


def show_rollouts(paths: list[str], refs: list[tuple[int, int]], options: InspectOptions | None = None) -> dict:
    """`show_rollout` for many `(step, rollout_id)` at once, each step read once (twice on
    dumps: ids, then text) whatever the number of its rollouts: `{(step, id): rollout}`."""
    opts = options or InspectOptions()
    opts.check()
    src = resolve(list(paths), opts)
    by_step: dict[int, list[int]] = {}
    for step, rid in refs:
        by_step.setdefault(step, []).append(rid)
    found: dict = {}
    for step, ids in by_step.items():
        if src.kind == "converted":
            views = _show_output_many(src, opts, step, ids)
        else:
            views = _show_dump_many(_find_dump_step(src, opts, f"{step}:{ids[0]}", step), opts, ids)
        found.update({(step, rid): v for rid, v in views.items()})
    return found


def _find_dump_step(src: Sources, opts: InspectOptions, rollout: str, want_step: int | None) -> StepData:
    units = src.units
    if any(u.input.path == "-" for u in units):
        raise UsageError("--show reads its input twice (ids, then text): save stdin to a file first")
    if want_step is None:
        if len(units) != 1:
            raise UsageError(f"--show {rollout}: {len(units)} {opts.split} inputs; name the step as STEP:ID")
    else:
        units = [u for u in units if u.step is None or u.step == want_step or format_of(u.input.format).payload_step]
    seen: dict = {}
    for unit in units:
        sd = dump_step(unit, opts, Anomalies(0), seen, [])
        if sd is not None and (want_step is None or sd.step == want_step):
            return sd
    raise UsageError(f"--show {rollout}: no {opts.split} step {want_step} in the input" if want_step is not None
                     else f"--show {rollout}: no {opts.split} input")


def _add_text(sd: StepData, opts: InspectOptions, by_pos: dict[int, dict]) -> None:
    """Second pass over the dump: text and mask runs of the samples at `by_pos`' positions."""
    inp = sd.records.input
    payload: dict = {}
    base = 0
    for raw in read_chunks(inp, opts, payload):
        lo, hi = base, base + len(raw)
        base = hi
        if not any(lo <= p < hi for p in by_pos):
            continue
        nc = validate_chunk(raw, lo, inp, opts, keep_text=True)
        for b in nc.batches:
            masks = b.column("loss_mask")
            for k, p in enumerate(b.column("_pos").to_pylist()):
                if p in by_pos:
                    r = by_pos[p]
                    mask = masks[k].values.to_numpy(zero_copy_only=False)
                    r["mask_runs"] = mask_runs(mask)
                    r["prompt"], r["response"], r["label"] = (b.column(c)[k].as_py() for c in _TEXT)
                    r["images"] = b.column("images")[k].as_py()
                    r["patches"] = int(tensors.patches_per_row(b.column("multimodal_train_inputs").slice(k, 1))[0])
                    if opts.tokenizer:
                        r["decoded"] = _decoded(opts, b.column("tokens")[k].values.to_numpy(zero_copy_only=False),
                                                r["response_length"], mask)


def _decoded(opts: InspectOptions, tokens, response_length: int, mask) -> dict:
    """The sample's tokens as text through --tokenizer (text/pieces.py)."""
    from ..text.pieces import decoded
    from ..text.tokenizer import load

    return decoded(load(opts.tokenizer), tokens, response_length, mask)


def _show_dump(sd: StepData, opts: InspectOptions, want_id: int) -> dict:
    return {"rollout": _show_dump_many(sd, opts, [want_id])[want_id]}


def _show_dump_many(sd: StepData, opts: InspectOptions, want_ids: list[int]) -> dict[int, dict]:
    rec = sd.records
    t = sd.rows
    ids = t.column("rollout_id").to_numpy()
    rows_of, rej_of = {}, {}
    for want_id in want_ids:
        sel = np.flatnonzero(ids == want_id)
        rej_of[want_id] = np.flatnonzero(rec.assigned & rec.rejected & (rec.ids == want_id))
        if not len(sel) and not len(rej_of[want_id]):
            raise UsageError(f"--show: step {sd.step} has no rollout {want_id}")
        rows_of[want_id] = t.take(pa.array(sel)).to_pylist()
    _add_text(sd, opts, {r["pos"]: r for rows in rows_of.values() for r in rows})  # one pass for all
    views = {}
    for want_id, rows in rows_of.items():
        samples = [_sample_view(r, loc_dict(rec.where(r["pos"])), True) for r in rows]
        rejected = [dict({"where": loc_dict(rec.where(i))}, **({"field": rec.reasons[i].field, "reason": rec.reasons[i].message}
                                                               if i in rec.reasons else {"field": None, "reason": "sibling of an invalid sample"}))
                    for i in rej_of[want_id].tolist()]
        views[want_id] = {
            "split": sd.split, "step": sd.step, "rollout_id": want_id, "input": "dumps",
            "rollout_mask_sum": int(rows[0]["rollout_mask_sum"]) if rows else None,
            "samples": samples, "rejected": rejected, "text": True, "note": None,
        }
    return views


def _output_step(src: Sources, opts: InspectOptions, want_step: int | None, want_id: int) -> tuple[str, dict]:
    candidates = [(o.root, s.record) for o in src.outputs for s in o.steps
                  if s.split == opts.split and (want_step is None or s.step == want_step)]
    if want_step is None and len(candidates) != 1:
        raise UsageError(f"--show {want_id}: {len(candidates)} {opts.split} steps in the output; name the step as STEP:ID")
    if not candidates:
        raise UsageError(f"--show: no {opts.split} step {want_step} in the output")
    return candidates[0]


def _show_output(src: Sources, opts: InspectOptions, want_step: int | None, want_id: int) -> dict:
    out, s = _output_step(src, opts, want_step, want_id)
    return {"rollout": _output_views(out, s, opts, [want_id])[want_id]}


def _show_output_many(src: Sources, opts: InspectOptions, step: int, want_ids: list[int]) -> dict[int, dict]:
    out, s = _output_step(src, opts, step, want_ids[0])
    return _output_views(out, s, opts, want_ids)


def _output_views(out: str, s: dict, opts: InspectOptions, want_ids: list[int]) -> dict[int, dict]:
    """The wanted rollouts of one converted step, its shards read once."""
    import pyarrow.parquet as pq

    samples: dict[int, list] = {rid: [] for rid in want_ids}
    rms: dict[int, int | None] = dict.fromkeys(want_ids)
    wanted = np.array(want_ids, dtype=np.int64)
    text = False
    for sh in s.get("shards", []):
        path = storage.join(out, sh["path"])
        try:
            pf = pq.ParquetFile(random_access(path, None if storage.is_uri(out) else out))  # a regular file inside OUT only
            names = pf.schema_arrow.names
            text = all(c in names for c in _TEXT)
            cols = [c for c in OUT_COLUMNS + list(_TEXT) + (["tokens"] if opts.tokenizer else []) + ["images"]
                    if c in names]
            r0 = 0
            media = media_per_row(pf)
            for b in pf.iter_batches(batch_size=8192, columns=cols):
                check_arrow(path, b, None)
                rids = b.column("rollout_id").to_numpy()
                for k in np.flatnonzero(np.isin(rids, wanted)).tolist():
                    r = {c: b.column(c)[k].as_py() for c in cols if c not in ("loss_mask", "tokens")}
                    if media is not None:
                        r["patches"] = int(media[1][r0 + k])
                    mask = b.column("loss_mask")[k].values.to_numpy(zero_copy_only=False)
                    if opts.tokenizer:
                        r["decoded"] = _decoded(opts, b.column("tokens")[k].values.to_numpy(zero_copy_only=False),
                                                r["response_length"], mask)
                    r["mask_sum"] = int(mask.astype(np.int64).sum())
                    r["mask_runs"] = mask_runs(mask)
                    r.setdefault("source_name", "unknown")
                    rid = int(rids[k])
                    rms[rid] = r["rollout_mask_sum"]
                    samples[rid].append(_sample_view(r, {"file": path, "row": r0 + k}, text))
                r0 += b.num_rows
        except (OSError, pa.ArrowException) as e:
            raise InvalidInputError(f"{path}: cannot read shard: {e}") from None
    views = {}
    for rid in want_ids:
        if not samples[rid]:
            raise UsageError(f"--show: {opts.split} step {s['step']} has no rollout {rid}")
        views[rid] = {
            "split": opts.split, "step": int(s["step"]), "rollout_id": rid, "input": "converted",
            "rollout_mask_sum": rms[rid], "samples": samples[rid], "rejected": [], "text": text,
            "note": None if text else "prompt, response and label are not in this output: convert with --keep-text to keep them",
        }
    return views
