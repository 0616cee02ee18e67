"""The files a manifest lists: present, of the recorded size and checksum, readable, of the
train schema; a Parquet shard read one row group at a time (its rows to rows.py) and compared
with its Arrow IPC copy, whose own rows are counted."""
from __future__ import annotations

from ..core import storage
from ..core.errors import IntegrityError
from ..core.hashing import digest_of
from ..output.files import check_arrow, check_regular
from .common import Report, open_file
from .rows import ShardTally, StepState, check_rows


def check_bytes(rel: str, full: str, entry: dict, rep: Report) -> bool:
    """Presence, size and (full mode) checksum; True when the bytes are the recorded ones."""
    want_bytes = entry["bytes"]
    algorithm, want = digest_of(entry)
    rep.files.append(rel)
    if storage.is_uri(full):  # one HEAD for presence and size
        from pyarrow import fs as pafs

        info = storage.file_info(full)
        is_file, present, size = info.type == pafs.FileType.File, info.type != pafs.FileType.NotFound, info.size
    else:  # lstat first: nothing that is not a regular file inside OUT is opened
        try:
            size, is_file, present = check_regular(full, rep.out).st_size, True, True
        except IntegrityError as e:
            reason = e.failures[0]["reason"] if e.failures else str(e)
            if reason == "missing":
                is_file, present = False, False
            else:
                rep.fail(rel, "file_present", f"listed in the manifest but {_words(e, full)}")
                return False
    if not is_file:
        rep.fail(rel, "file_present", "listed in the manifest but missing" if not present else "listed in the manifest but not a regular file")
        return False
    rep.bytes += size
    if size != want_bytes:
        rep.fail(rel, "size", f"{size} bytes, the manifest records {want_bytes}")
        return False
    if rep.quick:
        return True
    try:
        got = storage.file_digest(full, algorithm)
    except OSError as e:
        rep.fail(rel, "readable", f"cannot read: {e}")
        return False
    rep.hashed += size
    if got != want:
        rep.fail(rel, "checksum", f"{algorithm} {got}, the manifest records {want}: the file changed since conversion")
        return False
    return True


def _words(e: IntegrityError, full: str) -> str:
    """check_regular's refusal without the path it starts with."""
    msg = str(e)
    return msg[len(full) + 2:] if msg.startswith(full + ": ") else msg


def check_schema(rel: str, schema, expected, rep: Report) -> bool:
    try:
        return _check_schema(rel, schema, expected, rep)
    except (UnicodeDecodeError, ValueError) as e:  # a garbled footer names no column
        rep.fail(rel, "readable", f"malformed Arrow schema: {e}")
        return False


def _check_schema(rel: str, schema, expected, rep: Report) -> bool:
    ok = True
    if not schema.equals(expected, check_metadata=False):
        got = {f.name: f for f in schema}
        diffs = []
        for f in expected:
            g = got.pop(f.name, None)
            if g is None:
                diffs.append(f"missing column {f.name}")
            elif not (g.type.equals(f.type) and g.nullable == f.nullable):
                diffs.append(f"{f.name}: {g.type}{'' if g.nullable else ' not null'}, expected {f.type}{'' if f.nullable else ' not null'}")
        diffs.extend(f"unexpected column {n}" for n in got)
        if not diffs:
            diffs.append("column order differs from the train schema")
        rep.fail(rel, "schema", "; ".join(diffs[:6]) + (f"; ... {len(diffs) - 6} more" if len(diffs) > 6 else ""))
        ok = False
    md = schema.metadata or {}
    v = md.get(b"rollout_cli.schema_version")
    want = expected.metadata[b"rollout_cli.schema_version"]  # the manifest's
    if v != want:
        rep.fail(rel, "schema_version", f"rollout_cli.schema_version {v.decode(errors='replace') if v else None!r} in the schema metadata, "
                                        f"expected {want.decode()} (the manifest's)")
        ok = False
    return ok


