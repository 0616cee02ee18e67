"""Stage 3 (ids.py): the rollout-id rule, its scopes, anomalies; never sample.index."""
from __future__ import annotations

import random

import numpy as np
import pytest

import slime_reference as ref
from conftest import copts, make_sample, read_rows, write_jsonl
from rollout_cli.run.convert import convert
from rollout_cli.core.errors import InvalidInputError, Location
from rollout_cli.pipeline.ids import assign_ids
from rollout_cli.pipeline.validate import ID_EXPLICIT, ID_INVALID, ID_MISSING

INVALID = object()


def _where(i: int) -> Location:
    return Location("steps/4.jsonl", "line", i + 1)


def _assign(rollout_ids, groups=None, scope="strict"):
    n = len(rollout_ids)
    state = np.array(
        [ID_MISSING if r is None else ID_INVALID if r is INVALID else ID_EXPLICIT for r in rollout_ids], dtype=np.int8
    )
    explicit = np.array([r if isinstance(r, int) else 0 for r in rollout_ids], dtype=np.int64)
    groups = list(groups) if groups is not None else [0] * n
    return assign_ids(state, explicit, groups, scope, _where)


def test_spec_mixed_ids_example():
    # slime-spec 3c: [None,2,2,None,0,0,None,7] -> [1,2,2,3,0,0,4,7]
    r = _assign([None, 2, 2, None, 0, 0, None, 7], groups=[0, 0, 0, 1, 1, 1, 2, 2])
    assert r.ids.tolist() == [1, 2, 2, 3, 0, 0, 4, 7]
    assert r.assigned.all()
    assert r.problems == []


def test_mixed_ids_case_matches_oracle():
    import slime_cases

    samples = slime_cases.fresh_case("mixed_ids")["samples"]
    r = _assign([s["rollout_id"] for s in samples], groups=[s["group_index"] for s in samples])
    assert r.ids.tolist() == ref.fill_rollout_ids(samples) == [1, 2, 2, 3, 0, 0, 4, 7]


def test_all_missing_gives_positions():
    assert _assign([None] * 5).ids.tolist() == [0, 1, 2, 3, 4]


def test_all_explicit_kept():
    r = _assign([40, 40, 3, 17], groups=[0, 0, 1, 2])
    assert r.ids.tolist() == [40, 40, 3, 17]


def test_sample_data_step3_rule():
    # sample_data/README: step 3 ids by slime's rule
    rids = [None, None, None, None, 2, 2, 0, 0, None, None, None, None, 7, 7, 7]
    groups = [8] * 4 + [9] * 4 + [10] * 4 + [11] * 3
    assert _assign(rids, groups).ids.tolist() == [1, 3, 4, 5, 2, 2, 0, 0, 6, 8, 9, 10, 7, 7, 7]


@pytest.mark.parametrize("seed", range(20))
def test_fill_rule_matches_oracle_random(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 30)
    rids = [rng.choice([None, None, rng.randint(0, 12)]) for _ in range(n)]
    # one group per explicit value, so strict scope sees no conflict
    groups = [0 if r is None else 100 + r for r in rids]
    got = _assign(rids, groups).ids.tolist()
    assert got == ref.fill_rollout_ids([{"rollout_id": r} for r in rids])


def test_invalid_ids_are_not_assigned_and_use_no_fresh_id():
    r = _assign([None, INVALID, None, 1])
    assert r.assigned.tolist() == [True, False, True, True]
    assert r.ids[[0, 2, 3]].tolist() == [0, 2, 1]


def test_negative_explicit_ids_kept():
    r = _assign([-3, None, -3, None], groups=[1, 0, 1, 0])
    assert r.ids.tolist() == [-3, 0, -3, 1]


# ------------------------------------------------------------------------------ scopes


def test_strict_conflict_is_an_error_naming_id_groups_and_file():
    r = _assign([None, 5, 5, None, 5], groups=[0, 0, 0, 1, 1], scope="strict")
    positions = sorted(i for i, _ in r.problems)
    assert positions == [1, 2, 4]
    for i, p in r.problems:
        assert p.field == "rollout_id"
        assert p.location == _where(i)
        assert "explicit id 5 " in p.message
    first = r.problems[0][1].message  # said once, at the first sample
    assert "prompt groups 0, 1" in first  # both prompt groups named
    assert "steps/4.jsonl:line 2, 3, 5" in first
    assert "--rollout-id-scope" in first
    for _, p in r.problems[1:]:  # its siblings point there
        assert p.message.endswith("see line 2") and "--rollout-id-scope" not in p.message


