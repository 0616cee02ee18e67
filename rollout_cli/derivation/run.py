"""`derive(out, dest, as_=...)`: SFT, DPO, KTO or reward-model rows from a converted output,
written as a folder `datasets.load_dataset(DEST)` reads with no other argument.

The output is read one step at a time (prompt groups never span steps), so memory is bounded by
one step. DEST is written to a staging folder beside it under DEST's writer lock
(`.DEST.lock`, output/lock.py) and renamed into place whole (output/commit.py): nothing partial
looks complete. `provenance.json` marks the folder as derive's: `overwrite` replaces only such a
folder. Nothing in DEST holds a time or a path, so a rerun gives the same bytes."""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core import hashing, storage
from ..core.errors import InvalidInputError, OutputExistsError, UsageError, output_error
from ..core.storage import fsync_dir
from ..core.versions import __version__
from ..inputs.discover import parse_steps
from ..output import card
from ..output import lock as writer_lock
from ..output.commit import nested, stage_beside, swap_in, write_json_atomic
from ..output.manifest import ManifestError
from ..output.model import Output, open_output
from . import rows as rows_mod
from .options import DeriveOptions
from . import rules

FORMAT = "rollout-cli.derive"
PROVENANCE = "provenance.json"
CARD = "README.md"
DATA = "data"
SPLITS = ("train", "test")
_PARQUET = dict(compression="zstd", compression_level=3, write_statistics=False, use_dictionary=False)


@dataclass(frozen=True)
class DerivedFile:
    """One file derive wrote: its path below DEST, split, rows, size and BLAKE3 digest."""

    path: str
    split: str
    rows: int
    bytes: int
    blake3: str

    def to_dict(self) -> dict:
        return {"path": self.path, "split": self.split, "rows": self.rows, "bytes": self.bytes, "blake3": self.blake3}


@dataclass(frozen=True)
class DeriveResult:
    """What derive wrote: the files, rows per split and the counts of provenance.json."""

    out: str
    dest: str
    as_: str
    rows: dict[str, int]
    files: tuple[DerivedFile, ...]
    counts: dict[str, Any]
    elapsed_seconds: float = field(compare=False)

    def to_dict(self) -> dict:
        """The `--json` object."""
        return {"out": self.out, "dest": self.dest, "as": self.as_, "rows": dict(self.rows),
                "files": [f.to_dict() for f in self.files], "counts": self.counts, "elapsed_seconds": self.elapsed_seconds}


def derive(out: str, dest: str, as_: str = "sft", **options) -> DeriveResult:
    """Derive `as_` rows (sft, dpo, kto or rm) from the converted output `out` into the folder
    `dest` (options: the fields of DeriveOptions). Raises UsageError (2) for bad options,
    InvalidInputError (3) when `out` is no converted output (DEST then untouched),
    OutputExistsError (5) for a DEST that exists (unless `overwrite` and derive wrote it)."""
    t0 = time.perf_counter()
    opts = DeriveOptions(as_=as_, **options)
    opts.check()
    if storage.is_uri(dest):
        raise UsageError(f"{dest}: DEST must be a local folder")
    lo, hi = parse_steps(opts.steps)
    try:
        o = open_output(out)
    except ManifestError as e:
        raise InvalidInputError(f"{out}: not a converted output ({e})") from None
    steps = [s for s in o.steps_of(opts.split) if (lo is None or s.step >= lo) and (hi is None or s.step <= hi)]
    if not steps:
        raise UsageError(f"{out}: no {opts.split} steps" + (f" in --steps {opts.steps}" if opts.steps else ""))
    if not storage.is_uri(out) and nested(dest, out):
        raise UsageError(f"{dest}: must not contain or lie inside the output {out}")
    tok = None
    if opts.tokenizer and not o.options.get("keep_text"):
        from ..text import tokenizer as tokenizer_mod

        tok = tokenizer_mod.load(opts.tokenizer)
    parent = os.path.dirname(os.path.abspath(dest)) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        lock = writer_lock.acquire(dest, wait=opts.wait, command="derive", path=writer_lock.sibling_lock_path(dest))
    except OSError as e:
        raise output_error(dest, e) from None
    try:
        replace = _check_dest(dest, opts.overwrite)
        files, counts = _write(o, steps, dest, opts, tok, lock, replace)
    finally:
        lock.release()
    rows = {f.split: f.rows for f in files}
    return DeriveResult(out=os.fspath(out), dest=os.fspath(dest), as_=opts.as_, rows=rows, files=tuple(files),
                        counts=counts, elapsed_seconds=round(time.perf_counter() - t0, 3))


