"""The output directory: staging, the exists check, and the atomic commit.

On a local OUT everything a run writes goes to `OUT/.staging/` first. The commit moves the
staged entries into place and writes `manifest.json` last: the manifest is the commit marker, so
readers trust `OUT/data` only when it exists. A `COMMITTING` journal makes an interrupted commit finishable.
On an object store (RemoteStaging) files are written once, in place, in a generation folder of
the run's own, and the manifest's PUT is the commit.

A run holds OUT's writer lock (output/lock.py) from before it looks at OUT until it returns, so
what it finds under `.staging/` is an interrupted run's, never a live one's. A refused run
changes nothing: `--resume` compares its options with the recorded ones before it stages
anything, and a failed `--resume` leaves the staging area as it found it.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import uuid
from contextlib import contextmanager

from ..core import storage
from ..core.errors import OutputExistsError, UsageError
from ..core.storage import fsync_dir
from ..core import layout
from ..core.layout import ENTRIES, LOCK, MANIFEST, STAGING, TREES
from . import card
from . import lock as writer_lock

JOURNAL = "COMMITTING"


def staged_path(root: str, rel: str) -> str:
    """Where `rel` goes under the staging root (its folder created when local)."""
    if storage.is_uri(root):
        return storage.join(root, rel)
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def write_json_atomic(path: str, obj) -> None:
    storage.write_durable(path, (json.dumps(obj, indent=1) + "\n").encode())


def state(out: str) -> str:
    """'absent', 'empty', 'complete' (a manifest of ours), 'interrupted' (no manifest, an
    interrupted run's staging area) or 'foreign' (anything else: `foreign_reason` says why)."""
    return _state(out)[0]


def foreign_reason(out: str) -> str | None:
    """Why OUT is no rollout-cli output (None when it is one, or absent or empty)."""
    return _state(out)[1]


def refuse_foreign(out: str) -> None:
    """OutputExistsError (exit 5) for an OUT that is not a rollout-cli output: nothing in it is
    ever replaced, with --overwrite or without (core/layout.py)."""
    why = foreign_reason(out)
    if why is not None:
        raise OutputExistsError(f"{out}: not a rollout-cli output ({why}); nothing in it is replaced: choose another OUT")


def _state(out: str) -> tuple[str, str | None]:
    if storage.is_uri(out):
        return _remote_state(out)
    if not os.path.lexists(out):
        return "absent", None
    if not os.path.isdir(out):
        return "foreign", "it exists and is not a folder"
    names = set(os.listdir(out)) - {LOCK}  # a lock file (of a live run, or left by a killed one) is ours
    if not names:
        return "empty", None
    if MANIFEST in names:
        from . import manifest as manifest_mod

        why = manifest_mod.ownership(out)
        return ("complete", None) if why is None else ("foreign", why)
    if _staged_run(out):
        return "interrupted", None
    listed = ", ".join(sorted(names)[:3]) + (", ..." if len(names) > 3 else "")
    return "foreign", f"it holds {listed} but no rollout-cli manifest or interrupted run"


def _staged_run(out: str) -> bool:
    """OUT holds a run's staging area: `.staging/`, a folder (not a link), the tool's own name,
    made before anything else a run writes (an interrupted run's, or a live one's in its first
    moments: this is asked before the lock is taken)."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(out, STAGING)).st_mode)
    except OSError:
        return False


class Staging:
    """A run's staging area under OUT/.staging/run/."""

    def __init__(self, out: str):
        self.out = out
        self.root = os.path.join(out, STAGING, "run")
        self.before: set[str] | None = None  # with --resume, the files and folders an interrupted run had staged
        self.aside: list[str] = []  # those of them set aside while this run writes

    def path(self, *parts: str) -> str:
        p = os.path.join(self.root, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def start(self, options: dict, keep: bool = False) -> None:
        """Open the staging area; with keep (--resume), an interrupted run's finished steps stay
        if it used the same options. Its other files (a step cut short, parsed parts), which no
        run reads again, are set aside under `.staging/aside/` while this run writes, so that a
        failure can put everything back as it was."""
        opt_path = os.path.join(self.root, "options.json")
        aside = os.path.join(self.out, STAGING, "aside")
        if os.path.exists(aside):  # set aside by a resume that was killed: no run's
            shutil.rmtree(aside)
        if keep and os.path.exists(opt_path):
            _refuse_changed(_read_json(opt_path), options, "the interrupted run's", "--overwrite to start over")
        elif os.path.exists(self.root):
            shutil.rmtree(self.root)
        if keep and os.path.exists(self.root):
            self.before = _entries_below(self.root)
            self.aside = _set_aside(self.root, aside)
        os.makedirs(self.root, exist_ok=True)
        if not os.path.exists(opt_path):
            write_json_atomic(opt_path, options)

    def abandon(self, keep: bool = False) -> None:
        """Drop what this run staged after a failure, so OUT is as it was before the run: with
        keep (an interruption) nothing is removed, for --resume; a resumed interrupted run's
        staging keeps what it held before this run, and only that."""
        aside = os.path.join(self.out, STAGING, "aside")
        if keep:
            shutil.rmtree(aside, ignore_errors=True)
            return
        if self.before is not None:
            try:
                _remove_added(self.root, self.before)
                for rel in self.aside:
                    os.replace(os.path.join(aside, rel), os.path.join(self.root, rel))
                shutil.rmtree(aside, ignore_errors=True)
            except OSError:
                pass  # what is left is staging a resume starts from again
            return
        shutil.rmtree(os.path.join(self.out, STAGING), ignore_errors=True)

    def commit(self, manifest: dict) -> None:
        """Stage the dataset card, move staged entries into OUT and write the manifest last
        (roll-forward safe)."""
        storage.write_durable(os.path.join(self.root, layout.CARD), card.attach(manifest))
        write_json_atomic(os.path.join(self.root, MANIFEST), manifest)
        # The journal is the whole plan of renames, decided once. Whether a step is done can be
        # read off the disk (an "aside" step when its destination exists, an "in" step when its
        # source is gone), so replaying the plan after a crash is idempotent.
        rel_root = os.path.join(STAGING, "run")
        old = os.path.join(STAGING, "old", uuid.uuid4().hex)  # never a leftover of an earlier commit
        plan = []
        if os.path.exists(os.path.join(self.out, MANIFEST)):
            plan.append(["aside", MANIFEST, os.path.join(old, MANIFEST)])
        for name in ENTRIES:
            if os.path.lexists(os.path.join(self.out, name)) and not os.path.exists(os.path.join(self.root, name + ".keep")):
                plan.append(["aside", name, os.path.join(old, name)])
            if os.path.lexists(os.path.join(self.root, name)):
                plan.append(["in", os.path.join(rel_root, name), name])
        plan.append(["in", os.path.join(rel_root, MANIFEST), MANIFEST])
        write_json_atomic(os.path.join(self.root, JOURNAL), {"plan": plan})
        finish_commit(self.out)

    def committing(self) -> bool:
        """True once the commit has begun (its journal exists): then it must be rolled forward."""
        return os.path.exists(os.path.join(self.root, JOURNAL))


def finish_commit(out: str) -> bool:
    """Complete a commit whose journal exists (after a crash too); False if none was pending."""
    root = os.path.join(out, STAGING, "run")
    journal = os.path.join(root, JOURNAL)
    if not os.path.exists(journal):
        return False
    with open(journal) as f:
        plan = json.load(f)["plan"]
    last_src, last_dst = (os.path.join(out, p) for p in plan[-1][1:])
    if os.path.lexists(last_src) or not os.path.exists(last_dst):  # else: done, only the cleanup was cut short
        for kind, src, dst in plan:
            src, dst = os.path.join(out, src), os.path.join(out, dst)
            done = os.path.lexists(dst) if kind == "aside" else not os.path.lexists(src)
            if not done and os.path.lexists(src):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.replace(src, dst)
        fsync_dir(out)
    os.remove(journal)  # first: a staging area without a journal is never replayed
    fsync_dir(root)
    shutil.rmtree(os.path.join(out, STAGING), ignore_errors=True)
    return True


def _read_json(path: str):
    with open(path) as f:
        return json.load(f)


def _refuse_changed(before: dict, options: dict, whose: str, instead: str) -> None:
    """UsageError (exit 2) naming the options that differ from the recorded ones."""
    if before != options:
        before = before if isinstance(before, dict) else {}
        changed = sorted(k for k in set(before) | set(options) if before.get(k) != options.get(k))
        raise UsageError(f"--resume: conversion options differ from {whose} ({', '.join(changed)}); use {instead}")


def _entries_below(root: str) -> set[str]:
    """Every file and folder under a local folder, relative to it."""
    found = set()
    for dirpath, dirs, names in os.walk(root):
        found.update(os.path.relpath(os.path.join(dirpath, n), root) for n in dirs + names)
    return found


def _set_aside(root: str, aside: str) -> list[str]:
    """Move the files of an interrupted run's staging that a resume does not reuse (all but its
    options, its `done/` records and the files of the steps they record) to `aside`, keeping
    their paths: the resume may write new files at those paths. Returns the moved paths."""
    keep = {"options.json"}
    done = os.path.join(root, "done")
    for name in sorted(os.listdir(done)) if os.path.isdir(done) else []:
        keep.add(os.path.join("done", name))
        try:
            shards = _read_json(os.path.join(done, name))["result"]["shards"]
            files = [p for sh in shards for p in (sh["path"], (sh.get("mmap") or {}).get("path")) if p]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if all(os.path.isfile(os.path.join(root, f)) for f in files):
            keep.update(os.path.normpath(f) for f in files)
    moved = []
    for rel in sorted(_entries_below(root)):
        src = os.path.join(root, rel)
        if rel not in keep and os.path.isfile(src) and not os.path.islink(src):
            os.makedirs(os.path.dirname(os.path.join(aside, rel)), exist_ok=True)
            os.replace(src, os.path.join(aside, rel))
            moved.append(rel)
    return moved


def _remove_added(root: str, before: set[str]) -> None:
    """Remove the files and folders under `root` that are not in `before`."""
    for dirpath, dirs, names in os.walk(root, topdown=False):
        for n in names:
            p = os.path.join(dirpath, n)
            if os.path.relpath(p, root) not in before:
                os.remove(p)
        if dirpath != root and os.path.relpath(dirpath, root) not in before:
            shutil.rmtree(dirpath, ignore_errors=True)


def check_resume(out: str, options: dict) -> None:
    """Before a --resume stages anything: its options must be those of the interrupted run (its
    staging area's) and of the committed output (its manifest's). UsageError otherwise."""
    if storage.is_uri(out):
        pointer = storage.join(out, f"{STAGING}/{RUN}")
        if storage.exists(pointer):
            _refuse_changed(json.loads(storage.read_bytes(pointer)).get("options") or {}, options,
                            "the interrupted run's", "--overwrite to start over")
    else:
        opt_path = os.path.join(out, STAGING, "run", "options.json")
        if os.path.exists(opt_path):
            _refuse_changed(_read_json(opt_path), options, "the interrupted run's", "--overwrite to start over")
        if os.path.exists(os.path.join(out, STAGING, "run", JOURNAL)):
            return  # a commit to finish: its staged manifest, made with these options, replaces OUT's
    if storage.exists(layout.manifest_path(out)):
        from . import manifest as manifest_mod

        prev = manifest_mod.read(out)
        _refuse_older_schema(out, prev)
        _refuse_changed(prev.get("options", {}), options, "the existing output's", "--overwrite to reconvert")


def _refuse_older_schema(out: str, prev: dict) -> None:
    """An output of an older schema version lacks columns (or entries): its shards are not
    mixed with new ones."""
    from ..core.schema import COLUMNS_SINCE, SCHEMA_VERSION

    if prev["schema_version"] != SCHEMA_VERSION:
        added = ", ".join([k for k, v in COLUMNS_SINCE.items() if v > prev["schema_version"]]
                          + [k for k, v in layout.ENTRIES_SINCE.items() if v > prev["schema_version"]])
        raise UsageError(f"--resume: {out} was written with schema version {prev['schema_version']} (without {added}); "
                         f"this version writes {SCHEMA_VERSION} and does not mix the two in one output: "
                         "use --overwrite to reconvert")


def lock_output(out: str, wait: float | None = None, command: str = "convert"):
    """Refuse an OUT that is not a rollout-cli output (exit 5, before anything, a lock or a
    lease, is written into it), create a local one when absent, and take its writer lock (exit
    8 while another process holds it, or wait up to `wait` seconds). Returns (the held lock,
    whether OUT was created)."""
    created = False
    refuse_foreign(out)
    if not storage.is_uri(out):
        created = state(out) == "absent"
        os.makedirs(out, exist_ok=True)
    try:
        return writer_lock.acquire(out, wait=wait, command=command), created
    except BaseException:
        if created:
            remove_if_empty(out)
        raise


@contextmanager
def writer(out: str, wait: float | None = None, on_error=None):
    """lock_output() as a context: the lock is held inside, released after, and a local OUT the
    run created is removed again when the run left nothing in it. `on_error` turns an OSError
    met while taking the lock into the error to raise."""
    try:
        lock, created = lock_output(out, wait)
    except OSError as e:
        if on_error is None:
            raise
        raise on_error(e) from None
    try:
        yield lock
    finally:
        lock.release()
        if created:
            remove_if_empty(out)


def remove_if_empty(out: str) -> None:
    """Remove a local OUT this run created, once its lock is released, if nothing is in it."""
    try:
        os.rmdir(out)
    except OSError:
        pass


RUN = "run.json"  # OUT/.staging/run.json on an object store: the run in flight's generation and options


class RemoteStaging:
    """A run on an object store (a pyarrow filesystem URI). There is no rename, so nothing is
    staged and copied: every file is written once, under a generation folder of this run's own
    (`OUT/gen/<id>/`, core/layout.py) that no committed manifest names, so the live dataset is
    never touched. The commit is the one PUT of manifest.json (atomic on S3), which names the
    new generation's files; then what no manifest lists any more is deleted. A crash before
    the PUT leaves the old dataset, one after it the new one (with leftovers the next commit
    removes)."""

    def __init__(self, out: str, generation: str):
        self.out = out
        self.generation = generation
        self.root = storage.join(out, layout.generation_dir(generation))
        self.committed = False
        self.before: set[str] | None = None  # a resumed interrupted run's files

    def path(self, *parts: str) -> str:
        return storage.join(self.root, "/".join(parts))

    @classmethod
    def start(cls, out: str, options: dict, keep: bool = False) -> "RemoteStaging":
        """Open a run: a fresh generation, or with keep (--resume) the interrupted run's when it
        used the same options (never one a committed manifest names)."""
        pointer = storage.join(out, f"{STAGING}/{RUN}")
        live = _live_generations(out)
        if keep and storage.exists(pointer):
            before = json.loads(storage.read_bytes(pointer))
            _refuse_changed(before.get("options") or {}, options, "the interrupted run's", "--overwrite to start over")
            if layout.is_generation(before.get("generation")) and before["generation"] not in live:
                run = cls(out, before["generation"])
                run.before = set(storage.files_under(run.root))  # an interrupted run's: kept after a failure
                return run
        run = cls(out, uuid.uuid4().hex)
        storage.write_bytes(pointer, json.dumps({"generation": run.generation, "options": options}).encode())
        return run

    def abandon(self, keep: bool = False) -> None:
        """Drop this run's files after a failure (not once its manifest is in place); a resumed
        interrupted run's generation keeps what it held before this run."""
        if keep or self.committed:
            return
        try:
            before = getattr(self, "before", None)
            if before is not None:
                for rel in set(storage.files_under(self.root)) - before:
                    storage.delete_file(storage.join(self.root, rel))
                return
            storage.delete(self.root)
            storage.delete(storage.join(self.out, STAGING))
        except OSError:
            pass  # what is left is no dataset's, and the next commit removes it

    def committing(self) -> bool:
        return False

    def commit(self, manifest: dict) -> None:
        """PUT the manifest (the commit point), then the dataset card naming its files, then
        remove what it does not list. The card follows the manifest: until its PUT, the card in
        place names the previous dataset's files, which stay until remove_unlisted."""
        data = card.attach(manifest)
        storage.write_bytes(storage.join(self.out, MANIFEST), (json.dumps(manifest, indent=1) + "\n").encode())
        self.committed = True
        storage.write_bytes(storage.join(self.out, layout.CARD), data)
        try:
            remove_unlisted(self.out, manifest)
        except OSError:
            pass  # leftovers only: readers follow the manifest, and the next commit removes them


def listed_files(manifest: dict) -> set[str]:
    """Every file a manifest names (shards, their IPC copies, rejects, the card), relative to OUT."""
    names = set()
    for s in manifest.get("steps") or []:
        for sh in s.get("shards") or []:
            names.add(sh["path"])
            if sh.get("mmap"):
                names.add(sh["mmap"]["path"])
    for key in ("rejects", "card"):
        if manifest.get(key):
            names.add(manifest[key]["path"])
    return names


def _live_generations(out: str) -> set[str]:
    """The generations the committed manifest at OUT names (none when there is none)."""
    try:
        m = json.loads(storage.read_bytes(storage.join(out, MANIFEST)))
        named = {layout.split_generation(p)[0] for p in listed_files(m)} | {m.get("generation")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()
    return {g for g in named if layout.is_generation(g)}


def remove_unlisted(out: str, manifest: dict) -> None:
    """Delete, under an object-store OUT, what `manifest` does not list: the previous dataset's
    files (its generation, or the top-level trees of outputs written before generations) and
    those of interrupted runs, then the staging pointer. A tree or generation with nothing
    listed goes in one call."""
    keep = listed_files(manifest)
    if layout.REJECTS not in keep and storage.exists(storage.join(out, layout.REJECTS)):
        storage.delete_file(storage.join(out, layout.REJECTS))
    gens = storage.files_under(storage.join(out, layout.GENERATIONS))
    trees = [t for t in TREES] + sorted({f"{layout.GENERATIONS}/{rel.split('/', 1)[0]}" for rel in gens})
    for top in trees:
        base = storage.join(out, top)
        files = storage.files_under(base)
        if not any(f"{top}/{rel}" in keep for rel in files):
            storage.delete(base)
            continue
        for rel in sorted(files):
            if f"{top}/{rel}" not in keep:
                storage.delete_file(storage.join(base, rel))
    storage.delete(storage.join(out, STAGING))


def _remote_state(out: str) -> tuple[str, str | None]:
    """_state on an object store: an interrupted run is one whose pointer (`.staging/run.json`,
    written before any of its files) is there."""
    if storage.exists(storage.join(out, MANIFEST)):
        from . import manifest as manifest_mod

        why = manifest_mod.ownership(out)
        return ("complete", None) if why is None else ("foreign", why)
    if storage.exists(storage.join(out, f"{STAGING}/{RUN}")):
        return "interrupted", None
    found = [n for n in (*ENTRIES, STAGING, layout.GENERATIONS) if storage.exists(storage.join(out, n))]
    if found:
        return "foreign", f"it holds {', '.join(found)} but no rollout-cli manifest or interrupted run"
    return "empty", None


def prepare(out: str, *, overwrite: bool = False, resume: bool = False, options: dict | None = None) -> Staging:
    """Check OUT may be written and open a staging area (the caller holds OUT's writer lock):
    every refusal comes before anything is written."""
    if storage.is_uri(out):
        refuse_foreign(out)
        st = state(out)
        if st != "empty" and not (overwrite or resume):
            what = "holds a converted dataset (manifest.json)" if st == "complete" else "holds an interrupted run"
            raise OutputExistsError(f"{out}: {what}; pass --overwrite to replace it or --resume to continue it")
        if resume:
            check_resume(out, options or {})
        return RemoteStaging.start(out, options or {}, keep=resume)  # type: ignore[return-value]
    refuse_foreign(out)
    st = state(out)
    if st in ("complete", "interrupted") and not (overwrite or resume):
        what = "holds a converted dataset (manifest.json)" if st == "complete" else "holds an interrupted run"
        raise OutputExistsError(f"{out}: {what}; pass --overwrite to replace it or --resume to continue it")
    if resume:
        check_resume(out, options or {})
        finish_commit(out)
    os.makedirs(out, exist_ok=True)
    staging = Staging(out)
    staging.start(options or {}, keep=resume)
    return staging


def nested(a: str, b: str) -> bool:
    """Whether local paths `a` and `b` (links resolved) are one folder or one holds the other."""
    a, b = os.path.realpath(a), os.path.realpath(b)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep) or b.startswith(a.rstrip(os.sep) + os.sep)


def stage_beside(dest: str, tag: str) -> str:
    """A new empty folder beside DEST (`.DEST.TAG-*`) to stage a whole folder in before
    `swap_in`, with the mode a plain mkdir gives (mkdtemp's folder is private)."""
    parent = os.path.dirname(os.path.abspath(dest)) or "."
    stage = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(dest))}.{tag}-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(stage, 0o777 & ~umask)
    return stage


def swap_in(stage: str, dest: str, replace: bool) -> None:
    """Rename a finished staged folder to DEST (a local path beside it). With `replace`, the
    DEST there is moved aside first and removed after, so DEST is always the old whole or the
    new whole; else an empty DEST folder is replaced."""
    dest = os.path.abspath(dest)
    if replace and os.path.lexists(dest):
        aside = os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.old-{uuid.uuid4().hex[:8]}")
        os.rename(dest, aside)
        os.rename(stage, dest)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        if os.path.isdir(dest) and not os.path.islink(dest):
            os.rmdir(dest)
        os.rename(stage, dest)
    fsync_dir(os.path.dirname(dest))
