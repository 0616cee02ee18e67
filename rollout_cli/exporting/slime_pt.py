"""`export --format slime-pt`: a converted output as slime rollout debug dumps.

One file per step, `DEST/{step}.pt` (train) and `DEST/eval_{step}.pt` (eval), each
`torch.save({"rollout_id": step, "samples": [Sample.to_dict() form, ...]})`, which slime replays
with `--load-debug-rollout-data DEST/{rollout_id}.pt` (slime-spec sections 2a and 9). The
samples hold plain Python values and CPU tensors only, in their input order, with `status`
strings, the assigned rollout ids as explicit ids, the loss mask after `remove_sample` and the
flag itself (false for an output of schema version 2, which did not keep it), the selected
reward before post-processing (None where the framework recorded none: a null `reward`) and
the `weight_versions` (from schema version 4 on). Fields conversion does not keep come back with
slime's defaults (`lost_fields`).

The files are written to a staging folder next to DEST and renamed into place as a whole,
under DEST's writer lock (`.DEST.lock` beside it, output/lock.py): one export into a DEST at a
time, a second refused with exit 8 or waiting with `wait`. DEST also gets a marker,
`.rollout-cli-export.json`: `--overwrite` replaces only a folder holding that marker and export's
own files, never any other folder (exit 5, whatever the flags).
"""
from __future__ import annotations

import io
import os
import re
import shutil
import stat
import time
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..core import storage, tensors
from ..core.errors import IntegrityError, OutputError, OutputExistsError, UsageError, output_error
from ..inputs.discover import parse_steps
from ..output import lock as writer_lock
from ..output.commit import nested, stage_beside, swap_in
from ..output.model import Output, Step, open_output
from ..core.storage import fsync_dir
from ..core.versions import __version__

FORMATS = ("slime-pt",)
# written into every DEST export fills: how a later `export --overwrite` knows the folder is one
# it may replace (and nothing else is)
MARKER = ".rollout-cli-export.json"
MARKER_FORMAT = "rollout-cli/export"
_FILE_NAME = re.compile(r"(eval_)?\d+\.pt")
SPLITS = ("train", "eval")

# slime's Sample fields in declaration order (= the key order of Sample.to_dict()), with the
# defaults slime gives the ones an output does not hold
_DEFAULTS: dict[str, Any] = {
    "group_index": None, "index": None, "rollout_id": None, "prompt": "", "tokens": None,
    "multimodal_inputs": None, "multimodal_train_inputs": None, "multimodal_train_input_id": None,
    "apply_chat_template_kwargs": {}, "response": "", "response_length": 0, "label": None,
    "reward": None, "loss_mask": None, "weight_versions": [], "rollout_log_probs": None,
    "rollout_top_p_token_ids": None, "rollout_top_p_token_offsets": None,
    "rollout_routed_experts": None, "remove_sample": False, "teacher_log_probs": None,
    "status": None, "metadata": {}, "generate_function_path": None, "custom_rm_path": None,
    "train_metadata": None, "session_id": None, "non_generation_time": 0.0,
    "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0, "spec_verify_ct": 0, "completion_token_num": 0},
    "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
}

# what an export never restores (conversion does not keep it)
LOST_FIELDS = (
    "multimodal_inputs", "multimodal_train_input_id", "apply_chat_template_kwargs",
    "generate_function_path", "custom_rm_path", "session_id", "non_generation_time", "spec_info",
    "prefix_cache_info", "trace and other extra keys",
)


def _torch():
    try:
        import torch
    except ImportError:
        raise UsageError("export --format slime-pt writes with torch.save: pip install 'rollout-cli[torch]'") from None
    return torch


def _check_dest(dest: str, overwrite: bool) -> bool:
    """True when DEST exists and holds an earlier export (to be replaced, with overwrite). A
    DEST holding anything else is refused whatever the flags: export replaces only a folder it
    wrote, recognised by its marker and holding nothing but its files (`_foreign`)."""
    if not os.path.lexists(dest):
        return False
    if not os.path.isdir(dest):
        raise OutputError(f"{dest}: exists and is not a folder")
    names = os.listdir(dest)
    if not names:
        return False
    why = _foreign(dest, names)
    if why is not None:
        raise OutputExistsError(f"{dest}: not a folder export wrote ({why}); nothing in it is replaced: choose another DEST")
    if not overwrite:
        raise OutputExistsError(f"{dest}: holds an earlier export; pass --overwrite to replace it")
    return True