def is_derived(dest: str) -> str | None:
    """Why DEST is not a folder derive wrote (None when it is): its provenance.json, a regular
    file naming derive's format."""
    p = os.path.join(dest, PROVENANCE)
    try:
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode) or st.st_size > 1 << 20:
            return f"{PROVENANCE} is not one derive writes"
        with open(p, "rb") as f:
            rec = json.loads(f.read())
    except FileNotFoundError:
        return f"no {PROVENANCE}"
    except (OSError, ValueError):
        return f"{PROVENANCE} is not one derive writes"
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        return f"{PROVENANCE} is not one derive writes"
    return None


def _check_dest(dest: str, overwrite: bool) -> bool:
    """True when DEST exists and is to be replaced; OutputExistsError (exit 5) when it exists
    and is no folder derive wrote, or without `overwrite`."""
    if not os.path.lexists(dest):
        return False
    if not os.path.isdir(dest) or os.path.islink(dest):
        raise OutputExistsError(f"{dest}: exists and is not a folder; nothing is replaced: choose another DEST")
    if not os.listdir(dest):
        return False
    why = is_derived(dest)
    if why is not None:
        raise OutputExistsError(f"{dest}: not a folder derive wrote ({why}); nothing in it is replaced: choose another DEST")
    if not overwrite:
        raise OutputExistsError(f"{dest}: holds rows derive wrote; pass --overwrite to replace them")
    return True


def _columns(o: Output) -> list[str]:
    """The columns derive reads: the rules', the rows' and the text's, those the output has."""
    want = set(rules.NEEDED) | set(rows_mod.PROVENANCE) | {"token_exact", "prompt", "response", "images"}
    return [n for n in o.schema.names if n in want]


def _step_table(o: Output, s) -> pa.Table:
    tables = list(o.tables(s.step, s.split, source="parquet", columns=_columns(o)))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def select_step(t: pa.Table, opts: DeriveOptions, counts: rules.Counts | None = None,
                text: rows_mod.Text | None = None) -> pa.Table:
    """One step's rows (`t`, as the output holds them) as the rows `opts` derives, counted in
    `counts` when given; text columns as `text` says (none by default). Writes nothing."""
    counts = rules.Counts() if counts is None else counts
    text = rows_mod.Text(False) if text is None else text
    cand = rules.ranked(rules.count_skips(rules.rollouts(t), counts))
    if opts.dedupe and cand.num_rows:
        cand = rules.dedupe(t, cand, counts)
    if opts.paired:
        pairs = rules.pairs(t, cand, counts, min_margin=opts.min_margin, every=opts.pairs == "all")
        at = {rid: i for i, rid in enumerate(t["rollout_id"].to_pylist())}  # one-sample rollouts: one row each
        chosen = t.take(pa.array([at[p[2]] for p in pairs], pa.int64()))
        rejected = t.take(pa.array([at[p[3]] for p in pairs], pa.int64()))
        return rows_mod.pair_rows(chosen, rejected, text)
    if opts.as_ == "sft":
        chosen = rules.select_rollouts(cand, counts, select=opts.select, min_reward=opts.min_reward,
                                       max_per_group=opts.max_rows_per_group)
    else:  # kto, pointwise rm: every candidate (KTO labels by --min-reward)
        chosen = rules.select_rollouts(cand, counts, select="all")
    picked = t.filter(pc.is_in(t["rollout_id"], chosen["rollout_id"].combine_chunks()))
    picked = picked.take(pc.sort_indices(picked, [("rollout_position", "ascending")]))
    return rows_mod.samples(picked, text, opts.as_, min_reward=opts.min_reward)


def _split_mask(t: pa.Table, fraction: float) -> pa.Array:
    groups = {}
    flags = [groups.setdefault((s, g), rules.in_test(s, g, fraction))
             for s, g in zip(t["step"].to_pylist(), t["group_index"].to_pylist())]
    return pa.array(flags, pa.bool_())


