"""prime-rl's episode traces: `rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl`.

Each line is one verifiers v1 episode (`Episode.to_record()`, PrimeIntellect-ai/verifiers@a60a606e:
verifiers/v1/episode.py:149-155): an id, a group id, and per agent a trace whose message graph
stores each message's token delta. A sample is what prime-rl's trainer derives from a trace
(PrimeIntellect-ai/prime-rl@559b4477:src/prime_rl/orchestrator/trajectories.py:69-160): one per
root-to-leaf branch of each trainable trace that has sampled tokens, a sampled node shared by
several branches trained only in the first. docs/frameworks.md (prime-rl) has the field mapping.

`claims`, `step_and_split` and `skip_note` run in the converting process: they import no numpy.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Iterator

from ...core import storage
from ..unmapped import Bad, kind as _kind

NAME = "prime_rl"
SUBSETS = ("effective", "all")  # the first is the default (core/options.py)
_PATH = re.compile(r"(?:^|/)step_(\d+)/(train|eval)/(all|effective)/traces\.jsonl(?:\.gz|\.zst)?$")
_HEAD = re.compile(rb'\s*\{"id":"[^"\\]*","env":\{')  # Episode's first two fields, in declaration order
_STEP_DIR = re.compile(r"step_\d+$")
# verifiers/v1/trace.py:492-504 (Trace.is_truncated)
_LIMITS = frozenset({"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length"})
_INT32_MAX = 2**31 - 1


def _posix(path: str) -> str:
    return path.replace(os.sep, "/") if os.sep != "/" else path


def claims(path: str) -> bool:
    """A prime-rl traces file, by its path or (any local JSONL) its first bytes; or another file
    of a prime-rl run folder that looks like an input, claimed so that `skip_note` leaves it out."""
    if path == "-":
        return False
    if _PATH.search(_posix(path)) or _companion(path):
        return True
    if storage.is_uri(path) or not path.lower().endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")):
        return False
    from ..jsonl.reader import open_binary

    try:
        with open_binary(path) as f:
            head = f.read(256)
    except Exception:  # unreadable here: the reader of its extension reports it
        return False
    return bool(_HEAD.match(head))


def step_and_split(path: str) -> tuple[int, str] | None:
    """(step, split) from `.../step_{N}/{train,eval}/{all,effective}/traces.jsonl`."""
    m = _PATH.search(_posix(path))
    return (int(m.group(1)), m.group(2)) if m else None


def subset(path: str) -> str | None:
    """`all` or `effective` for a traces file at prime-rl's path, else None."""
    m = _PATH.search(_posix(path))
    return m.group(3) if m else None


def _run_root(folder: str) -> str | None:
    """The prime-rl run folder that `folder` is in or under: the nearest one holding
    `rollouts/step_{N}/` (checked up to five levels up)."""
    here = os.path.abspath(folder)
    for _ in range(6):
        rollouts = os.path.join(here, "rollouts")
        if os.path.isdir(rollouts):
            try:
                if any(_STEP_DIR.match(e) for e in os.listdir(rollouts)):
                    return here
            except OSError:
                pass
        up = os.path.dirname(here)
        if up == here:
            break
        here = up
    return None


def _companion(path: str) -> str | None:
    """What a file that looks like an input is, when it belongs to a prime-rl run folder outside
    `rollouts/` (the metrics log, a checkpoint's .pt, a token export), else None."""
    from ..registry import extension_format

    if storage.is_uri(path) or extension_format(path) is None:
        return None
    root = _run_root(os.path.dirname(path) or ".")
    if root is None:
        return None
    rel = _posix(os.path.relpath(os.path.abspath(path), root))
    if rel.startswith("rollouts/"):
        return None
    return ("metrics log" if rel == "metrics.jsonl" else "checkpoint" if rel.startswith("checkpoints/")
            else "token export" if rel.startswith("token_exports/") else "file")


def skip_note(path: str, options=None, named: bool = False) -> str | None:
    """Why discovery leaves out a claimed file, or None: a run folder's file that is not rollout
    data, and (in a folder search; a `named` file is read) traces of the subset not chosen
    (`options.prime_rl_subset`)."""
    sub = subset(path)
    if sub is not None:
        chosen = getattr(options, "prime_rl_subset", SUBSETS[0]) or SUBSETS[0]
        if named or sub == chosen:
            return None
        return f"{path}: prime-rl `{sub}` traces, skipped (reading `{chosen}`; --prime-rl-subset {sub} reads these)"
    what = _companion(path)
    return f"{path}: a prime-rl run folder's {what}, not rollout data, skipped" if what else None