def check_parquet_shard(rel: str, full: str, sh: dict, step: int, shard_no: int, expected, rep: Report, st: StepState,
                         mm_full: str | None, mm_ok: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(open_file(full, mapped=False))  # read with pread, as a row group at a time needs
        schema = pf.schema_arrow
    except IntegrityError as e:  # replaced since its size was checked: not a regular file now
        rep.fail(rel, "file_present", f"listed in the manifest but {_words(e, full)}")
        st.complete = False
        return
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"not a readable Parquet file: {e}")
        st.complete = False
        return
    if not check_schema(rel, schema, expected, rep):
        st.complete = False
        return
    if pf.metadata.num_rows != sh["rows"]:
        rep.fail(rel, "rows", f"{pf.metadata.num_rows} rows in the footer, the manifest records {sh['rows']}")
    if rep.quick:
        rep.rows += pf.metadata.num_rows
        st.complete = False
        return
    mm_table = None
    if mm_full is not None and mm_ok:
        try:
            mm_table = pa.ipc.open_file(open_file(mm_full)).read_all()
            mm_table.validate(full=True)  # checked by check_ipc; again, as this is another read of it
        except (OSError, pa.ArrowException, IntegrityError):
            mm_table = None  # reported by the IPC check
    mm_rel = sh["mmap"]["path"] if sh.get("mmap") else None
    tally = ShardTally()
    first = 0
    mm_mismatch = None
    try:
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g)
            if not _structure(rel, full, [t], rep):
                st.complete = False
                return
            check_rows(t, first, step, shard_no, tally, st)
            if mm_table is not None and mm_mismatch is None:
                other = mm_table.slice(first, t.num_rows)
                if other.num_rows != t.num_rows or not other.equals(t.cast(other.schema) if not t.schema.equals(other.schema) else t):
                    mm_mismatch = f"rows {first}..{first + t.num_rows - 1} differ from the Parquet shard {rel}"
            first += t.num_rows
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"cannot read row group near row {first}: {e}")
        st.complete = False
        return
    if mm_table is not None and mm_mismatch is None and mm_table.num_rows != first:
        mm_mismatch = f"{mm_table.num_rows} rows, the Parquet shard {rel} has {first}"
    if mm_mismatch:
        rep.fail(mm_rel, "mmap_content", mm_mismatch)
    rep.rows += tally.rows
    st.row_problems |= bool(tally.problems)
    for inv, (count, examples) in tally.problems.items():
        rep.fail(rel, inv, f"{count} row(s): " + "; ".join(examples) + ("; ..." if count > len(examples) else ""))
    if tally.problems.get("not_null"):
        st.complete = False
        return
    if tally.rows != sh["rows"]:
        rep.fail(rel, "rows", f"{tally.rows} rows, the manifest records {sh['rows']}")
    if tally.tokens != sh["tokens"]:
        rep.fail(rel, "tokens", f"{tally.tokens} tokens, the manifest records {sh['tokens']}")
    if len(tally.ids) != sh["rollouts"]:
        rep.fail(rel, "rollouts", f"{len(tally.ids)} rollouts, the manifest records {sh['rollouts']}")


def _structure(rel: str, full: str, parts, rep: Report) -> bool:
    """Each table or batch read holds together (output/files.check_arrow), before anything
    reads through its offsets; else the `structure` failure."""
    for p in parts:
        try:
            check_arrow(full, p, None)
        except IntegrityError as e:
            rep.fail(rel, "structure", _words(e, full))
            return False
    return True


def check_ipc(rel: str, full: str, sh: dict, expected, rep: Report) -> bool:
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(open_file(full))
        schema = reader.schema
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    except IntegrityError as e:
        rep.fail(rel, "file_present", f"listed in the manifest but {_words(e, full)}")
        return False
    except (OSError, pa.ArrowException) as e:
        rep.fail(rel, "readable", f"not a readable Arrow IPC file: {e}")
        return False
    ok = check_schema(rel, schema, expected, rep)
    if not ok or not _structure(rel, full, batches, rep):
        return False
    rows = sum(b.num_rows for b in batches)
    if rows != sh["rows"]:
        rep.fail(rel, "rows", f"{rows} rows, the manifest records {sh['rows']}")
        ok = False
    return ok
