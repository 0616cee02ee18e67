"""ROLL's agentic DataProto rows onto samples: the real tokens, the response from the first
generated token, the shifted log-probs put back on their tokens, the summed scores, the groups
and rollouts from traj_group_id and traj_id, and bad rows named by field."""
from __future__ import annotations

import numpy as np
import pytest

from rollout_cli.inputs.roll.mapping import Bad, _metadata, plan

PAD = 0


def batch_samples(np, proto) -> list:
    """The oracle: the samples of one DataProto's rows, row by row, in row order (a row that cannot
    be mapped is its Bad, with `.row`; a batch that cannot be read at all raises Bad); the
    reader's columns (mapping.columns) are held to it below."""
    p = plan(np, proto)
    out: list = []
    for b in range(p.rows):
        if b in p.bad:
            out.append(p.bad[b])
            continue
        n, p0 = int(p.n[b]), int(p.p0[b])
        s = {"group_index": p.gid[b], "rollout_id": p.rid[b], "tokens": p.tokens[b, :n].astype(np.int64),
             "response_length": n - p0, "loss_mask": p.rm[b, p0:n].astype(np.int64),
             "reward": float(p.reward[b]), "status": "completed"}
        if p.lp is not None:
            s["rollout_log_probs"] = np.concatenate([np.zeros(1), p.lp[b].astype(np.float64)])[p0:n] if n else np.zeros(0)
        md = _metadata(np, p, b)
        if md:
            s["metadata"] = md
        if isinstance(md.get("tag"), str) and md["tag"]:
            s["source"] = md["tag"]  # the env's tag (its type): the sample's source
        out.append(s)
    return out


def proto(rows: list[dict], seq_len: int = 16, logprobs: bool = True) -> dict:
    """A DataProto as plain data, built as formulate_rollouts builds each row: rows are
    {"segments": [(is_response, tokens, logprobs)], "score": float, "group": str, "traj": str}."""
    ids, am, rm, sc, lp = [], [], [], [], []
    for r in rows:
        toks = [t for _, ts, _ in r["segments"] for t in ts]
        resp = [int(x) for x, ts, _ in r["segments"] for _ in ts]
        lps = [v if x else 0.0 for x, ts, ls in r["segments"] for v in ls]
        n = len(toks)
        pad = seq_len - n
        ids.append(toks + [PAD] * pad)
        am.append([1] * n + [0] * pad)
        rm.append(resp + [0] * pad)
        s = [0.0] * seq_len
        s[n - 1] = r["score"]
        sc.append(s)
        lp.append((lps + [0.0] * pad)[1:])
    batch = {"input_ids": np.array(ids, np.int64), "attention_mask": np.array(am, np.int64),
             "response_mask": np.array(rm, bool), "scores": np.array(sc, np.float32),
             "prompt_mask": np.zeros((len(rows), seq_len), bool), "position_ids": np.zeros((len(rows), seq_len), np.int64)}
    if logprobs:
        batch["infer_logprobs"] = np.array(lp, np.float32)
    nt = {"traj_group_id": np.array([r["group"] for r in rows], object), "traj_id": np.array([r["traj"] for r in rows], object),
          "tags": np.array(["sokoban"] * len(rows), object), "env_ids": np.array(list(range(len(rows))), object),
          "episode_scores": np.array([r["score"] for r in rows], object)}
    steps = np.empty(len(rows), object)
    for i, r in enumerate(rows):
        steps[i] = np.array([r["score"], 0.0], object)  # an object array in an object array
    nt["step_scores"] = steps
    return {"batch": batch, "non_tensor_batch": nt, "meta_info": {"metrics": {}}}


def two_turns(group="g0", traj="g0_0", score=1.0):
    return {"segments": [(False, [11, 12, 13], [0] * 3), (True, [21, 22], [-0.5, -0.25]), (False, [31], [0.0]),
                         (True, [41, 42], [-1.0, -0.125])], "score": score, "group": group, "traj": traj}


def test_a_two_turn_row():
    (s,) = batch_samples(np, proto([two_turns()]))
    assert s["tokens"].tolist() == [11, 12, 13, 21, 22, 31, 41, 42]  # the padding cut by attention_mask
    assert s["response_length"] == 5 and s["loss_mask"].tolist() == [1, 1, 0, 1, 1]
    # infer_logprobs[j-1] is token j's: put back on its token
    assert s["rollout_log_probs"].tolist() == [-0.5, -0.25, 0.0, -1.0, -0.125]
    assert s["reward"] == 1.0 and s["status"] == "completed" and s["source"] == "sokoban"
    assert s["metadata"] == {"tag": "sokoban", "env_id": 0, "traj_group_id": "g0", "traj_id": "g0_0",
                             "episode_score": 1.0, "step_scores": [1.0, 0.0]}


