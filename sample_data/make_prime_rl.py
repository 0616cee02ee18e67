"""Write sample_data/prime_rl/: a small made-up prime-rl run folder, deterministically.

The records follow verifiers v1's writer as prime-rl calls it (PrimeIntellect-ai/verifiers@a60a606e):
`Episode.to_record()` is `model_dump(mode="json", exclude_none=True)` without the nodes'
tensor fields (verifiers/v1/episode.py:149-155, trace.py:41-50), so fields come in declaration
order and every None is left out (a root node has no `parent`, an unscored node no
`advantages`). prime-rl appends one record per line to
`rollouts/step_{N}/{train,eval}/{all,effective}/traces.jsonl` (prime-rl@559b4477:
src/prime_rl/monitors/file.py:43-56): every arriving episode to `all`, before any advantage is
assigned (orchestrator/orchestrator.py:582-592), and at ship time the trained traces of the
batch to `train/effective`, with advantages and `info.advantage` (orchestrator.py:682-684,
metrics.py:429-443, 482-497). The run folder also holds `metrics.jsonl` (configs/monitors.py:27)
and checkpoints (orchestrator/ckpt.py:39-40), which are not rollout data.

    python sample_data/make_prime_rl.py [OUT_DIR]      (default: sample_data/prime_rl)

The functions (`node`, `trace`, `episode`) are the generator the tests use as well.
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import orjson

T0 = 1_760_000_000.0  # timestamps: fixed, so the files are reproducible


def hex_id(rng: random.Random) -> str:
    return "%032x" % rng.getrandbits(128)


def group_uuid(rng: random.Random) -> str:
    h = hex_id(rng)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"  # str(uuid.UUID): prime-rl's group ids


def node(role: str, content: str, token_ids: list[int], *, parent: int | None = None, sampled: bool = False,
         mask: list[bool] | None = None, logprobs: list[float] | None = None, advantages: list[float] | None = None,
         t: float = T0) -> dict:
    """A MessageNode as serialised (verifiers/v1/graph.py:64-113): fields in declaration order,
    None left out. `mask` defaults to all False (an input message); `logprobs` to one value per
    True entry of `mask`, compact."""
    mask = [False] * len(token_ids) if mask is None else mask
    if logprobs is None:
        logprobs = [round(-0.05 * (k % 7) - 0.01, 4) for k in range(sum(mask))]
    d: dict = {}
    if parent is not None:
        d["parent"] = parent
    d["message"] = {"role": role, "content": content}
    d["sampled"] = sampled
    d["timestamp"] = t
    d["token_ids"] = token_ids
    d["mask"] = mask
    d["is_content"] = []
    d["logprobs"] = logprobs
    if advantages is not None:
        d["advantages"] = advantages
    return d


def assistant(rng: random.Random, parent: int, n_scaffold: int, n_sampled: int, t: float = T0, **kw) -> dict:
    """A sampled assistant node: its generation-prompt scaffold, then its sampled completion."""
    toks = [rng.randrange(50000) for _ in range(n_scaffold + n_sampled)]
    return node("assistant", "answer", toks, parent=parent, sampled=True,
                mask=[False] * n_scaffold + [True] * n_sampled, t=t, **kw)


def user(rng: random.Random, n: int, parent: int | None = None, role: str = "user", t: float = T0) -> dict:
    return node(role, "question" if role == "user" else "result", [rng.randrange(50000) for _ in range(n)],
                parent=parent, t=t)


def trace(rng: random.Random, task: dict, nodes: list[dict], *, rewards: dict | None = None, ok: bool = True,
          stop_condition: str | None = "agent_completed", finish_reasons: list[str] | None = None,
          agent: str = "agent", trainable: bool = True, errors: list[dict] | None = None,
          info: dict | None = None, completed: bool = True) -> dict:
    """A Trace as serialised (verifiers/v1/trace.py:363-407), one model call per sampled node."""
    sampled = [i for i, n in enumerate(nodes) if n.get("sampled")]
    reasons = finish_reasons or ["stop"] * len(sampled)
    calls = [{"node": i, "model": "policy", "finish_reason": r, "time": {"start": T0, "end": T0 + 1.0}}
             for i, r in zip(sampled, reasons)]
    d = {
        "version": 1,
        "id": hex_id(rng),
        "verifiers": {"version": "0.1.12"},
        "task": task,
        "agent": {"config": {"id": "default"}, "name": agent, "trainable": trainable},
        "tools": [],
        "nodes": nodes,
        "calls": calls,
        "request_rewrites": [],
        "response_rewrites": [],
        "rewards": {"correct": None} if rewards is None else rewards,
        "metrics": {},
        "info": info or {},
        "extra_usage": [],
        "is_completed": completed,
        "ok": ok,
    }
    if stop_condition is not None:
        d["stop_condition"] = stop_condition
    d["errors"] = errors or []
    d["timing"] = {"start": T0, "boot": {"start": 0.0, "end": 0.0}, "setup": {"start": 0.0, "end": 0.0},
                   "agent": {"start": T0, "end": T0 + 2.0, "model": {"duration": 1.0}, "harness": {"duration": 1.0}},
                   "finalize": {"start": 0.0, "end": 0.0}, "scoring": {"start": 0.0, "end": 0.0}}
    return d


def task_record(k: int) -> dict:
    return {"type": "Task", "data": {"question": f"q{k}", "answer": str(k)}, "key": f"task-{k}", "hash": "%016x" % (k * 7919)}


def episode(rng: random.Random, task: dict, group_id: str, step: int, traces: list[dict], *, ok: bool = True,
            errors: list[dict] | None = None, env: str = "gsm8k", kind: str = "train",
            episode_id: str | None = None) -> dict:
    """An Episode as serialised (verifiers/v1/episode.py:86-104), stamped as prime-rl's
    dispatcher does (orchestrator/dispatcher.py:618-645)."""
    return {
        "id": episode_id or hex_id(rng),
        "env": {"id": f"{env}-env", "name": env},
        "task": task,
        "group": {"id": group_id},
        "run": {"type": "train", "id": "run-0", "name": "run", "work": {"type": kind, "step": step,
                                                                       "policy": {"start": max(0, step - 1), "end": step}}},
        "ok": ok,
        "errors": errors or [],
        "traces": traces,
    }


def single_turn(rng: random.Random, n_prompt: int, n_scaffold: int, n_sampled: int) -> list[dict]:
    return [user(rng, n_prompt), assistant(rng, 0, n_scaffold, n_sampled)]


def with_advantages(ep: dict, value: float) -> dict:
    """The copy prime-rl writes to `effective`: advantages on every sampled node, compact, and
    the trace's mean advantage in `info.advantage` (orchestrator/algo/routing.py:11-34)."""
    out = json.loads(json.dumps(ep))
    for t in out["traces"]:
        for n in t["nodes"]:
            if any(n["mask"]):
                n["advantages"] = [value] * sum(n["mask"])
        t["info"] = {**t["info"], "advantage": value}
    return out


