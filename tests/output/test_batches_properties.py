"""Properties of the trainer's data path (`iter_batches` on `open_output`, numpy, and on
`open_dataset`, torch) over small generated outputs, at world sizes 1-16 and token budgets:

- every sample of the steps asked for comes once, on one rank, with its own tokens and mask;
- a rollout never spans two ranks (nor, converted with --keep-groups, a prompt group); at the
  output's own world size (None) a rank gets its shard's rows;
- a micro-batch holds at most max_tokens tokens, or a single longer sample;
- each sample's rollout, group and step denominators are the whole rollout's, group's and
  step's, computed here from the shards;
- within a step every rank has the same number of micro-batches, an empty one (no tokens) only
  where the rank has fewer samples than that count;
- a fresh iterator given the state_dict() saved at any position continues with exactly the
  batches the uninterrupted stream has from there; under another world size or budget, with
  that stream's batches from the next step boundary (and a warning when that skips the rest
  of a step);
- a fresh process gives the same stream (digests compared).

The outputs are built once per module: slime JSONL dumps of three steps (prompt groups of 1-6
samples, compact rollouts of 1-3 samples sharing an explicit id, zero spans in loss masks,
removed samples, a few samples far longer than the rest, a step with fewer rollouts than most
world sizes) converted in 4 shards, without --keep-groups (with the Arrow IPC copies) and with
it (Parquet only).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st

import batch_streams
from batch_streams import stream
from conftest import write_jsonl
from rollout_cli.output.model import open_output
from rollout_cli.run.convert import ConvertOptions, convert

SHARDS = 4
STEP_GROUPS = {1: 16, 2: 7, 3: 1}  # prompt groups per step; step 3 has 1-6 rollouts
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------
# the outputs, and what the shards say about them
# ------------------------------------------------------------------------------------------


def _dump(rng: np.random.Generator, step: int, groups: int, first_index: int) -> list[dict]:
    """One step's slime samples: prompt groups of 1-6; in about half of the groups consecutive
    siblings share an explicit rollout id (runs of 1-3: compact multi-sample rollouts)."""
    samples = []
    next_id = 100 * step
    index = first_index
    for g in range(groups):
        size = int(rng.integers(1, 7))
        compact = rng.random() < 0.5
        prompt = rng.integers(5, 30_000, int(rng.integers(2, 40))).tolist()
        run_left, rid, reward = 0, None, 0.0
        for _ in range(size):
            if compact and run_left == 0:
                run_left, next_id = int(rng.integers(1, 4)), next_id + 1
            if run_left == 0 or not compact:
                reward = float(rng.integers(0, 2))  # siblings of one rollout share its reward
            if compact:
                rid, run_left = next_id, run_left - 1
            long = rng.random() < 0.06
            resp = int(rng.integers(300, 700)) if long else int(rng.integers(1, 120))
            mask = [1] * resp
            if resp > 8 and rng.random() < 0.4:  # a tool output's span, outside the loss
                a, span = int(rng.integers(1, resp - 4)), int(rng.integers(1, 4))
                mask[a:a + span] = [0] * span
            samples.append({
                "group_index": g, "index": index, "rollout_id": rid,
                "tokens": prompt + rng.integers(5, 30_000, resp).tolist(), "response_length": resp,
                "reward": reward, "loss_mask": mask, "remove_sample": bool(rng.random() < 0.05),
                "status": "truncated" if rng.random() < 0.1 else "completed", "metadata": {},
            })
            index += 1
    return samples


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    """name -> OUT: `plain` (4 shards, IPC copies) and `grouped` (4 shards, --keep-groups,
    Parquet only) of the same dumps."""
    root = tmp_path_factory.mktemp("batches")
    rng = np.random.default_rng(39)
    first = 0
    for step, groups in STEP_GROUPS.items():
        samples = _dump(rng, step, groups, first)
        first += len(samples)
        write_jsonl(root / "dumps" / "rollout_data" / f"{step}.jsonl", samples)
    made = {}
    for name, kw in {"plain": {}, "grouped": {"keep_groups": True, "mmap": False}}.items():
        out = root / name
        convert([str(root / "dumps")], str(out), ConvertOptions(overwrite=True, workers=1, shards=SHARDS, **kw))
        made[name] = str(out)
    return made


class Truth:
    """An output's rows as its shards hold them, per step: each sample (by rollout position)
    with its rollout, group, tokens and mask, its shard, and the loss-mask totals of every
    rollout, group and step, computed here."""

    def __init__(self, out: str):
        o = open_output(out)
        self.steps = o.step_numbers()
        self.sample: dict[tuple[int, int], dict] = {}
        self.rollout_mask: Counter = Counter()
        self.group_mask: Counter = Counter()
        self.step_mask: Counter = Counter()
        self.positions: dict[int, list[int]] = {}
        self.shard_of: dict[tuple[int, int], int] = {}
        cols = ["rollout_position", "rollout_id", "group_index", "tokens", "loss_mask", "remove_sample",
                "rollout_mask_sum", "group_mask_sum", "step_mask_sum"]
        for step in self.steps:
            self.positions[step] = []
            for shard in range(o.num_shards()):
                t = o.table(step, shard, columns=cols).to_pydict()
                for i, pos in enumerate(t["rollout_position"]):
                    rid, gi = t["rollout_id"][i], t["group_index"][i]
                    mask_total = sum(t["loss_mask"][i])  # a removed sample's mask is all zeros
                    self.sample[(step, pos)] = {"rollout_id": rid, "group_index": gi, "tokens": t["tokens"][i],
                                                "loss_mask": t["loss_mask"][i], "mask_total": mask_total,
                                                "removed": t["remove_sample"][i],
                                                "columns": (t["rollout_mask_sum"][i], t["group_mask_sum"][i],
                                                            t["step_mask_sum"][i])}
                    self.shard_of[(step, pos)] = shard
                    self.positions[step].append(pos)
                    self.rollout_mask[(step, rid)] += mask_total
                    self.group_mask[(step, gi)] += mask_total
                    self.step_mask[step] += mask_total

    def denominators(self, step: int, pos: int) -> tuple[int, int, int]:
        s = self.sample[(step, pos)]
        return self.rollout_mask[(step, s["rollout_id"])], self.group_mask[(step, s["group_index"])], self.step_mask[step]


@pytest.fixture(scope="module")
def truths(outputs) -> dict[str, Truth]:
    return {name: Truth(out) for name, out in outputs.items()}


def test_the_outputs_have_what_the_properties_need(outputs, truths):
    """The fixture's dumps hold what the properties are about: compact rollouts of several
    samples, groups of several rollouts, samples longer than the smaller budgets, removed
    samples, a step with fewer rollouts than most world sizes; and the denominators computed
    here are the converter's columns."""
    t = truths["plain"]
    assert t.steps == sorted(STEP_GROUPS)
    per_rollout = Counter((s, v["rollout_id"]) for (s, _), v in t.sample.items())
    assert max(per_rollout.values()) >= 3
    rollouts_per_group = Counter((s, g) for s, g, _ in {(s, v["group_index"], v["rollout_id"])
                                                         for (s, _), v in t.sample.items()})
    assert max(rollouts_per_group.values()) >= 4
    assert max(len(v["tokens"]) for v in t.sample.values()) > 300
    removed = [v for v in t.sample.values() if v["removed"]]
    assert removed and all(v["mask_total"] == 0 for v in removed)
    assert len({v["rollout_id"] for (s, _), v in t.sample.items() if s == 3}) < 8
    for name, truth in truths.items():
        for (step, pos), v in truth.sample.items():
            assert v["columns"] == truth.denominators(step, pos), (name, step, pos)