def test_groups_and_rollouts_in_order_of_first_appearance():
    rows = [two_turns("b", "b_0"), two_turns("a", "a_0"), two_turns("b", "b_1"), two_turns("a", "a_0")]
    out = batch_samples(np, proto(rows))
    assert [s["group_index"] for s in out] == [0, 1, 0, 1]
    assert [s["rollout_id"] for s in out] == [0, 1, 2, 1]  # step-wise rows of one rollout share its traj_id


def test_no_log_probs():
    (s,) = batch_samples(np, proto([two_turns()], logprobs=False))
    assert "rollout_log_probs" not in s


def test_a_row_filling_the_sequence_length():
    r = two_turns()
    (s,) = batch_samples(np, proto([r], seq_len=8))
    assert len(s["tokens"]) == 8 and s["rollout_log_probs"].tolist()[-1] == -0.125


@pytest.mark.parametrize("kind, field, message", [
    ("attention", "attention_mask", "expected 1 on the real tokens then 0 (right padding)"),
    ("response_pad", "response_mask", "expected 0 past the 8 real tokens"),
    ("scores", "scores", "expected finite scores"),
])
def test_a_bad_row_is_named_by_row_and_field(kind, field, message):
    p = proto([two_turns(), two_turns("g0", "g0_1")])
    b = p["batch"]
    if kind == "attention":
        b["attention_mask"][1, 2] = 0
    elif kind == "response_pad":
        b["response_mask"][1, 12] = True
    else:
        b["scores"][1, 3] = np.nan
    good, bad = batch_samples(np, p)
    assert isinstance(good, dict) and isinstance(bad, Bad)
    assert (bad.row, bad.field) == (1, field) and message in bad.message


@pytest.mark.parametrize("change, field, message", [
    (lambda p: p["batch"].pop("response_mask"), "response_mask", "missing (not the agentic pipeline's layout)"),
    (lambda p: p["non_tensor_batch"].pop("traj_id"), "traj_id", "missing from non_tensor_batch"),
    (lambda p: p["batch"].__setitem__("scores", np.zeros((2, 15), np.float32)), "scores", "expected shape (2, 16)"),
    (lambda p: p["batch"].__setitem__("infer_logprobs", np.zeros((2, 16), np.float32)), "infer_logprobs",
     "expected shape (2, 15) (input_ids shifted by one)"),
    (lambda p: p.__setitem__("batch", None), "batch", "missing: the DataProto holds no tensors"),
])
def test_a_batch_not_of_the_agentic_layout_is_named_by_field(change, field, message):
    p = proto([two_turns(), two_turns("g0", "g0_1")])
    change(p)
    with pytest.raises(Bad) as e:
        batch_samples(np, p)
    assert e.value.field == field and message in e.value.message


def _odd_rows():
    """Rows for every branch of the columnar cut: a response from token 0 (the shifted
    log-probs' missing first entry), no response, out-of-range ids, a 2 in the response mask."""
    first = {"segments": [(True, [5, 6, 7], [-0.5, -0.25, -0.75])], "score": 2.0, "group": "g1", "traj": "g1_0"}
    none = {"segments": [(False, [5, 6], [0.0, 0.0])], "score": 0.5, "group": "g1", "traj": "g1_1"}
    p = proto([two_turns(), first, none, two_turns("g2", "g2_0"), two_turns("g2", "g2_1"), two_turns("g2", "g2_2")])
    p["batch"]["input_ids"][3, 1] = -4
    rm = p["batch"]["response_mask"].astype(np.int64)
    rm[4, 4] = 2
    p["batch"]["response_mask"] = rm
    return p


@pytest.mark.parametrize("logprobs", [True, False])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_the_reader_s_columns_are_the_sample_dicts_columns(size, logprobs):
    from rollout_cli.inputs.base import RawChunk
    from rollout_cli.inputs.columns import columnar
    from rollout_cli.inputs.roll.mapping import columns, plan

    p = _odd_rows()
    if not logprobs:
        del p["batch"]["infer_logprobs"]
    rows = batch_samples(np, p)
    assert [type(r).__name__ for r in rows] == ["dict", "dict", "dict", "Bad", "Bad", "dict"]
    assert rows[1]["rollout_log_probs"].tolist()[1:] == [-0.25, -0.75] if logprobs else True
    pl = plan(np, p)
    for a in range(0, len(rows), size):
        b = min(a + size, len(rows))
        part = [None if isinstance(r, Bad) else r for r in rows[a:b]]
        want, got = columnar(RawChunk("f", "row", list(range(a, b)), part)).columns, columns(np, pl, a, b)
        assert list(got) == list(want)
        for k in want:
            # the mask comes as uint8 and float32 log-probs stay float32 (narrower, the same values)
            if hasattr(want[k], "equals"):
                assert got[k].cast(want[k].type).equals(want[k]), k
                assert got[k].type == want[k].type or k in ("loss_mask", "rollout_log_probs"), k
            else:
                assert got[k] == want[k], k