def test_strict_conflict_is_said_once_with_every_place():
    """15 samples of one id in 5 prompt groups: one sentence naming the places, not 15 copies."""
    r = _assign([7] * 15, groups=[i // 3 for i in range(15)], scope="strict")
    assert len(r.problems) == 15
    messages = [p.message for _, p in r.problems]
    assert sum("--rollout-id-scope step" in m for m in messages) == 1
    assert "15 samples of different prompt groups 0, 1, 2, 3, 4" in messages[0]
    assert "steps/4.jsonl:line 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 and 3 more" in messages[0]
    assert all(len(m) < 100 for m in messages[1:])


def test_strict_same_group_siblings_are_fine():
    r = _assign([5, 5, 5, None], groups=[3, 3, 3, 3], scope="strict")
    assert r.problems == []
    assert r.ids.tolist() == [5, 5, 5, 0]


def test_step_scope_merges_as_slime():
    rids = [None, 5, 5, None, 5]
    r = _assign(rids, groups=[0, 0, 0, 1, 1], scope="step")
    assert r.problems == []
    assert r.ids.tolist() == ref.fill_rollout_ids([{"rollout_id": x} for x in rids]) == [0, 5, 5, 1, 5]
    kinds = [a["kind"] for a in r.anomalies]
    assert "id_reused_across_groups" in kinds


def test_group_scope_remaps_later_keys_with_fresh_ids():
    # explicit {5}; allocation order over missing samples and later (group, id) keys:
    # pos0 missing -> 0, (g1, 5) at pos2 -> 1, pos3 missing -> 2, pos4 is (g1, 5) again -> 1
    r = _assign([None, 5, 5, None, 5], groups=[0, 0, 1, 1, 1], scope="group")
    assert r.problems == []
    assert r.ids.tolist() == [0, 5, 1, 2, 1]


def test_group_scope_three_groups_and_taken_values():
    # ids 0 and 1 are explicit in group 7; group 8 reuses 0 and 1 -> fresh ids skip 0 and 1
    rids = [0, 0, 1, 0, 1, None, 1]
    groups = [7, 7, 7, 8, 8, 8, 9]
    r = _assign(rids, groups, scope="group")
    # fresh allocation order: (8,0)@3 -> 2, (8,1)@4 -> 3, missing@5 -> 4, (9,1)@6 -> 5
    assert r.ids.tolist() == [0, 0, 1, 2, 3, 4, 5]


def test_group_scope_without_conflicts_equals_slime_rule():
    rids = [None, 2, 2, None, 0, 0, None, 7]
    r = _assign(rids, groups=[0, 0, 0, 1, 1, 1, 2, 2], scope="group")
    assert r.ids.tolist() == [1, 2, 2, 3, 0, 0, 4, 7]


# ------------------------------------------------------------------------------ anomalies


def test_non_adjacent_siblings_reported():
    r = _assign([3, None, 3], groups=[0, 0, 0])
    kinds = {a["kind"]: a for a in r.anomalies}
    assert "non_adjacent_siblings" in kinds
    assert kinds["non_adjacent_siblings"]["rollout_id"] == 3


def test_adjacent_siblings_not_reported():
    r = _assign([3, 3, None, 4, 4], groups=[0, 0, 0, 1, 1])
    assert "non_adjacent_siblings" not in {a["kind"] for a in r.anomalies}


# ------------------------------------------------------------------------------ end to end


def _convert(tmp_path, samples, **opts):
    inp = write_jsonl(tmp_path / "in" / "4.jsonl", samples)
    out = tmp_path / "out"
    opts.setdefault("mmap", False)
    result = convert([str(inp)], str(out), copts(**opts))
    return result, read_rows(out)


def test_never_uses_sample_index(tmp_path):
    samples = [make_sample(index=100 + 7 * i, group_index=i // 2, reward=float(i % 2)) for i in range(6)]
    samples[2]["rollout_id"] = 0  # an explicit id equal to no index; defaults must skip it
    _, rows = _convert(tmp_path, samples)
    assert [r["rollout_id"] for r in rows] == ref.fill_rollout_ids(samples) == [1, 2, 0, 3, 4, 5]
    assert [r["sample_index"] for r in rows] == [s["index"] for s in samples]


def test_index_none_samples_stay_separate(tmp_path):
    # slime #1933 collapsed samples with index None into one rollout; the fill rule must not
    samples = [make_sample(index=None, group_index=0, reward=float(i % 2)) for i in range(4)]
    _, rows = _convert(tmp_path, samples)
    assert [r["rollout_id"] for r in rows] == [0, 1, 2, 3]
    assert [r["sample_index"] for r in rows] == [None] * 4


def test_strict_conflict_fails_conversion_naming_file(tmp_path):
    samples = [make_sample(index=i, group_index=i // 2, rollout_id=0) for i in range(4)]
    with pytest.raises(InvalidInputError) as ei:
        _convert(tmp_path, samples)
    e = ei.value
    assert e.exit_code == 3
    assert e.problems and all(p.field == "rollout_id" for p in e.problems)
    assert "4.jsonl" in str(e.problems[0]) and "line 1" in str(e.problems[0])
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_step_scope_end_to_end(tmp_path):
    samples = [make_sample(index=i, group_index=i // 2, rollout_id=0, response_length=1 + i) for i in range(4)]
    _, rows = _convert(tmp_path, samples, rollout_id_scope="step")
    assert [r["rollout_id"] for r in rows] == [0, 0, 0, 0]
    assert [r["rollout_mask_sum"] for r in rows] == [1 + 2 + 3 + 4] * 4


def test_group_scope_end_to_end(tmp_path):
    samples = [make_sample(index=i, group_index=i // 2, rollout_id=0, response_length=1 + i) for i in range(4)]
    _, rows = _convert(tmp_path, samples, rollout_id_scope="group")
    assert [r["rollout_id"] for r in rows] == [0, 0, 1, 1]
    assert [r["rollout_mask_sum"] for r in rows] == [3, 3, 7, 7]


def test_ids_are_per_step(tmp_path):
    # (step, rollout_id) is the unique key: each step starts the fill rule afresh
    write_jsonl(tmp_path / "in" / "1.jsonl", [make_sample(index=i, group_index=0) for i in range(3)])
    write_jsonl(tmp_path / "in" / "2.jsonl", [make_sample(index=10 + i, group_index=1) for i in range(2)])
    convert([str(tmp_path / "in")], str(tmp_path / "out"), copts())
    assert [r["rollout_id"] for r in read_rows(tmp_path / "out", step=1)] == [0, 1, 2]
    assert [r["rollout_id"] for r in read_rows(tmp_path / "out", step=2)] == [0, 1]
    keys = [(r["step"], r["rollout_id"]) for r in read_rows(tmp_path / "out")]
    assert len(set(keys)) == len(keys)


# ------------------------------------------------------------------------------ named rules


def _named(rule, rollout_ids, index):
    from rollout_cli.pipeline.ids import apply_id_rule

    state = np.array([ID_MISSING if r is None else ID_EXPLICIT for r in rollout_ids], dtype=np.int8)
    explicit = np.array([0 if r is None else r for r in rollout_ids], dtype=np.int64)
    return apply_id_rule(rule, state, explicit, [0] * len(rollout_ids), list(index))


def test_named_id_rules_on_the_spec_history_examples():
    """slime-spec section 4 on `mixed_ids`: #1933 merges explicit id 2 with index 2, #1965
    discards every explicit id when the first sample has none, #2031 fills."""
    ids, index = [None, 2, 2, None, 0, 0, None, 7], [0, 1, 1, 2, 3, 3, 4, 5]
    assert _named("fill", ids, index) == [1, 2, 2, 3, 0, 0, 4, 7]
    assert _named("first_sample", ids, index) == list(range(8))
    assert _named("sample_index", ids, index) == [0, 2, 2, 2, 0, 0, 4, 7]
    # #1965 with an explicit first sample: the default samples keep None
    assert _named("first_sample", [10, 10, None, None, 1, None], range(6)) == [10, 10, None, None, 1, None]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("rule", ["fill", "first_sample", "sample_index"])
def test_named_id_rules_match_the_oracle(rule, seed):
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    ids = [rng.choice([None, None, rng.randint(0, 8)]) for _ in range(n)]
    index = [rng.choice([None, rng.randint(0, 20)]) for _ in range(n)]
    samples = [{"rollout_id": r, "index": i} for r, i in zip(ids, index)]
    assert _named(rule, ids, index) == ref.ROLLOUT_ID_RULES[rule](samples)


def test_fill_rule_is_what_convert_assigns():
    from rollout_cli.pipeline.ids import EXPECTED_ID_RULE, ID_RULES

    assert EXPECTED_ID_RULE == "fill" and list(ID_RULES) == ["fill", "first_sample", "sample_index"]
    ids = [None, 2, 2, None, 0, 0, None, 7]
    assert _named("fill", ids, [None] * 8) == _assign(ids, groups=[0, 0, 0, 1, 1, 1, 2, 2]).ids.tolist()