# ------------------------------------------------------------------------------------------
# the streams
# ------------------------------------------------------------------------------------------

WORLD = st.one_of(st.none(), st.integers(1, 16))
BUDGET = st.one_of(st.none(), st.integers(16, 1500))
NAME = st.sampled_from(["plain", "grouped"])
BACKEND = st.sampled_from(["numpy", "torch"])


@st.composite
def configs(draw, backend=BACKEND):
    steps = draw(st.one_of(st.none(), st.lists(st.sampled_from(sorted(STEP_GROUPS)), min_size=1, max_size=3,
                                                unique=True).map(sorted)))
    return {"name": draw(NAME), "world_size": draw(WORLD), "max_tokens": draw(BUDGET), "steps": steps,
            "backend": draw(backend)}


# Always among the examples (derandomized generation draws the same ones for a given test
# source, which need not reach every path): a 4-shard output repartitioned at 2, 3, 8 and 16
# ranks, under budgets and without.
KEY_CONFIGS = [
    {"name": "plain", "world_size": 3, "max_tokens": 300, "steps": None, "backend": "numpy"},
    {"name": "grouped", "world_size": 2, "max_tokens": 120, "steps": None, "backend": "torch"},
    {"name": "plain", "world_size": 8, "max_tokens": None, "steps": [1, 3], "backend": "torch"},
    {"name": "grouped", "world_size": 16, "max_tokens": 900, "steps": None, "backend": "numpy"},
]


