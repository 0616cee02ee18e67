"""Files no manifest lists: anything under OUT's data/, eval/ and mmap/ trees (and those of the
manifest's generation) is a failure; other generations, a leftover staging area and foreign
files at the top of OUT are notes."""
from __future__ import annotations

import os

from ..core import layout, storage
from ..core.layout import CARD, MANIFEST, REJECTS, STAGING, TREES
from .common import Report


def check_strays(out: str, m: dict, rep: Report) -> None:
    expected = set()
    for s in m["steps"]:
        for sh in s["shards"]:
            expected.add(sh["path"])
            if sh.get("mmap"):
                expected.add(sh["mmap"]["path"])
    generation = m.get("generation")
    tops = [*TREES, *(f"{layout.generation_dir(generation)}/{t}" for t in TREES if generation)]
    if storage.is_uri(out):
        _stray_objects(out, expected, tops, generation, rep, bool(m.get("card")))
        return
    for top in tops:
        root = os.path.join(out, top)
        if not os.path.lexists(root):
            continue
        if not os.path.isdir(root) or os.path.islink(root):
            rep.fail(top, "unexpected_file", "expected a directory")
            continue
        for dirpath, dirs, names in os.walk(root):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, out).replace(os.sep, "/")
            for d in dirs:
                if os.path.islink(os.path.join(dirpath, d)):
                    rep.fail(f"{rel_dir}/{d}", "unexpected_file", "a symbolic link, not listed in the manifest")
            for name in sorted(names):
                rel = f"{rel_dir}/{name}"
                if rel not in expected:
                    rep.fail(rel, "unexpected_file", "not listed in the manifest (a leftover, or added after conversion)")
    for name in sorted(os.listdir(out)):
        if name not in (MANIFEST, REJECTS, STAGING, layout.GENERATIONS) + TREES and not (name == CARD and m.get("card")):
            rep.notes.append(f"{name}: not part of a rollout-cli output (ignored)")
    gens = os.path.join(out, layout.GENERATIONS)
    for g in sorted(os.listdir(gens)) if os.path.isdir(gens) else []:
        _other_generation(g, generation, expected, rep)
    if os.path.isdir(os.path.join(out, STAGING)):
        rep.notes.append(".staging: leftover staging area of a finished commit (ignored; a rerun removes it)")


def _other_generation(g: str, generation: str | None, expected: set[str], rep: Report) -> None:
    if g != generation and not any(p.startswith(f"{layout.GENERATIONS}/{g}/") for p in expected):
        rep.notes.append(f"{layout.GENERATIONS}/{g}: files of an earlier dataset or an interrupted run, not listed "
                         "in the manifest (ignored; the next commit removes them)")


def _stray_objects(out: str, expected: set[str], tops: list[str], generation: str | None, rep: Report, card: bool) -> None:
    """check_strays on an object store: one listing of OUT."""
    files = storage.files_under(out)
    seen_tops: set[str] = set()
    for rel in sorted(files):
        if any(rel.startswith(t + "/") for t in tops):
            if rel not in expected:
                rep.fail(rel, "unexpected_file", "not listed in the manifest (a leftover, or added after conversion)")
            continue
        top = rel.split("/", 1)[0]
        if top == layout.GENERATIONS:
            g = rel.split("/")[1] if rel.count("/") >= 1 else ""
            if f"{top}/{g}" not in seen_tops:
                seen_tops.add(f"{top}/{g}")
                _other_generation(g, generation, expected, rep)
        elif top not in seen_tops and top not in (MANIFEST, REJECTS) + TREES and not (top == CARD and card):
            seen_tops.add(top)
            rep.notes.append(".staging: leftover staging area of a finished commit (ignored; a rerun removes it)" if top == STAGING
                             else f"{top}: not part of a rollout-cli output (ignored)")
