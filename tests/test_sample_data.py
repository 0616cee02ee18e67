"""Checks for sample_data/: reproducible, the three formats agree, slime's layout and invariants."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

import torch

DATA = Path(__file__).resolve().parents[1] / "sample_data"
SCRIPT = DATA / "make_sample_data.py"
STEMS = ("1", "2", "3", "eval_3")
FLOAT32_LIST_FIELDS = ("rollout_log_probs", "teacher_log_probs")


def _load_script():
    spec = importlib.util.spec_from_file_location("make_sample_data", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


msd = _load_script()


FRAMEWORKS = ("nemo_rl", "miles")  # written by make_framework_data.py (prime_rl/ by make_prime_rl.py)
# folders written by a generator of their own (make_<name>.py), tested with their format
OWN_GENERATORS = ("prime_rl", "pipelinerl", "open_instruct", "atropos", "roll", "skyrl", "verl", "verl_text", "trl",
                  "chat_drift", "tokenizer",  # these four: make_text_dumps.py
                  "vlm")  # bench/gen_vlm.py


def _data_files(root: Path, suffixes: tuple[str, ...], frameworks: bool = False) -> list[Path]:
    """slime's sample files (or, with `frameworks`, nemo_rl's and miles') under root."""
    found = (p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.suffix in suffixes)
    return sorted(p for p in found if p.parts[0] not in OWN_GENERATORS and (p.parts[0] in FRAMEWORKS) == frameworks)


# ---------------------------------------------------------------------------------------- loaders


def load_pt(path: Path) -> dict:
    return torch.load(path, weights_only=True)


def detensor(sample: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in sample.items()}


def load_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def load_parquet(path: Path) -> list[dict]:
    table = pq.read_table(path)
    columns = {}
    for field in table.schema:
        values = table.column(field.name).to_pylist()
        if field.metadata and field.metadata.get(b"encoding") == b"json":
            values = [None if v is None else orjson.loads(v) for v in values]
        columns[field.name] = values
    names = table.schema.names
    return [{name: columns[name][i] for name in names} for i in range(table.num_rows)]