def key_configs(test):
    for cfg in reversed(KEY_CONFIGS):
        test = example(cfg=cfg)(test)
    return test


def _ranks(cfg) -> int:
    return cfg["world_size"] or SHARDS


def _all_ranks(outputs, cfg) -> list[list]:
    """Every rank's micro-batches."""
    return [stream(outputs[cfg["name"]], r, cfg["world_size"], cfg["max_tokens"], cfg["steps"], cfg["backend"])
            for r in range(_ranks(cfg))]


def _by_step(micros) -> dict[int, list]:
    out = defaultdict(list)
    for m in micros:
        out[m.step].append(m)
    return out


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs())
@key_configs
def test_every_sample_once_intact(outputs, truths, cfg):
    truth = truths[cfg["name"]]
    ranks = _all_ranks(outputs, cfg)
    steps = cfg["steps"] or truth.steps
    seen = Counter()
    for micros in ranks:
        assert [m.step for m in micros] == sorted(m.step for m in micros), "micro-batches out of step order"
        for m in micros:
            assert m.step in steps
            cu = m.cu_seqlens
            assert cu[0] == 0 and cu[-1] == m.num_tokens and len(cu) == m.num_samples + 1
            assert np.array_equal(np.diff(cu), m.total_lengths)
            assert len(m.loss_mask) == int(m.response_lengths.sum())
            for i, pos in enumerate(m.rollout_positions.tolist()):
                seen[(m.step, pos)] += 1
                want = truth.sample[(m.step, pos)]
                assert int(m.rollout_ids[i]) == want["rollout_id"]
                assert m.sample_tokens(i).tolist() == want["tokens"], (m.step, pos)
                assert m.sample_mask(i).tolist() == want["loss_mask"], (m.step, pos)
    expected = {(s, p) for s in steps for p in truth.positions[s]}
    assert set(seen) == expected, "samples missing or foreign"
    assert max(seen.values()) == 1, f"samples served twice: {[k for k, n in seen.items() if n > 1][:5]}"


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs())
@key_configs
def test_rollouts_and_kept_groups_whole(outputs, truths, cfg):
    truth = truths[cfg["name"]]
    rank_of_rollout: dict = defaultdict(set)
    rank_of_group: dict = defaultdict(set)
    for r, micros in enumerate(_all_ranks(outputs, cfg)):
        for m in micros:
            for pos in m.rollout_positions.tolist():
                s = truth.sample[(m.step, pos)]
                rank_of_rollout[(m.step, s["rollout_id"])].add(r)
                rank_of_group[(m.step, s["group_index"])].add(r)
                if cfg["world_size"] is None:  # the output's own world size: each rank its shard
                    assert truth.shard_of[(m.step, pos)] == r, (m.step, pos)
    split = {k: v for k, v in rank_of_rollout.items() if len(v) > 1}
    assert not split, f"rollouts on several ranks: {split}"
    if cfg["name"] == "grouped":
        split = {k: v for k, v in rank_of_group.items() if len(v) > 1}
        assert not split, f"--keep-groups: prompt groups on several ranks: {split}"


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs())
@key_configs
def test_budget_held(outputs, cfg):
    for micros in _all_ranks(outputs, cfg):
        for m in micros:
            if cfg["max_tokens"] is not None:
                assert m.num_tokens <= cfg["max_tokens"] or m.num_samples == 1, \
                    f"step {m.step}: {m.num_samples} samples, {m.num_tokens} tokens over the budget {cfg['max_tokens']}"
        if cfg["max_tokens"] is None:  # no budget: one batch per step
            assert all(len(v) == 1 for v in _by_step(micros).values())


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs())
@key_configs
def test_denominators_are_the_whole_rollouts_groups_and_steps(outputs, truths, cfg):
    truth = truths[cfg["name"]]
    for micros in _all_ranks(outputs, cfg):
        for m in micros:
            assert m.scalars["step_mask_sum"] == truth.step_mask[m.step]  # empty micro-batches too
            for i, pos in enumerate(m.rollout_positions.tolist()):
                rollout, group, step = truth.denominators(m.step, pos)
                assert int(m.rollout_mask_sums[i]) == rollout, (m.step, pos)
                assert int(m.group_mask_sums[i]) == group, (m.step, pos)