def string_id(text: str) -> int:
    """The integer id of a string id (episode or group): the first 8 bytes of its BLAKE2b
    digest as a big-endian integer, shifted right by one bit (so it fits int64). Decided by the
    string alone, so every byte range of a file, on any worker, gives the same id."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big") >> 1


def _dict(parent: dict, key: str, where: str, default=None):
    v = parent.get(key, default)
    if v is not None and not isinstance(v, dict):
        raise Bad(where, f"expected an object, got {_kind(v)}")
    return v


def _str(parent: dict, key: str, where: str, required: bool = False) -> str | None:
    v = parent.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        raise Bad(where, f"expected a string, got {_kind(v)}" if v is not None else "missing")
    return v


def _bool(parent: dict, key: str, where: str, default: bool) -> bool:
    v = parent.get(key, default)
    if not isinstance(v, bool):
        raise Bad(where, f"expected true/false, got {_kind(v)}")
    return v


def _array(np, v, where: str, kinds: str, what: str):
    if not isinstance(v, list):
        raise Bad(where, f"expected a list of {what}, got {_kind(v)}")
    if not v:
        return None
    try:
        a = np.asarray(v)
    except (ValueError, TypeError, OverflowError):
        a = None
    if a is None or a.ndim != 1 or a.dtype.kind not in kinds:
        raise Bad(where, f"expected a list of {what}")
    return a


class _Node:
    __slots__ = ("parent", "sampled", "tokens", "mask", "trains", "lp", "n")

    def __init__(self, np, rec, where: str, count: int):
        if not isinstance(rec, dict):
            raise Bad(where, f"expected an object, got {_kind(rec)}")
        p = rec.get("parent")
        if p is not None and (isinstance(p, bool) or not isinstance(p, int)):
            raise Bad(f"{where}.parent", f"expected a node index or null, got {_kind(p)}")
        if p is not None and not 0 <= p < count:
            raise Bad(f"{where}.parent", f"expected a node index in [0, {count}), got {p}")
        self.parent = p
        self.sampled = _bool(rec, "sampled", f"{where}.sampled", False)
        tok = _array(np, rec.get("token_ids", []), f"{where}.token_ids", "iu", "token ids")
        n = 0 if tok is None else len(tok)
        if n and (int(tok.min()) < 0 or int(tok.max()) > _INT32_MAX):
            raise Bad(f"{where}.token_ids", f"expected token ids in [0, {_INT32_MAX}]")
        raw_mask = rec.get("mask", [])
        if not isinstance(raw_mask, list):
            raise Bad(f"{where}.mask", f"expected a list of true/false, got {_kind(raw_mask)}")
        if len(raw_mask) != n:
            raise Bad(f"{where}.mask", f"expected {n} entries (one per token_ids), got {len(raw_mask)}")
        try:  # bytes() takes bools and small integers only, some times faster than numpy's list parsing
            packed = bytes(raw_mask)
        except (TypeError, ValueError):
            packed = None
        if packed is None or packed.count(0) + packed.count(1) != n:
            raise Bad(f"{where}.mask", "expected a list of true/false")
        mask = np.frombuffer(packed, np.uint8).view(bool)
        sampled_count = packed.count(1)
        for key in ("logprobs", "advantages", "reference_logprobs"):
            v = rec.get(key, [] if key == "logprobs" else None)
            if v is None:
                continue
            if not isinstance(v, list):
                raise Bad(f"{where}.{key}", f"expected a list of numbers, got {_kind(v)}")
            if len(v) != sampled_count:
                raise Bad(f"{where}.{key}", f"expected {sampled_count} values (one per true entry of mask), got {len(v)}")
            if key == "logprobs":  # the others are not carried: their length is all that is checked
                self.lp = _array(np, v, f"{where}.{key}", "fiu", "numbers")
        self.tokens = tok if tok is not None else np.zeros(0, np.int64)
        self.mask = mask
        self.trains = sampled_count > 0
        self.n = n


def _reward(trace: dict, where: str) -> float:
    """Σ score·weight over the scored rewards (verifiers/v1/trace.py:412-414; None: not scored)."""
    rewards = _dict(trace, "rewards", f"{where}.rewards", {})
    total = 0
    for name, r in rewards.items():
        if r is None:
            continue
        w = f"{where}.rewards.{name}"
        if not isinstance(r, dict):
            raise Bad(w, f"expected {{score, weight}} or null, got {_kind(r)}")
        score, weight = r.get("score"), r.get("weight", 1.0)
        for k, v in (("score", score), ("weight", weight)):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise Bad(f"{w}.{k}", f"expected a number, got {_kind(v)}")
        total += score * weight
    return float(total)


def _status(trace: dict, ok: bool, where: str) -> str:
    """completed / truncated for a clean trace (verifiers' is_truncated rule); for an errored
    one, failed when it was stopped (an error stops it) and aborted when it never finished."""
    if not ok:
        return "failed" if _bool(trace, "is_completed", f"{where}.is_completed", False) else "aborted"
    if trace.get("stop_condition") in _LIMITS:
        return "truncated"
    calls = trace.get("calls", [])
    if not isinstance(calls, list):
        raise Bad(f"{where}.calls", f"expected a list, got {_kind(calls)}")
    for c in reversed(calls):
        if isinstance(c, dict) and c.get("error") is None:
            return "truncated" if c.get("finish_reason") == "length" else "completed"
    return "completed"


def _leaves_and_check(nodes: list, where: str) -> list[int]:
    """The leaves in index order (verifiers/v1/graph.py:647-651), after checking that every
    parent chain reaches a root."""
    reaches = [False] * len(nodes)
    for i in range(len(nodes)):
        seen: dict[int, None] = {}  # the walk so far, in order
        j = i
        while j is not None and not reaches[j]:
            if j in seen:
                raise Bad(f"{where}.nodes[{j}].parent", "the parent links form a cycle")
            seen[j] = None
            j = nodes[j].parent
        for k in seen:
            reaches[k] = True
    has_child = {n.parent for n in nodes if n.parent is not None}
    return [i for i in range(len(nodes)) if i not in has_child]


def episode_samples(np, rec) -> list[dict]:
    """The samples of one episode record, in trace then branch order; raises Bad."""
    if not isinstance(rec, dict):
        raise Bad(None, f"expected a JSON object, got {_kind(rec)}")
    eid = _str(rec, "id", "id", required=True)
    group = _dict(rec, "group", "group")
    gid = _str(group, "id", "group.id", required=True) if group is not None else None
    env = _dict(rec, "env", "env", {}) or {}
    task = _dict(rec, "task", "task", {}) or {}
    run = _dict(rec, "run", "run", {}) or {}
    work = _dict(run, "work", "run.work", {}) or {}
    policy = _dict(work, "policy", "run.work.policy", {}) or {}
    traces = rec.get("traces", [])
    if not isinstance(traces, list):
        raise Bad("traces", f"expected a list, got {_kind(traces)}")
    base = {k: v for k, v in (
        ("source_name", env.get("name") or env.get("id")), ("env_id", env.get("id")), ("task_key", task.get("key")),
        ("episode_id", eid), ("group_id", gid), ("dispatch_step", work.get("step")),
        ("policy_start", policy.get("start")), ("policy_end", policy.get("end"))) if v is not None}
    rid = string_id(eid)
    gidx = None if gid is None else string_id(gid)
    out: list[dict] = []
    for ti, trace in enumerate(traces):
        where = f"traces[{ti}]"
        if not isinstance(trace, dict):
            raise Bad(where, f"expected an object, got {_kind(trace)}")
        agent = _dict(trace, "agent", f"{where}.agent", {}) or {}
        raw_nodes = trace.get("nodes", [])
        if not isinstance(raw_nodes, list):
            raise Bad(f"{where}.nodes", f"expected a list, got {_kind(raw_nodes)}")
        nodes = [_Node(np, n, f"{where}.nodes[{i}]", len(raw_nodes)) for i, n in enumerate(raw_nodes)]
        leaves = _leaves_and_check(nodes, where)
        ok = _bool(trace, "ok", f"{where}.ok", False)
        status = _status(trace, ok, where)
        reward = _reward(trace, where)
        # prime-rl trains clean traces of trainable agents that hold sampled tokens
        # (orchestrator/algo/base.py:35-42); an errored one is kept here as a removed sample
        if not _bool(agent, "trainable", f"{where}.agent.trainable", True) or not any(n.trains for n in nodes):
            continue
        md = dict(base, trace_id=trace.get("id"), agent=agent.get("name", "agent"))
        trained: set[int] = set()
        for k, leaf in enumerate(leaves):
            path = []
            j = leaf
            while j is not None:
                path.append(j)
                j = nodes[j].parent
            path.reverse()
            masks = []
            for j in path:
                node = nodes[j]
                if node.sampled and node.trains and j in trained:
                    masks.append(np.zeros(node.n, bool))  # trained in an earlier branch: context here
                else:
                    if node.sampled and node.trains:
                        trained.add(j)
                    masks.append(node.mask)
            mask = np.concatenate(masks)
            hits = np.flatnonzero(mask)
            if not len(hits):
                continue
            p0 = int(hits[0])
            tokens = np.concatenate([nodes[j].tokens for j in path]).astype(np.int64, copy=False)
            lp = np.zeros(len(tokens), np.float64)
            pos = 0
            for j in path:  # each node's compact logprobs onto its sampled positions (Branch.spread)
                node = nodes[j]
                if node.trains:
                    lp[pos:pos + node.n][node.mask] = node.lp
                pos += node.n
            out.append({
                "rollout_id": rid, "group_index": gidx, "tokens": tokens, "response_length": len(tokens) - p0,
                "loss_mask": mask[p0:], "rollout_log_probs": lp[p0:], "reward": reward, "status": status,
                "remove_sample": not ok, "metadata": dict(md, branch=k),
            })
    return out


def read(inp, request, info) -> Iterator:
    """The registry's entry: the episodes of a traces file or of its byte range, each line's
    samples with that line's number (an unmappable line is one record holding its problem;
    inputs/linesteps.chunks)."""
    import numpy as np

    from ..linesteps import chunks, file_lines

    yield from chunks(file_lines(inp.path, inp.display, info, request.start or 0, request.end),
                      lambda obj, _: episode_samples(np, obj), Bad, "prime_rl.record", request.chunk_records)


def split(inp, parts: int) -> list[tuple[int, int | None]]:
    """Newline-aligned byte ranges of a plain file (inputs/jsonl/reader.py); compressed files whole."""
    from ..jsonl.reader import split as jsonl_split

    return jsonl_split(inp, parts)