def assert_same_samples(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for sa, sb in zip(a, b):
        assert list(sa) == list(sb)  # same keys, same order
        for key in sa:
            va, vb = sa[key], sb[key]
            if key in FLOAT32_LIST_FIELDS and va is not None and vb is not None:
                assert np.array_equal(np.asarray(va, np.float32), np.asarray(vb, np.float32)), key
            else:
                assert va == vb, (sa["index"], key, va, vb)


# ------------------------------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample_data")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], check=True)
    return out


def test_regeneration_is_byte_identical(regenerated: Path):
    committed = _data_files(DATA, (".jsonl", ".parquet"))
    assert committed == _data_files(regenerated, (".jsonl", ".parquet"))
    assert len(committed) == 13
    for rel in committed:
        assert (DATA / rel).read_bytes() == (regenerated / rel).read_bytes(), rel


def test_regenerated_pt_equal(regenerated: Path):
    committed = _data_files(DATA, (".pt",))
    assert committed == _data_files(regenerated, (".pt",))
    assert len(committed) == 5
    for rel in committed:
        a, b = load_pt(DATA / rel), load_pt(regenerated / rel)
        assert a["rollout_id"] == b["rollout_id"]
        assert_same_samples([detensor(s) for s in a["samples"]], [detensor(s) for s in b["samples"]])


@pytest.mark.parametrize("stem", STEMS)
def test_pt_has_slime_layout(stem: str):
    payload = load_pt(DATA / "pt" / "rollout_data" / f"{stem}.pt")
    assert list(payload) == ["rollout_id", "samples"]
    assert type(payload["rollout_id"]) is int and payload["rollout_id"] == int(stem.split("_")[-1])
    for s in payload["samples"]:
        assert tuple(s) == msd.ALL_FIELDS
        assert isinstance(s["status"], str)
        assert list(s["spec_info"]) == list(msd.SPEC_INFO_KEYS)
        assert list(s["prefix_cache_info"]) == list(msd.PREFIX_CACHE_KEYS)
        assert list(s["trace"]) == ["version", "trace_id", "events", "sample_id", "group_id", "attempt"]
        for key in msd.TENSOR_FIELDS:
            if s[key] is not None:
                assert isinstance(s[key], torch.Tensor) and s[key].dtype == torch.int32, key


@pytest.mark.parametrize("stem", STEMS)
def test_three_formats_agree(stem: str):
    pt = [detensor(s) for s in load_pt(DATA / "pt" / "rollout_data" / f"{stem}.pt")["samples"]]
    js = load_jsonl(DATA / "jsonl" / "rollout_data" / f"{stem}.jsonl")
    pa_ = load_parquet(DATA / "parquet" / "rollout_data" / f"{stem}.parquet")
    assert_same_samples(pt, js)
    assert_same_samples(pt, pa_)
    assert_same_samples(pt, msd.build_all()[stem])


def test_reward_dict_formats_agree():
    pt = load_pt(DATA / "reward_dict" / "pt" / "rollout_data" / "1.pt")
    assert pt["rollout_id"] == 1
    pt_samples = [detensor(s) for s in pt["samples"]]
    js = load_jsonl(DATA / "reward_dict" / "jsonl" / "rollout_data" / "1.jsonl")
    assert_same_samples(pt_samples, js)
    plain = load_jsonl(DATA / "jsonl" / "rollout_data" / "1.jsonl")
    for s, p in zip(js, plain):
        assert set(s["reward"]) == {"accuracy", "format"}
        assert s["reward"]["accuracy"] == p["reward"]
        assert "raw_reward" not in s["metadata"]
        assert {k: v for k, v in s.items() if k != "reward"} == {k: v for k, v in p.items() if k != "reward"}


def _all_samples():
    for stem in STEMS:
        for s in load_jsonl(DATA / "jsonl" / "rollout_data" / f"{stem}.jsonl"):
            yield stem, s


@pytest.mark.parametrize("stem,sample", list(_all_samples()), ids=lambda x: x if isinstance(x, str) else "")
def test_invariants(stem: str, sample: dict):
    toks, rl = sample["tokens"], sample["response_length"]
    assert 12 <= len(toks) <= 60 and all(0 <= t < 50000 for t in toks)
    assert 0 < rl <= len(toks)
    assert len(sample["loss_mask"]) == rl and set(sample["loss_mask"]) <= {0, 1}
    assert len(sample["rollout_log_probs"]) == rl
    for lp, m in zip(sample["rollout_log_probs"], sample["loss_mask"]):
        assert lp == float(np.float32(lp))
        assert (lp == 0.0) if m == 0 else (lp < 0.0)
    assert sample["status"] in {"completed", "truncated", "aborted"}
    off, ids = sample["rollout_top_p_token_offsets"], sample["rollout_top_p_token_ids"]
    assert (off is None) == (ids is None) == (stem != "3")
    if off is not None:
        assert len(off) == rl + 1 and off[0] == 0 and off[-1] == len(ids)
        assert all(a <= b for a, b in zip(off, off[1:]))
        resp = toks[len(toks) - rl:]
        assert all(resp[i] in ids[off[i]:off[i + 1]] for i in range(rl))
    experts = sample["rollout_routed_experts"]
    assert (experts is None) == (stem != "3")
    if experts is not None:
        assert np.asarray(experts).shape == (len(toks) - 1, 2, 2)


def test_step_content():
    s1, s2, s3, ev = (load_jsonl(DATA / "jsonl" / "rollout_data" / f"{s}.jsonl") for s in STEMS)
    # step 1: default GRPO, 4 x 4, ids None, a zero-variance group, one removed sample
    assert [s["index"] for s in s1] == list(range(16))
    assert [s["group_index"] for s in s1] == [g for g in range(4) for _ in range(4)]
    assert all(s["rollout_id"] is None for s in s1)
    assert all(s["reward"] in (0.0, 1.0) for s in s1)
    groups = [[s["reward"] for s in s1[i:i + 4]] for i in range(0, 16, 4)]
    assert any(len(set(g)) == 1 for g in groups)
    assert sum(s["remove_sample"] for s in s1) == 1
    assert all(set(s["loss_mask"]) == {1} for s in s1)
    # step 2: compact; ids = index of the execution's first sample, shared by adjacent siblings
    assert [s["index"] for s in s2] == list(range(16, 16 + len(s2)))
    assert sorted({s["group_index"] for s in s2}) == [4, 5, 6, 7]
    for s in s2:
        assert isinstance(s["rollout_id"], int)
        assert s2[[x["index"] for x in s2].index(s["rollout_id"])]["rollout_id"] == s["rollout_id"]
        assert "round_number" in s["metadata"]
    assert any(0 in s["loss_mask"] for s in s2)
    assert any("raw_reward" in s["metadata"] for s in s2)
    # step 3: mixed default / explicit small ids
    assert sorted({s["group_index"] for s in s3}) == [8, 9, 10, 11]
    assert {s["rollout_id"] for s in s3} == {None, 0, 2, 7}
    assert sum(s["status"] == "aborted" for s in s3) == 1
    # eval: index restarts per dataset, no rollout ids
    assert [s["index"] for s in ev] == [0, 1, 2, 0, 1, 2, 3]
    assert all(s["rollout_id"] is None for s in ev)


# ------------------------------------------------------------------------------------------ other frameworks


@pytest.fixture(scope="module")
def regenerated_frameworks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("framework_data")
    subprocess.run([sys.executable, str(DATA / "make_framework_data.py"), "--out", str(out)], check=True)
    return out


def test_framework_data_regenerates_identically(regenerated_frameworks: Path):
    committed = _data_files(DATA, (".jsonl", ".parquet", ".pt"), frameworks=True)
    assert committed == _data_files(regenerated_frameworks, (".jsonl", ".parquet", ".pt"), frameworks=True)
    assert len(committed) == 12
    for rel in committed:
        if rel.suffix == ".pt":  # miles' dataclasses: compared as plain data
            assert load_pt_plain(DATA / rel) == load_pt_plain(regenerated_frameworks / rel), rel
        else:
            assert (DATA / rel).read_bytes() == (regenerated_frameworks / rel).read_bytes(), rel
    assert sum((DATA / rel).stat().st_size for rel in committed) < 100_000  # kept small


def load_pt_plain(path: Path):
    from rollout_cli.inputs.slime_pt.pt_pickle import load_pt as load

    def plain(v):
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return plain(load(path))


def test_nemo_rl_logs_have_the_loggers_shape():
    for path in sorted((DATA / "nemo_rl" / "exp_001").glob("train_data_step*.jsonl")):
        lines = load_jsonl(path)
        width = len(lines[0]["token_ids"][0])
        assert width % 8 == 0 and [r["idx"] for r in lines] == list(range(len(lines)))
        for r in lines:
            assert list(r) == ["content", "rewards", "input_lengths", "token_ids", "token_loss_mask", "sample_loss_mask",
                               "advantages", "generation_logprobs", "prev_logprobs", "idx"]
            assert all(isinstance(v, list) and len(v) == 1 for k, v in r.items() if k != "idx")
            assert all(len(r[k][0]) == width for k in ("token_ids", "token_loss_mask", "advantages",
                                                        "generation_logprobs", "prev_logprobs"))
            n = r["input_lengths"][0]
            assert n <= width and not any(r["token_ids"][0][n:]) and 1 in r["token_loss_mask"][0][:n]
    for r in load_jsonl(DATA / "nemo_rl" / "exp_001" / "val_data_step2.jsonl"):
        assert list(r) == ["content", "rewards", "idx"] and {m["role"] for m in r["content"][0]} == {"user", "assistant"}


def test_miles_dump_has_the_writers_layout():
    root = DATA / "miles"
    for stem in ("1", "2", "eval_2"):
        payload = load_pt_plain(root / "rollout_data" / f"{stem}.pt")
        assert list(payload) == ["rollout_id", "metadata", "samples"]
        mirror = pq.read_table(root / "dashboard_columns" / f"rollout_{stem}.parquet")
        assert mirror.schema.names == ["sample_index", "response_length", "total_length", "tokens", "loss_mask",
                                       "rollout_log_probs"]
        assert mirror.column("tokens").to_pylist() == [s["tokens"] for s in payload["samples"]]
        assert all("messages" not in s["metadata"] for s in payload["samples"])
        assert (root / "trajectory" / f"{stem}.jsonl").exists()
    adapters = [s["adapter"] for s in load_pt_plain(root / "rollout_data" / "2.pt")["samples"]]
    assert all(a is not None and set(a) == {"name", "slot"} for a in adapters)


# ------------------------------------------------------------------------------------- prime-rl

PRIME_RL = DATA / "prime_rl"


def _prime_rl_generator():
    spec = importlib.util.spec_from_file_location("make_prime_rl", DATA / "make_prime_rl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_prime_rl_sample_data_is_reproducible(tmp_path):
    _prime_rl_generator().build(tmp_path)
    shipped = {p.relative_to(PRIME_RL): p.read_bytes() for p in PRIME_RL.rglob("*") if p.is_file()}
    made = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert shipped == made
    assert sum(len(b) for b in shipped.values()) < 100_000  # tens of KB


def test_prime_rl_sample_data_holds_each_case():
    run = PRIME_RL / "outputs" / "run" / "rollouts"
    eps = {(p.parts[-4], p.parts[-3], p.parts[-2]): load_jsonl(p) for p in run.glob("step_*/*/*/traces.jsonl")}
    assert sorted(eps) == [("step_1", "train", "all"), ("step_1", "train", "effective"), ("step_2", "eval", "all"),
                           ("step_2", "eval", "effective"), ("step_2", "train", "all"), ("step_2", "train", "effective")]
    every = [e for k, v in eps.items() if k[1] == "train" for e in v]
    leaves = [sum(1 for i in range(len(t["nodes"])) if all(n.get("parent") != i for n in t["nodes"]))
              for e in every for t in e["traces"]]
    assert max(leaves) == 2  # a forked (multi-branch) trace
    assert any(len(e["traces"]) == 3 and not e["traces"][2]["agent"]["trainable"] for e in every)  # multi-agent
    errored = [e for e in every if not e["ok"]]
    assert len(errored) == 1 and errored[0] in eps[("step_1", "train", "all")]
    for k, v in eps.items():  # effective: trained traces only, with advantages; all: as they arrived
        nodes = [n for e in v for t in e["traces"] for n in t["nodes"] if any(n["mask"])]
        if k[1] == "train":
            assert all(("advantages" in n) == (k[2] == "effective") for n in nodes)
        if k[2] == "effective":
            assert all(t["ok"] and t["agent"]["trainable"] for e in v for t in e["traces"])


def test_every_generator_prints_usage_and_writes_nothing(tmp_path):
    """Each sample_data/make_*.py parses its arguments: --help prints its usage and writes
    nothing (an output folder named --help, say)."""
    from script_help import git_status, help_of

    scripts = sorted(DATA.glob("make_*.py"))
    assert len(scripts) >= 9
    before = git_status()
    for script in scripts:
        cwd = tmp_path / script.stem
        cwd.mkdir()
        assert "out" in help_of(script, cwd)
    assert git_status() == before