@settings(max_examples=30, **SETTINGS)
@given(cfg=configs())
@key_configs
def test_equal_micro_batch_counts_per_rank(outputs, truths, cfg):
    truth = truths[cfg["name"]]
    ranks = [_by_step(micros) for micros in _all_ranks(outputs, cfg)]
    for step in cfg["steps"] or truth.steps:
        counts = [len(r.get(step, [])) for r in ranks]
        assert len(set(counts)) == 1 and counts[0] >= 1, f"step {step}: micro-batches per rank {counts}"
        for r, by_step in enumerate(ranks):
            micros = by_step[step]
            samples = sum(m.num_samples for m in micros)
            empty = [m for m in micros if m.num_samples == 0]
            assert len(empty) == max(0, counts[0] - samples), \
                f"step {step} rank {r}: {len(empty)} empty micro-batches of {counts[0]}, {samples} samples"
            for m in empty:
                assert m.num_tokens == 0 and m.cu_seqlens.tolist() == [0] and len(m.loss_mask) == 0


@settings(max_examples=12, **SETTINGS)
@given(cfg=configs(), rank=st.integers(0, 15))
@example(cfg=KEY_CONFIGS[0], rank=1)
@example(cfg=KEY_CONFIGS[1], rank=0)
def test_resume_at_every_position_is_the_uninterrupted_stream(outputs, cfg, rank):
    out = outputs[cfg["name"]]
    rank %= _ranks(cfg)
    args = (rank, cfg["world_size"], cfg["max_tokens"], cfg["steps"], cfg["backend"])
    whole = [m.digest() for m in stream(out, *args)]
    for k in range(len(whole) + 1):
        it = batch_streams.open_stream(out, *args)
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(it.state_dict()))  # JSON, as a checkpoint holds it
        fresh = batch_streams.open_stream(out, *args)
        fresh.load_state_dict(state)
        rest = [batch_streams.Micro.of(b).digest() for b in fresh]
        assert rest == whole[k:], f"resumed after {k} of {len(whole)} micro-batches"


