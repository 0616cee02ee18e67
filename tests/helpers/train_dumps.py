"""A small stand-in for slime's trainer side, for the audit tests: from rollout samples
(`Sample.to_dict()` form) it builds what `--save-debug-train-data` writes, following
slime/observability/train_data_utils.py (THUDM/slime@624b824a, `save_debug_train_data` and
`_build_dump_payload`) and the spec's sections 3b and 6:

* the trainer's train_data: slime's conversion (tests/helpers/slime_reference.py) and its dtypes;
* the samples split over DP ranks by strided micro-batches; each rank's rollout_data holds its
  per-sample lists sliced by its `partition` (global rollout-dump positions), one float32
  `rollout_mask_sums` tensor, the layout keys and the whole-batch `raw_reward`;
* the fields training adds, one float32 tensor per sample of response length, 0.0 at masked
  positions: log_probs, ref_log_probs, advantages, entropy;
* the payload: per-sample keys transposed into one dict per training sample (`partition` ->
  `rollout_position`, `sample_indices` -> `sample_index`), sorted by position; the layout per
  rank under `dp_shards`; `raw_reward` once at the top.

slime's writer gathers every DP rank onto one file; `per_rank=True` writes one file per rank
(a `{rank}` template of a trainer that does not gather), which audit merges.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import slime_reference as ref

WHOLE_BATCH = ("raw_reward", "total_lengths")
LAYOUT = ("micro_batch_indices", "num_microbatches", "global_batch_sizes")


REWARD_RULES = ("group", "group_rollout", "slime_positional", "raw")


def rule_rewards(samples: list[dict], rule: str, *, n: int, rbs: int, std: bool = True) -> list[float]:
    """A step's rewards under one named reward rule (grpo), computed independently of
    rollout_cli: slime's positional rows, slime's group_index alternative, each rollout once in
    its group (fill ids), or the raw rewards."""
    if rule == "slime_positional":
        return ref.post_process_rewards(samples, n_samples_per_prompt=n, rollout_batch_size=rbs,
                                        grpo_std_normalization=std)[1]
    if rule == "group":
        return ref.group_index_rewards(samples, std=std)
    if rule == "raw":
        return [float(torch.tensor(float(s["reward"]), dtype=torch.float32)) for s in samples]
    assert rule == "group_rollout"
    ids = ref.fill_rollout_ids(samples)
    units: dict = {}  # (group, rollout) -> its reward, in order
    for s, rid in zip(samples, ids):
        units.setdefault((s["group_index"], rid), float(s["reward"]))
    unit_samples = [{"group_index": g, "reward": r, "status": "completed"} for (g, _), r in units.items()]
    per_unit = dict(zip(units, ref.group_index_rewards(unit_samples, std=std)))
    return [per_unit[(s["group_index"], rid)] for s, rid in zip(samples, ids)]


def train_data(samples: list[dict], *, n: int, rbs: int, reward_rule: str | None = None, id_rule: str = "fill",
               **rules) -> dict:
    """slime's train_data of a step, tensorised as the trainer receives it. `reward_rule` (one
    of REWARD_RULES; None: slime's own) and `id_rule` (slime_reference.ROLLOUT_ID_RULES) stand
    for a trainer that ran another rule: its rewards, rollout ids and mask sums follow it."""
    td = ref.convert_samples_to_train_data(samples, n_samples_per_prompt=n, rollout_batch_size=rbs, **rules)
    if reward_rule is not None:
        td["rewards"] = rule_rewards(samples, reward_rule, n=n, rbs=rbs)
    if id_rule != "fill":
        ids = ref.ROLLOUT_ID_RULES[id_rule](samples)
        per: dict = {}
        for rid, m in zip(ids, td["loss_masks"]):
            per[rid] = per.get(rid, 0) + int(sum(m))
        td["rollout_ids"] = ids
        td["rollout_mask_sums"] = [per[rid] for rid in ids]
    td["total_lengths"] = [len(t) for t in td["tokens"]]
    return ref.tensorize(td)


def _trained_fields(rl: int, mask: torch.Tensor, rollout_lp: torch.Tensor | None, reward: float,
                    rng: np.random.Generator) -> dict:
    m = mask.to(torch.float32)
    base = rollout_lp if rollout_lp is not None else torch.full((rl,), -1.0)
    noise = torch.as_tensor(rng.normal(0.0, 0.05, rl), dtype=torch.float32)
    return {
        "log_probs": (base + noise) * m,
        "ref_log_probs": (base + 2 * noise) * m,
        "advantages": torch.full((rl,), float(reward)) * m,
        "entropy": torch.as_tensor(rng.uniform(0.1, 2.0, rl), dtype=torch.float32) * m,
    }


def rank_data(td: dict, dp: int, *, mbs: int = 1, seed: int = 0) -> list[dict]:
    """Each DP rank's rollout_data after training: micro-batches of `mbs` consecutive samples
    dealt round-robin over ranks (slime's strided distribution)."""
    rng = np.random.default_rng(seed)
    n = len(td["tokens"])
    mbs_list = [list(range(a, min(a + mbs, n))) for a in range(0, n, mbs)]
    ranks = []
    for r in range(dp):
        part = [i for k, mb in enumerate(mbs_list) if k % dp == r for i in mb]
        rd: dict = {"partition": part}
        for key, value in td.items():
            if key in WHOLE_BATCH:
                rd[key] = value
            elif key == "rollout_mask_sums":
                rd[key] = value[part]
            else:
                rd[key] = [value[i] for i in part]
        lp = td.get("rollout_log_probs")
        extra = [_trained_fields(td["response_lengths"][i], td["loss_masks"][i], None if lp is None else lp[i],
                                 td["rewards"][i], rng) for i in part]
        for key in ("log_probs", "ref_log_probs", "advantages", "entropy"):
            rd[key] = [e[key] for e in extra]
        sizes, start = [], 0
        for k, mb in enumerate(mbs_list):
            if k % dp == r:
                sizes.append([start, start + len(mb)])
                start += len(mb)
        rd["micro_batch_indices"] = [sizes]
        rd["num_microbatches"] = [len(sizes)]
        rd["global_batch_sizes"] = [len(set(td["rollout_ids"]))]
        ranks.append(rd)
    return ranks


def whiten_advantages(ranks: list[dict]) -> None:
    """slime's --normalize-advantages: every rank's advantages whitened with the DP group's
    masked statistics (distributed_masked_whiten: float32 sums, Bessel-corrected variance,
    epsilon 1e-8, mean shifted), in place."""
    m = torch.cat([mask.to(torch.float32) for rd in ranks for mask in rd["loss_masks"]])
    # the trainer broadcasts the reward over every token before whitening
    full = [torch.full_like(a, float(r)) for rd in ranks for a, r in zip(rd["advantages"], rd["rewards"])]
    v = torch.cat(full)
    total = m.sum()
    mean = (v * m).sum() / total
    var = ((v * v) * m).sum() / total - mean ** 2
    if total >= 2:
        var = var * total / (total - 1)
    scale = torch.rsqrt(var + 1e-8)
    k = 0
    for rd in ranks:
        out = []
        for mask in rd["loss_masks"]:
            out.append(((full[k] - mean) * scale) * mask.to(torch.float32))
            k += 1
        rd["advantages"] = out


def payload(shards: list[dict], step: int, writer_rank: int = 0) -> dict:
    """slime's dump payload of gathered shards ({rank, data_parallel_rank, rollout_data})."""
    samples, layout, whole = [], [], {}
    for sh in shards:
        rd = sh["rollout_data"]
        count = len(rd["response_lengths"])
        lay = {"rank": sh["rank"], "data_parallel_rank": sh["data_parallel_rank"],
               "sample_indices": list(rd["sample_indices"]) if "sample_indices" in rd else None,
               "partition": list(rd["partition"])}
        per_sample = {}
        for key, value in rd.items():
            if key in ("partition", "sample_indices"):
                continue
            if key == "raw_reward":
                whole.setdefault(key, value)
            elif key in LAYOUT or not (len(value) == count if isinstance(value, (list, tuple, torch.Tensor)) else False):
                lay[key] = value
            else:
                per_sample[key] = value
        for i in range(count):
            s = {"data_parallel_rank": sh["data_parallel_rank"], "rollout_position": rd["partition"][i]}
            if "sample_indices" in rd:
                s["sample_index"] = rd["sample_indices"][i]
            s.update({k: v[i] for k, v in per_sample.items()})
            samples.append(s)
        layout.append(lay)
    samples.sort(key=lambda s: s["rollout_position"])
    return {"format_version": 2, "rollout_id": step, "rank": writer_rank, "samples": samples, "dp_shards": layout, **whole}


def write_train(folder: Path, samples: list[dict], step: int, *, n: int, rbs: int, dp: int = 1, per_rank: bool = False,
                seed: int = 0, edit=None, whiten: bool = False, **rules) -> list[Path]:
    """The train dump(s) of one step under `folder`: `{step}.pt`, or `{step}_{rank}.pt` per rank.
    `edit(payload)` may change the payload before it is saved (fault injection); `whiten`:
    advantages whitened over every rank (--normalize-advantages)."""
    ranks = rank_data(train_data(samples, n=n, rbs=rbs, **rules), dp, seed=seed + step)
    if whiten:
        whiten_advantages(ranks)
    shards = [{"rank": r, "data_parallel_rank": r, "rollout_data": rd} for r, rd in enumerate(ranks)]
    folder.mkdir(parents=True, exist_ok=True)
    groups = [[sh] for sh in shards] if per_rank else [shards]
    paths = []
    for g in groups:
        p = payload(g, step, g[0]["rank"])
        if edit is not None:
            edit(p)
        path = folder / (f"{step}_{g[0]['rank']}.pt" if per_rank else f"{step}.pt")
        torch.save(p, str(path))
        paths.append(path)
    return paths


def rollout_samples(step: int, *, prompts: int = 3, n: int = 2, rl: int = 4, seed: int = 0, removed: tuple = ()) -> list[dict]:
    """A step's rollout samples in prompt order, with log-probs, a partial mask and rewards
    that differ within each group (`removed`: positions whose remove_sample is set)."""
    rng = np.random.default_rng(seed + 1000 * step)
    out = []
    for g in range(prompts):
        for k in range(n):
            i = g * n + k
            mask = [1] * rl
            mask[0] = 0  # a masked first token: its log-prob must never count
            out.append({
                "group_index": g, "index": i, "rollout_id": None, "prompt": f"p{g}", "response": f"r{i}",
                "tokens": [5, 6, 7] + [100 + 10 * i + j for j in range(rl)], "response_length": rl,
                "reward": float(rng.integers(0, 3)) + 0.25 * k, "loss_mask": mask,
                "rollout_log_probs": [float(x) for x in rng.uniform(-3.0, -0.01, rl)],
                "remove_sample": i in removed, "status": "completed", "metadata": {"tag": "x"},
            })
    return out


# Batches where the rules agree and where they differ (audit's rule tests, the report's).


def uniform(step: int = 0) -> list[dict]:
    """n x rollout_batch_size samples, prompt groups consecutive, no explicit ids: slime's rows
    are the prompt groups."""
    return rollout_samples(step, prompts=3, n=2)


def compact(step: int = 0) -> list[dict]:
    """Group 0 is one compact rollout of two siblings (explicit id 0, one reward), group 2 has
    a third sample: 7 samples, so slime normalises the whole batch as one row."""
    s = rollout_samples(step, prompts=3, n=2)
    s[0]["rollout_id"] = s[1]["rollout_id"] = 0
    s[1]["reward"] = s[0]["reward"]
    extra = dict(s[5], index=6, reward=0.5, response=f"r6-{step}")
    s.append(extra)
    return s


def mixed_ids(step: int = 0) -> list[dict]:
    """Explicit and missing ids mixed, an explicit id equal to another sample's index (slime's
    `mixed_ids` dump): group 1's two siblings carry id 2, group 2's first sample has index 2
    (so #1933's rule merges it into rollout 2), sample 6 carries id 7."""
    s = rollout_samples(step, prompts=4, n=2)
    for k in (2, 3):
        s[k]["rollout_id"] = 2
    s[3]["reward"] = s[2]["reward"]
    s[6]["rollout_id"] = 7
    for k, sample in enumerate(s):
        sample["index"] = 2 if k == 4 else 100 + k
    return s


def write_rollout(folder: Path, samples: list[dict], step: int, fmt: str) -> Path:
    """The rollout dump of one step in one of the three formats."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "pt":
        path = folder / f"{step}.pt"
        torch.save({"rollout_id": step, "samples": samples}, str(path))
    elif fmt == "jsonl":
        import orjson

        path = folder / f"{step}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(s) + b"\n" for s in samples))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / f"{step}.parquet"
        pq.write_table(pa.Table.from_pylist(samples), str(path))
    return path


def write_run(root: Path, steps=(0, 1, 2), fmt: str = "jsonl", *, prompts: int = 4, n: int = 3, rl: int = 30, dp: int = 2,
              removed=(2,), edit=None) -> tuple[Path, Path]:
    """A small run as slime's --dump-details lays it out: root/rollout_data and root/train_data.
    `edit(step, payload)` changes a train payload before it is saved."""
    for step in steps:
        samples = rollout_samples(step, prompts=prompts, n=n, rl=rl, removed=removed)
        write_train(root / "train_data", samples, step, n=n, rbs=prompts, dp=dp,
                    edit=None if edit is None else (lambda p, s=step: edit(s, p)))
        write_rollout(root / "rollout_data", samples, step, fmt)
    return root / "rollout_data", root / "train_data"


def reward_fault(step: int, p: dict) -> None:
    """The report tests' fault: step 1, rollout position 4 trained with another reward."""
    if step == 1:
        p["samples"][4]["rewards"] = 9.0


def read_train(inp, trust_pickle: bool = False):
    """A train reader as another framework's would be (named as a format's train_reader by the
    tests): JSONL, one training sample per line under slime's key names plus its `step`, turned
    into slime's payload and checked by train_pt.from_payload."""
    import orjson

    from rollout_cli.inputs.train_pt.reader import from_payload

    rows = [orjson.loads(line) for line in Path(inp.path).read_bytes().splitlines() if line.strip()]
    samples = [{k: (np.asarray(v) if isinstance(v, list) else v) for k, v in r.items() if k != "step"} for r in rows]
    return from_payload({"format_version": 2, "rollout_id": rows[0]["step"], "samples": samples}, inp.display)


def write_train_jsonl(path: Path, pt_path: Path) -> Path:
    """The samples of a train .pt as that JSONL."""
    import orjson

    p = torch.load(str(pt_path), weights_only=False)
    lines = []
    for s in p["samples"]:
        row = {"step": p["rollout_id"]}
        row.update({k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in s.items()})
        lines.append(orjson.dumps(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path
