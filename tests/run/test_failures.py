"""--on-error fail over a whole run: every step's invalid samples, in input order, up to
--max-errors, with the total; nothing committed (run/failures.py through convert)."""
from __future__ import annotations

import pytest

from conftest import copts, make_sample, tree_digest, write_jsonl
from rollout_cli.core.errors import InvalidInputError, Location, Problem
from rollout_cli.run import convert as convert_mod
from rollout_cli.run.convert import convert
from rollout_cli.run.failures import RunFailures


def _step(path, n: int, bad: list[int]):
    """n samples, one rollout each; those at the 1-based lines `bad` have an invalid status."""
    samples = [make_sample(index=i, group_index=i) for i in range(n)]
    for line in bad:
        samples[line - 1]["status"] = "bogus"
    return write_jsonl(path, samples)


@pytest.fixture
def run_dir(tmp_path):
    """Four steps: 1 clean (the largest), 2 with 3 bad samples, 3 with 2, 4 with 2 (the smallest)."""
    d = tmp_path / "in"
    _step(d / "1.jsonl", 12, [])
    _step(d / "2.jsonl", 8, [2, 3, 5])
    _step(d / "3.jsonl", 6, [1, 4])
    _step(d / "4.jsonl", 5, [2, 5])
    return d


def _where(e: InvalidInputError) -> list[tuple[str, int]]:
    return [(p.location.file.rsplit("/", 1)[-1], p.location.number) for p in e.problems]


ALL = [("2.jsonl", 2), ("2.jsonl", 3), ("2.jsonl", 5), ("3.jsonl", 1), ("3.jsonl", 4), ("4.jsonl", 2), ("4.jsonl", 5)]


@pytest.mark.parametrize("workers", [1, 2])
def test_every_invalid_sample_of_the_run_in_input_order(run_dir, tmp_path, workers):
    """Today's main stopped at the first failing step: '3 invalid sample(s): .../2.jsonl:line 2'."""
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError) as e:
        convert([str(run_dir)], str(out), copts(workers=workers, max_errors=50))
    msg = str(e.value)
    assert msg.startswith(f"7 invalid samples in 3 files: {run_dir / '2.jsonl'}:line 2: status: "), msg
    assert _where(e.value) == ALL
    assert not out.exists()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_budget_lists_the_first_problems_in_input_order(run_dir, tmp_path, workers):
    out = tmp_path / "out"
    with pytest.raises(InvalidInputError) as e:
        convert([str(run_dir)], str(out), copts(workers=workers, max_errors=3))
    msg = str(e.value)
    assert _where(e.value) == ALL[:3]
    assert "(the first 3 listed; stopped at --max-errors 3)" in msg
    assert not out.exists()
    if workers == 1:
        # one step at a time, largest first: 1, then 2, whose 3 problems fill the budget: 3 and
        # 4 are never read
        assert msg.startswith(f"at least 3 invalid samples in 1 file (the first 3 listed; stopped at --max-errors 3): "
                              f"{run_dir / '2.jsonl'}:line 2: status"), msg
    else:  # the total is what the workers had found when the budget was full
        total = int(msg.split()[2])
        assert 3 <= total <= 7, msg


def test_the_default_budget_is_20(tmp_path):
    _step(tmp_path / "in" / "1.jsonl", 15, list(range(1, 16)))
    _step(tmp_path / "in" / "2.jsonl", 15, list(range(1, 16)))
    with pytest.raises(InvalidInputError) as e:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), copts())
    assert len(e.value.problems) == 20
    assert _where(e.value)[14:16] == [("1.jsonl", 15), ("2.jsonl", 1)]
    assert str(e.value).startswith("30 invalid samples in 2 files (the first 20 listed, --max-errors 20): ")


def test_a_failed_run_leaves_the_previous_output_as_it_was(run_dir, tmp_path):
    out = tmp_path / "out"
    good = tmp_path / "good"
    _step(good / "1.jsonl", 4, [])
    convert([str(good)], str(out), copts())
    before = tree_digest(out)
    for workers in (1, 2):
        with pytest.raises(InvalidInputError, match="^7 invalid samples in 3 files"):
            convert([str(run_dir)], str(out), copts(workers=workers, overwrite=True, max_errors=50))
        assert tree_digest(out) == before


def test_a_step_read_in_parts_numbers_its_lines_from_the_files_start(tmp_path, monkeypatch):
    """Problems of later byte ranges carry the file's line numbers, also when a part stops."""
    import rollout_cli.inputs.jsonl.reader as rj
    from rollout_cli.run.engines.local import InlineEngine

    real = rj.split_ranges
    monkeypatch.setattr(rj, "split_ranges", lambda path, parts, min_bytes=1: real(path, parts, min_bytes=1))
    monkeypatch.setattr(convert_mod, "make_engine", lambda *a, **k: InlineEngine())
    src = _step(tmp_path / "in" / "3.jsonl", 40, [5, 25, 38])
    with pytest.raises(InvalidInputError) as e:
        convert([str(src)], str(tmp_path / "out"), copts(workers=3, max_errors=50))
    assert _where(e.value) == [("3.jsonl", 5), ("3.jsonl", 25), ("3.jsonl", 38)]
    assert str(e.value).startswith("3 invalid samples in 1 file: ")
    with pytest.raises(InvalidInputError) as e:
        convert([str(src)], str(tmp_path / "out"), copts(workers=3, max_errors=2))
    assert _where(e.value) == [("3.jsonl", 5), ("3.jsonl", 25)]


def test_one_step_failing_as_a_whole_keeps_its_own_message(tmp_path):
    src = tmp_path / "in" / "1.jsonl.gz"
    src.parent.mkdir()
    src.write_bytes(b"not gzip at all")
    with pytest.raises(InvalidInputError) as e:
        convert([str(src)], str(tmp_path / "out"), copts())
    assert "invalid samples" not in str(e.value) and str(src) in str(e.value)


def test_a_whole_file_error_and_invalid_samples_are_reported_together(tmp_path):
    _step(tmp_path / "in" / "1.jsonl", 4, [3])
    bad = tmp_path / "in" / "2.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(InvalidInputError) as e:
        convert([str(tmp_path / "in")], str(tmp_path / "out"), copts())
    assert str(e.value).startswith("2 problems in 2 files: ")
    assert [p.location.file for p in e.value.problems] == [str(tmp_path / "in" / "1.jsonl"), str(bad)]
    assert e.value.problems[1].location.number is None


def test_enough_needs_the_steps_before_the_budget_settled():
    f = RunFailures(2)
    p = Problem(Location("b", "line", 1), "status", "bad")
    f.add(1, [p, p])
    assert not f.enough({1}, 3)  # step 0 may still hold earlier problems
    assert f.enough({0, 1}, 3)
    f.add(0, [p])
    assert f.enough({0, 1}, 3)