def _from(micros: list, step: int, skip: int) -> list:
    """The micro-batches of `micros` from the one after the first `skip` of `step` on."""
    out, seen = [], 0
    for m in micros:
        if m.step == step:
            seen += 1
            if seen <= skip:
                continue
        if m.step >= step:
            out.append(m)
    return out


@st.composite
def resumes(draw):
    """A stream and another one of the same output and steps (world size, budget, rank, backend
    drawn again), and where the first is interrupted (a fraction of its length)."""
    a = draw(configs())
    b = {**a, "world_size": draw(WORLD), "max_tokens": draw(BUDGET), "backend": draw(BACKEND)}
    return a, b, draw(st.integers(0, 15)), draw(st.integers(0, 15)), draw(st.floats(0, 1))


@settings(max_examples=20, **SETTINGS)
@given(case=resumes())
@example(case=(KEY_CONFIGS[0], {**KEY_CONFIGS[0], "world_size": 5, "max_tokens": 200}, 1, 4, 0.3))
@example(case=(KEY_CONFIGS[1], {**KEY_CONFIGS[1], "world_size": None}, 0, 2, 0.5))
def test_resume_under_another_world_size_or_budget_at_the_next_step_boundary(outputs, case):
    a, b, rank_a, rank_b, at = case
    out = outputs[a["name"]]
    args_a = (rank_a % _ranks(a), a["world_size"], a["max_tokens"], a["steps"], a["backend"])
    args_b = (rank_b % _ranks(b), b["world_size"], b["max_tokens"], b["steps"], b["backend"])
    first, second = stream(out, *args_a), stream(out, *args_b)
    k = round(at * len(first))
    it = batch_streams.open_stream(out, *args_a)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    fresh = batch_streams.open_stream(out, *args_b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh.load_state_dict(state)
    rest = [batch_streams.Micro.of(m).digest() for m in fresh]
    same = (_ranks(a), a["max_tokens"]) == (_ranks(b), b["max_tokens"])
    if k == len(first):
        want, skipped = [], False
    else:
        step = first[k].step
        done = sum(m.step == step for m in first[:k])  # micro-batches of that step already handed out
        if same:  # the same micro-batch of the same step (as the other rank counts them)
            want, skipped = _from(second, step, done), False
        elif done:  # another plan of a step begun: the next step boundary
            want, skipped = [m for m in second if m.step > step], True
        else:
            want, skipped = _from(second, step, 0), False
    event("the end" if k == len(first) else "same plan" if same else "mid-step" if skipped else "step boundary")
    assert rest == [m.digest() for m in want], f"resumed after {k} of {len(first)} micro-batches"
    said = [w for w in caught if issubclass(w.category, RuntimeWarning) and "next step boundary" in str(w.message)]
    assert bool(said) == skipped


@settings(max_examples=2, phases=(Phase.explicit, Phase.generate), **SETTINGS)  # no shrinking: processes cost seconds
@given(cfgs=st.lists(configs(backend=st.just("numpy")), min_size=3, max_size=3),
       ranks=st.lists(st.integers(0, 15), min_size=3, max_size=3))
def test_the_same_stream_in_another_process(outputs, cfgs, ranks):
    name = cfgs[0]["name"]
    todo = [{"rank": r % _ranks(c), "world_size": c["world_size"], "max_tokens": c["max_tokens"],
             "steps": c["steps"], "backend": "numpy"} for c, r in zip(cfgs, ranks)]
    here = [batch_streams.config_digest(outputs[name], c) for c in todo]
    root = Path(__file__).resolve().parents[2]
    paths = [str(root), str(root / "tests" / "helpers"), os.environ.get("PYTHONPATH", "")]
    for seed in ("0", "1"):  # string hashes in another order than this process's, and each other's
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, str(root / "tests" / "helpers" / "batch_streams.py"), outputs[name],
                              json.dumps(todo)], capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout) == here, f"PYTHONHASHSEED={seed}"