def _write(o: Output, steps, dest: str, opts: DeriveOptions, tok, lock, replace: bool):
    try:
        stage = stage_beside(dest, "derive")
        os.makedirs(os.path.join(stage, DATA))
    except OSError as e:
        raise output_error(dest, e) from None
    text = rows_mod.Text(bool(o.options.get("keep_text", False)), tok)
    counts = rules.Counts()
    writers: dict[str, pq.ParquetWriter] = {}
    nrows = {s: 0 for s in SPLITS}
    schema = None
    try:
        for s in steps:
            derived = select_step(_step_table(o, s), opts, counts, text)
            if derived.num_rows == 0:
                continue
            if schema is None:
                schema = derived.schema
            derived = derived.cast(schema)
            test = _split_mask(derived, opts.test_fraction)
            for split, part in (("train", derived.filter(pc.invert(test))), ("test", derived.filter(test))):
                if part.num_rows:
                    if split not in writers:
                        writers[split] = pq.ParquetWriter(os.path.join(stage, DATA, f"{split}.tmp"), schema, **_PARQUET)
                    writers[split].write_table(part)
                    nrows[split] += part.num_rows
        if not writers:  # `datasets` loads no folder without a row: say why there is none
            c = counts.to_dict()
            why = "; ".join(f"{n} {r}" for r, n in {**c["skipped"], **c["not_selected"]}.items()) or "no rollouts"
            raise UsageError(f"{o.root}: no rows to derive with these options ({c['rollouts']} rollouts, "
                             f"{c['candidates']} candidates: {why}); nothing written")
        files = []
        for split in SPLITS:
            if split not in writers:
                continue
            writers.pop(split).close()
            name = f"{DATA}/{split}-00000-of-00001.parquet"
            os.replace(os.path.join(stage, DATA, f"{split}.tmp"), os.path.join(stage, name))
            path = os.path.join(stage, name)
            files.append(DerivedFile(name, split, nrows[split], os.path.getsize(path), hashing.file_digest(path)))
        counted = counts.to_dict()
        counted["rows"] = {f.split: f.rows for f in files}
        data = card.render({f.split: [f.path] for f in files}, title=f"rollout-cli derived {_what(opts)} data",
                           body=_body(opts, counted), features=[(f.name, str(f.type)) for f in schema],
                           schema=schema)
        storage.write_durable(os.path.join(stage, CARD), data)
        prov = {"format": FORMAT, "tool_version": __version__,
                "source": {"manifest_blake3": hashing.bytes_digest(storage.read_bytes(o.manifest_path)),
                           "schema_version": o.schema_version, "keep_text": bool(o.options.get("keep_text", False)),
                           "tokenizer_blake3": tok.digest if tok is not None else None},
                "options": opts.record(), "counts": counted, "files": [f.to_dict() for f in files]}
        write_json_atomic(os.path.join(stage, PROVENANCE), prov)
        fsync_dir(os.path.join(stage, DATA))
        fsync_dir(stage)
        lock.check()
        swap_in(stage, dest, replace)
    except OSError as e:
        _drop(stage, writers)
        raise output_error(dest, e) from None
    except BaseException:
        _drop(stage, writers)
        raise
    return files, counted


def _drop(stage: str, writers: dict) -> None:
    for w in writers.values():
        try:
            w.close()
        except Exception:
            pass
    shutil.rmtree(stage, ignore_errors=True)


def _what(opts: DeriveOptions) -> str:
    return {"sft": "SFT", "dpo": "preference (DPO)", "kto": "KTO",
            "rm": "reward-model " + ("(pointwise)" if opts.pointwise else "(preference)")}[opts.as_]


def _body(opts: DeriveOptions, counts: dict) -> str:
    rows = ", ".join(f"{n} {split} rows" for split, n in counts["rows"].items())
    return (f"Rows derived by `rollout-cli derive --as {opts.as_}` from a converted output's {opts.split} steps: "
            f"{rows}, from {counts['candidates']} candidate rollouts of {counts['rollouts']}. "
            "`provenance.json` records the source output's manifest digest, the options and what was kept "
            "and skipped, and why; every row names its step, prompt group, rollout and sample.\n\n"
            "```python\nimport datasets\nds = datasets.load_dataset(\"path/to/this/folder\")\n```")