def dumps(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in records)


def build(out: Path) -> None:
    """Steps 1-2 of a training run (train: all + effective) and an eval at step 2."""
    rng = random.Random(20251203)
    run = out / "outputs" / "run"
    for step in (1, 2):
        arrived: list[dict] = []
        trained: list[dict] = []
        for g in range(2):
            k = 10 * step + g
            task, gid = task_record(k), group_uuid(rng)
            members = []
            for m in range(3):
                reward = float((m + g) % 2)
                nodes = single_turn(rng, 6 + m, 2, 5 + m)
                reasons = None
                if step == 1 and g == 0 and m == 0:
                    # multi-turn with a fork: a tool result, then two continuations (branches)
                    nodes = [user(rng, 6), assistant(rng, 0, 2, 4), user(rng, 3, parent=1, role="tool"),
                             assistant(rng, 2, 2, 5), assistant(rng, 2, 2, 3)]
                if step == 2 and g == 1 and m == 2:
                    reasons = ["length"]  # cut at the token limit: truncated
                tr = trace(rng, task, nodes, rewards={"correct": {"score": reward, "weight": 1.0},
                                                      "format": {"score": 0.5, "weight": 0.2}},
                           finish_reasons=reasons)
                members.append(episode(rng, task, gid, step, [tr]))
            if step == 2 and g == 0:
                # a multi-agent episode: two trainable solvers and a judge that is not trained
                solvers = [trace(rng, task, single_turn(rng, 5, 2, 4 + s), agent="solver",
                                 rewards={"correct": {"score": 1.0, "weight": 1.0}}) for s in range(2)]
                judge = trace(rng, task, single_turn(rng, 8, 2, 2), agent="judge", trainable=False,
                              rewards={})
                members.append(episode(rng, task, gid, step, solvers + [judge], env="debate"))
            if step == 1 and g == 1:
                # an errored episode: its trace stopped on an error after one turn, unscored
                err = {"type": "SandboxError", "message": "sandbox exited"}
                tr = trace(rng, task, single_turn(rng, 6, 2, 3), ok=False, stop_condition="error", errors=[err])
                members.append(episode(rng, task, gid, step, [tr], ok=False, errors=[err]))
            arrived += members
            mean = sum(sum(r["score"] * r["weight"] for r in (t["rewards"] or {}).values() if r)
                       for e in members for t in e["traces"] if t["ok"]) / max(1, len(members))
            for e in members:
                kept = [t for t in e["traces"] if t["ok"] and t["agent"]["trainable"]]
                if kept:
                    r = sum(x["score"] * x["weight"] for x in kept[0]["rewards"].values() if x)
                    trained.append(with_advantages(dict(e, traces=kept), round(r - mean, 6)))
        base = run / "rollouts" / f"step_{step}" / "train"
        for subset, records in (("all", arrived), ("effective", trained)):
            (base / subset).mkdir(parents=True, exist_ok=True)
            (base / subset / "traces.jsonl").write_bytes(dumps(records))
    # eval at step 2: one episode per task, no group id shared
    evals = []
    for k in range(3):
        task = task_record(100 + k)
        tr = trace(rng, task, single_turn(rng, 6, 2, 4), rewards={"correct": {"score": float(k % 2), "weight": 1.0}})
        evals.append(episode(rng, task, group_uuid(rng), 2, [tr], kind="eval"))
    for subset in ("all", "effective"):
        d = run / "rollouts" / "step_2" / "eval" / subset
        d.mkdir(parents=True, exist_ok=True)
        (d / "traces.jsonl").write_bytes(dumps(evals))
    # the run folder's other files: metrics and a checkpoint, not rollout data
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "time": 1760000000.0, "reward/mean": 0.5}\n'
                                        b'{"step": 2, "time": 1760000100.0, "reward/mean": 0.6}\n')
    ckpt = run / "checkpoints" / "step_2" / "orchestrator"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "progress.pt").write_bytes(b"not a rollout dump")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=Path(__file__).resolve().parent / "prime_rl",
                        help="the folder to write (default: sample_data/prime_rl/)")
    args = parser.parse_args()
    build(args.out)