def _foreign(dest: str, names: list[str]) -> str | None:
    """Why DEST is not an export's folder (None when it is one): its marker, a regular file
    naming export's format, and otherwise only regular files named as export names them."""
    marker = os.path.join(dest, MARKER)
    try:
        st = os.lstat(marker)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 4096:
            return f"{MARKER} is not the marker export writes"
        with open(marker, "rb") as f:
            rec = orjson.loads(f.read())
    except FileNotFoundError:
        return f"no {MARKER} marker"
    except (OSError, orjson.JSONDecodeError):
        return f"{MARKER} is not the marker export writes"
    if not isinstance(rec, dict) or rec.get("format") != MARKER_FORMAT:
        return f"{MARKER} is not the marker export writes"
    for name in sorted(names):
        if name == MARKER:
            continue
        if not _FILE_NAME.fullmatch(name) or not stat.S_ISREG(os.lstat(os.path.join(dest, name)).st_mode):
            return f"it holds {name}, which export does not write"
    return None


def _read_step(o: Output, s: Step) -> pa.Table:
    """A step's rows, every shard's (read from the Parquet files), in input order."""
    tables = list(o.tables(s.step, s.split, source="parquet"))
    t = pa.concat_tables(tables) if tables else None
    if t is None or "rollout_position" not in t.schema.names or "selected_reward" not in t.schema.names:
        raise IntegrityError(f"{o.root}: shards lack the position and selected_reward columns; convert again with this version")
    return t.take(pc.sort_indices(t, [("rollout_position", "ascending")]))


def _json(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


def _pil_images(entries: list | None) -> list | None:
    """The images column's PNGs of one row as PIL images (Pillow: the `vlm` extra)."""
    if not entries:
        return None
    try:
        from PIL import Image
    except ModuleNotFoundError:
        raise UsageError("export: the output holds images, which are written back as PIL images: "
                         "pip install 'rollout-cli[vlm]'") from None
    out = []
    for e in entries:
        im = Image.open(io.BytesIO(e["bytes"]))
        im.load()
        out.append(im)
    return out


def _samples(t: pa.Table, torch) -> list[dict]:
    """The rows as Sample.to_dict() dicts, in input order."""
    c = {name: t.column(name).to_pylist() for name in t.schema.names
         if name not in ("rollout_routed_experts", "rollout_top_p_token_ids", "rollout_top_p_token_offsets",
                         "multimodal_train_inputs")}
    n = t.num_rows
    keep_text = "prompt" in c

    def int32_tensors(name: str) -> list:
        col = t.column(name).combine_chunks()
        out = []
        for i in range(n):
            v = col[i]
            out.append(None if not v.is_valid else torch.from_numpy(v.values.to_numpy().astype(np.int32, copy=True)))
        return out

    top_ids, top_off = int32_tensors("rollout_top_p_token_ids"), int32_tensors("rollout_top_p_token_offsets")
    experts = int32_tensors("rollout_routed_experts")
    removed = c.get("remove_sample") or [False] * n  # schema version 2 outputs lack the column
    versions = c.get("weight_versions") or [None] * n  # schema version 4 on
    mm = [tensors.as_torch(v, torch) for v in tensors.decode_column(t.column("multimodal_train_inputs"))]
    mm_ids = c.get("multimodal_train_input_id") or [None] * n
    images = [_pil_images(v) for v in (c.get("images") or [None] * n)]
    samples = []
    for i in range(n):
        meta: dict[str, Any] = {}
        if c["raw_reward"][i] != c["selected_reward"][i]:
            meta["raw_reward"] = c["raw_reward"][i]
        if c["round_number"][i] is not None:
            meta["round_number"] = c["round_number"][i]
        if c["source_name"][i] != "unknown":
            meta["source_name"] = c["source_name"][i]
        rexp = experts[i]
        if rexp is not None:
            rexp = rexp.reshape(c["rollout_routed_experts_shape"][i])
        s = dict(_DEFAULTS, spec_info=dict(_DEFAULTS["spec_info"]), prefix_cache_info=dict(_DEFAULTS["prefix_cache_info"]))
        s.update(
            group_index=c["group_index"][i], index=c["sample_index"][i], rollout_id=c["rollout_id"][i],
            tokens=c["tokens"][i], multimodal_train_inputs=mm[i], multimodal_train_input_id=mm_ids[i],
            multimodal_inputs=None if images[i] is None else {"images": images[i]},
            response_length=c["response_length"][i], reward=c["selected_reward"][i], loss_mask=c["loss_mask"][i],
            remove_sample=removed[i],
            rollout_log_probs=c["rollout_log_probs"][i], rollout_top_p_token_ids=top_ids[i],
            rollout_top_p_token_offsets=top_off[i], rollout_routed_experts=rexp,
            teacher_log_probs=c["teacher_log_probs"][i], status=c["status"][i], metadata=meta,
            train_metadata=_json(c["train_metadata"][i]), apply_chat_template_kwargs={},
            weight_versions=list(versions[i] or ()),
        )
        if keep_text:
            s.update(prompt=c["prompt"][i] if c["prompt"][i] is not None else "",
                     response=c["response"][i] if c["response"][i] is not None else "", label=c["label"][i])
        samples.append(s)
    return samples


def export_slime_pt(out: str, dest: str, *, steps: str | None = None, split: str | None = None,
                    overwrite: bool = False, wait: float | None = None) -> dict:
    """Write OUT's steps as slime-replayable `.pt` dumps into DEST (atomically). Returns what
    was written: per file its path, split, step, samples and bytes, and the notes on what the
    export cannot restore."""
    t0 = time.perf_counter()
    if split is not None and split not in SPLITS:
        raise UsageError(f"--split: expected train or eval, got {split!r}")
    lo, hi = parse_steps(steps)
    o = open_output(out)
    if nested(dest, out):
        raise UsageError(f"{dest}: must not contain or lie inside the output {out}")
    if wait is not None and not wait >= 0:
        raise UsageError("--wait: expected 0 or more seconds")
    torch = _torch()
    parent = os.path.dirname(os.path.abspath(dest)) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        lock = writer_lock.acquire(dest, wait=wait, command="export", path=writer_lock.sibling_lock_path(dest))
    except OSError as e:
        raise output_error(dest, e) from None
    try:
        return _export_locked(o, dest, split, lo, hi, steps, overwrite, torch, t0, lock)
    finally:
        lock.release()


def _export_locked(o: Output, dest: str, split, lo, hi, steps, overwrite: bool, torch, t0: float, lock) -> dict:
    _check_dest(dest, overwrite)  # under the lock: no other export is writing it
    out = o.root
    keep_text = bool(o.options.get("keep_text", False))
    chosen = [e for e in o.steps if (split is None or e.split == split)
              and (lo is None or e.step >= lo) and (hi is None or e.step <= hi)]
    if not chosen:
        what = f"{split} steps" if split else "steps"
        raise UsageError(f"{out}: no {what}" + (f" in --steps {steps}" if steps else ""))
    try:
        stage = stage_beside(dest, "export")
    except OSError as e:
        raise output_error(dest, e) from None
    files = []
    unrecorded = 0  # samples whose reward the framework did not record
    try:
        for e in chosen:
            name = f"{e.step}.pt" if e.split == "train" else f"eval_{e.step}.pt"
            samples = _samples(_read_step(o, e), torch)
            unrecorded += sum(s["reward"] is None for s in samples)
            path = os.path.join(stage, name)
            _save(torch, {"rollout_id": e.step, "samples": samples}, path)
            files.append({"path": name, "split": e.split, "step": e.step, "samples": len(samples),
                          "bytes": os.path.getsize(path)})
        storage.write_durable(os.path.join(stage, MARKER), orjson.dumps(
            {"format": MARKER_FORMAT, "export": "slime-pt", "tool_version": __version__}))
        fsync_dir(stage)
        lock.check()  # the lock file is still this export's: nothing else is at work on DEST
        _commit(stage, dest, overwrite)
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        raise output_error(dest, e) from None
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    lost = LOST_FIELDS if o.schema_version >= 4 else ("weight_versions", *LOST_FIELDS)  # kept from schema 4 on
    notes = [f"not kept by conversion, exported with slime's defaults: {', '.join(lost)}"]
    if unrecorded:
        notes.append(f"{unrecorded} sample(s) whose reward the framework did not record: exported with reward=None "
                     "(slime's default)")
    if not keep_text:
        notes.append("prompt, response and label were not kept (convert without --keep-text): exported empty")
    if o.options.get("reward_key"):
        notes.append(f"reward is the selected number (reward[{o.options['reward_key']!r}]): replay without --reward-key")
    return {"out": out, "dest": dest, "format": "slime-pt", "files": files, "samples": sum(f["samples"] for f in files),
            "notes": notes, "elapsed_seconds": round(time.perf_counter() - t0, 3)}


class _Sink:
    """The file torch.save writes to: storage.LocalWriter (durable at close), keeping the
    OSError of a failed write, which torch's zip writer reports only as a RuntimeError
    ("unexpected pos ...")."""

    def __init__(self, path: str):
        self._f = storage.LocalWriter(path)
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        pass  # written in whole chunks, and all of it at close

    def close(self) -> None:
        self._f.close()


def _save(torch, obj: dict, path: str) -> None:
    """torch.save(obj) into a new file at `path`, fsynced; a full disk or a refused write is the
    OSError the system gave."""
    sink = _Sink(path)
    try:
        torch.save(obj, sink)
    except RuntimeError:
        if sink.error is not None:
            raise sink.error from None
        raise
    finally:
        try:
            sink.close()
        except OSError:
            if sink.error is None:
                raise


def _commit(stage: str, dest: str, overwrite: bool) -> None:
    """Rename the staged folder to DEST; an existing DEST (with --overwrite) is moved aside
    first and removed after, so DEST is always either the old whole or the new whole."""
    try:
        swap_in(stage, dest, _check_dest(dest, overwrite))
    except OSError as e:
        raise output_error(dest, e) from None
