"""Hostile inputs: whatever a dump contains, `convert` under the default `--on-error fail` ends in
exit 0 (the input happened to be valid, and the output then verifies) or exit 3 with a message that
names the file (and the line / row / sample and the field where a sample is at fault). Never exit 1,
never a traceback, never a manifest after a failure. Pickles never run code without --trust-pickle.
Unwritable or full output locations give a clear error and leave any previous output untouched.

Fuzzing is bounded (hypothesis, derandomized, a few dozen examples per format) so that the whole
file runs in well under a minute.
"""
from __future__ import annotations

import errno
import gzip
import hashlib
import itertools
import json
import math
import os
import re
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from typer.testing import CliRunner

from rollout_cli.cli.app import app
from rollout_cli.verification.check import verify_output

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data"

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])

# the fields a message may name (sample keys, metadata keys, and the step number)
FIELDS = {
    "step", "rollout_id", "index", "group_index", "tokens", "response_length", "loss_mask", "reward", "status",
    "remove_sample", "metadata", "metadata.raw_reward", "round_number", "source", "rollout_log_probs", "teacher_log_probs",
    "rollout_top_p_token_ids", "rollout_top_p_token_offsets", "rollout_routed_experts", "train_metadata",
    "multimodal_train_inputs", "prompt", "response", "label", "samples", "spec_info", "prefix_cache_info", "trace",
    "multimodal_inputs", "apply_chat_template_kwargs",
}
# what a record-level problem (no single field at fault) may say instead
RECORD_LEVEL = ("invalid JSON", "expected a JSON object", "expected a sample dict")

_counter = itertools.count()


def fresh(tmp_path: Path) -> Path:
    d = tmp_path / f"case{next(_counter)}"
    d.mkdir()
    return d


def convert(inputs, out: Path, *extra: str):
    return CliRunner().invoke(app, ["convert", *map(str, inputs), str(out), "-q", "--workers", "1", *extra])


def assert_clean_outcome(res, out: Path, display: str, *, located: str | None = None) -> None:
    """Exit 0 with an output that verifies, or exit 3 naming the file (and where, and the field)."""
    try:
        event(f"exit {res.exit_code}")  # shown by --hypothesis-show-statistics
    except InvalidArgument:
        pass  # not inside a hypothesis test
    assert res.exit_code in (0, 3), f"exit {res.exit_code}: {res.output}"
    assert "Traceback" not in res.output, res.output
    assert "internal error" not in res.output, res.output
    if res.exit_code == 0:
        assert (out / "manifest.json").exists()
        v = verify_output(str(out))
        assert v["failures"] == [], v["failures"]
        return
    assert not (out / "manifest.json").exists(), "a failed run left a manifest"
    err = res.stderr
    assert display in err, f"the message does not name the file {display}: {err}"
    m = re.search(re.escape(display) + r":(line|row|sample) (\d+): (.*)", err)
    if located is not None and m is None:
        # a sample-level fault must be located, unless the whole file was refused
        assert re.search(re.escape(display) + r": \S", err), err
    if m:
        rest = m.group(3)
        field = rest.split(":", 1)[0]
        assert field in FIELDS or rest.startswith(RECORD_LEVEL), f"no field named: {err}"


def base_sample(i: int = 0, **kw) -> dict:
    d = {
        "group_index": i // 2, "index": i, "rollout_id": None, "tokens": [11, 12, 13, 100 + i, 200 + i],
        "response_length": 2, "reward": float(i % 2), "loss_mask": [1, 1], "status": "completed",
        "metadata": {"round_number": 0}, "rollout_log_probs": [-0.5, -0.25],
    }
    d.update(kw)
    return d


# ------------------------------------------------------------------------------- value strategies

_ints = st.one_of(
    st.integers(-3, 3), st.sampled_from([2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), -(2**63) - 1]),
    st.integers(-(2**70), 2**70),
)
_floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0]))
_scalars = st.one_of(st.none(), st.booleans(), _ints, _floats, st.text(max_size=8), st.sampled_from(["completed", "truncated", ""]))
_junk = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=12,
)
MUTABLE = ["tokens", "response_length", "loss_mask", "reward", "status", "rollout_id", "index", "group_index", "metadata",
           "remove_sample", "rollout_log_probs", "teacher_log_probs", "rollout_top_p_token_ids", "rollout_routed_experts",
           "train_metadata", "step", "source", "prompt", "label"]


def _deep(n: int):
    v: list = [1]
    for _ in range(n):
        v = [v]
    return v


_hostile = st.one_of(
    _junk,
    st.lists(_ints, max_size=6),
    st.lists(_floats, max_size=4),
    st.builds(_deep, st.integers(1, 40)),
    st.dictionaries(st.sampled_from(["raw_reward", "round_number", "source_name", "x"]), _junk, max_size=3),
)


# ------------------------------------------------------------------------------- JSONL


@st.composite
def jsonl_bytes(draw) -> bytes:
    n = draw(st.integers(1, 4))
    lines = []
    for i in range(n):
        s = base_sample(i)
        for _ in range(draw(st.integers(0, 2))):
            key = draw(st.sampled_from(MUTABLE))
            if draw(st.booleans()):
                s[key] = draw(_hostile)
            else:
                s.pop(key, None)
        # allow_nan: NaN / Infinity literals are what Python's json writes; they are not JSON
        line = json.dumps(s, allow_nan=True).encode()
        damage = draw(st.sampled_from(["none", "none", "truncate", "bytes", "blank", "crlf", "array"]))
        if damage == "truncate":
            line = line[: draw(st.integers(0, len(line)))]
        elif damage == "bytes":
            k = draw(st.integers(0, len(line)))
            line = line[:k] + draw(st.binary(min_size=1, max_size=4)) + line[k:]
        elif damage == "blank":
            lines.append(b"   ")
        elif damage == "crlf":
            line += b"\r"
        elif damage == "array":
            line = b"[" + line + b"]"
        lines.append(line)
    data = b"\n".join(lines) + draw(st.sampled_from([b"\n", b""]))
    return data


@FUZZ
@given(data=jsonl_bytes())
def test_fuzzed_jsonl(tmp_path, data):
    d = fresh(tmp_path)
    src = d / "7.jsonl"
    src.write_bytes(data)
    res = convert([src], d / "out")
    assert_clean_outcome(res, d / "out", str(src), located="line")


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.floats(0, 1)), gz=st.booleans())
def test_byte_flips_of_a_valid_jsonl(tmp_path, flips, cut, gz):
    data = bytearray((SAMPLE / "jsonl" / "rollout_data" / "2.jsonl").read_bytes())
    for where, value in flips:
        data[int(where * len(data))] = value
    if cut is not None:
        data = data[: int(cut * len(data))]
    d = fresh(tmp_path)
    src = d / ("2.jsonl.gz" if gz else "2.jsonl")
    src.write_bytes(gzip.compress(bytes(data), mtime=0) if gz else bytes(data))
    if gz and cut is not None:  # a truncated compressed stream
        src.write_bytes(src.read_bytes()[: max(1, int(cut * src.stat().st_size))])
    res = convert([src], d / "out")
    assert_clean_outcome(res, d / "out", str(src), located="line")


@pytest.mark.parametrize("suffix, payload", [
    (".jsonl.zst", b"\x28\xb5\x2f\xfd" + b"\x00garbage" * 4),
    (".jsonl.gz", b"\x1f\x8b\x08\x00" + b"garbage" * 4),
    (".jsonl.gz", b""),
    (".jsonl.zst", b""),
])
def test_corrupt_compressed_jsonl(tmp_path, suffix, payload):
    """BUG (today: a corrupt .zst exits 1 with ZstdError): a broken stream is invalid input."""
    src = tmp_path / f"3{suffix}"
    src.write_bytes(payload)
    res = convert([src], tmp_path / "out")
    assert_clean_outcome(res, tmp_path / "out", str(src))


# ------------------------------------------------------------------------------- step numbers


@pytest.mark.parametrize("how", ["field", "name", "option", "pt"])
def test_step_number_beyond_int64_is_invalid_input(tmp_path, how):
    """BUG (today: exit 1, OverflowError in np.full): a step must fit the int64 `step` column."""
    big = 2**63
    extra: list[str] = []
    if how == "field":
        src = tmp_path / "a.jsonl"
        src.write_bytes(orjson.dumps(base_sample(0, step=big)) + b"\n")
    elif how == "name":
        src = tmp_path / f"{big * 10}.jsonl"
        src.write_bytes(orjson.dumps(base_sample(0)) + b"\n")
    elif how == "option":
        src = tmp_path / "a.jsonl"
        src.write_bytes(orjson.dumps(base_sample(0)) + b"\n")
        extra = ["--step", str(big)]
    else:
        import torch  # noqa: F401  (the test extra installs it)
        src = tmp_path / "a_1.pt"
        _torch_save({"rollout_id": big, "samples": [base_sample(0)]}, src)
    res = convert([src], tmp_path / "out", *extra)
    if how == "option":
        assert res.exit_code == 2 and "--step" in res.stderr, res.output
        return
    assert res.exit_code == 3, res.output
    assert str(src) in res.stderr and ("step" in res.stderr or "rollout_id" in res.stderr)
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("fmt", ["jsonl", "pt"])
def test_negative_step_is_invalid_input(tmp_path, fmt):
    """BUG (today: exit 0 and a folder data/step--00003/): steps count rollout iterations from 0."""
    if fmt == "jsonl":
        src = tmp_path / "a.jsonl"
        src.write_bytes(orjson.dumps(base_sample(0, step=-3)) + b"\n")
    else:
        import torch  # noqa: F401  (the test extra installs it)
        src = tmp_path / "a_1.pt"
        _torch_save({"rollout_id": -3, "samples": [base_sample(0)]}, src)
    res = convert([src], tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert str(src) in res.stderr and ("step" in res.stderr or "rollout_id" in res.stderr)


def test_mixed_step_values_in_one_jsonl_file(tmp_path):
    """BUG (today: exit 0, line 2's sample silently lands in step 1): a per-sample `step` that
    disagrees with the file's step is invalid input, named by line and field."""
    src = tmp_path / "x.jsonl"
    src.write_bytes(orjson.dumps(base_sample(0, step=1)) + b"\n" + orjson.dumps(base_sample(1, step=7)) + b"\n")
    res = convert([src], tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert f"{src}:line 2: step" in res.stderr


def test_wrong_type_step_on_a_later_line(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_bytes(orjson.dumps(base_sample(0, step=1)) + b"\n" + orjson.dumps(base_sample(1, step="seven")) + b"\n")
    res = convert([src], tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert f"{src}:line 2: step" in res.stderr


def test_mixed_step_values_in_one_parquet_file(tmp_path):
    src = tmp_path / "x.parquet"
    rows = [base_sample(0, step=1), base_sample(1, step=7)]
    pq.write_table(pa.Table.from_pylist(rows), src)
    res = convert([src], tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert f"{src}:row 1: step" in res.stderr


def test_duplicate_steps_name_both_files(tmp_path):
    a = tmp_path / "in" / "4.jsonl"
    b = tmp_path / "in" / "sub" / "4.parquet"
    c = tmp_path / "in" / "other.jsonl"
    b.parent.mkdir(parents=True)
    a.write_bytes(orjson.dumps(base_sample(0)) + b"\n")
    pq.write_table(pa.Table.from_pylist([base_sample(0)]), b)
    c.write_bytes(orjson.dumps(base_sample(0, step=4)) + b"\n")
    for pair in ((a, b), (a, c)):
        res = convert(list(pair), tmp_path / "out")
        assert res.exit_code == 3, res.output
        assert str(pair[0]) in res.stderr and str(pair[1]) in res.stderr and "step 4" in res.stderr
        assert not (tmp_path / "out" / "manifest.json").exists()


# ------------------------------------------------------------------------------- empty files


@pytest.mark.parametrize("name", ["1.jsonl", "1.jsonl.gz", "1.parquet", "1.pt"])
def test_empty_files(tmp_path, name):
    src = tmp_path / name
    src.write_bytes(b"" if not name.endswith(".gz") else gzip.compress(b"", mtime=0))
    res = convert([src], tmp_path / "out")
    assert_clean_outcome(res, tmp_path / "out", str(src))
    if name.endswith(("parquet", ".pt")):
        assert res.exit_code == 3  # not a Parquet file / not a torch archive


# ------------------------------------------------------------------------------- Parquet


_COLUMN_VALUES = st.one_of(
    st.lists(_ints, min_size=2, max_size=2),
    st.lists(_floats, min_size=2, max_size=2),
    st.lists(st.one_of(st.none(), st.text(max_size=6)), min_size=2, max_size=2),
    st.lists(st.sampled_from(['{"a": 1}', "{", "[1, 2]", "null", "NaN", '"completed"']), min_size=2, max_size=2),
    st.lists(st.lists(_ints, max_size=4), min_size=2, max_size=2),
    st.lists(st.lists(st.lists(st.integers(0, 5), max_size=2), max_size=3), min_size=2, max_size=2),
    st.lists(st.binary(max_size=5), min_size=2, max_size=2),
    st.lists(st.dictionaries(st.sampled_from(["a", "raw_reward"]), st.floats(allow_nan=True), min_size=1, max_size=2),
             min_size=2, max_size=2),
)


@FUZZ
@given(changes=st.lists(st.tuples(st.sampled_from(MUTABLE), _COLUMN_VALUES), min_size=1, max_size=3))
def test_fuzzed_parquet_columns(tmp_path, changes):
    cols = {k: [base_sample(0)[k], base_sample(1)[k]] for k in base_sample(0)}
    for key, values in changes:
        cols[key] = values
    try:
        table = pa.table({k: pa.array(v) for k, v in cols.items()})
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        assume(False)  # pyarrow itself cannot build such a column
    d = fresh(tmp_path)
    src = d / "5.parquet"
    pq.write_table(table, src)
    res = convert([src], d / "out")
    assert_clean_outcome(res, d / "out", str(src), located="row")


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
       name=st.sampled_from(["2.parquet", "3.parquet"]))
def test_byte_flips_of_a_valid_parquet(tmp_path, flips, name):
    data = bytearray((SAMPLE / "parquet" / "rollout_data" / name).read_bytes())
    for where, value in flips:
        data[int(where * len(data))] = value
    d = fresh(tmp_path)
    src = d / name
    src.write_bytes(bytes(data))
    res = convert([src], d / "out")
    assert_clean_outcome(res, d / "out", str(src), located="row")


def test_parquet_string_column_with_invalid_utf8(tmp_path):
    """BUG (today: exit 1, UnicodeDecodeError from to_pylist): a Parquet string column holding
    bytes that are not UTF-8 is invalid input, naming the file and the column."""
    src = tmp_path / "6.parquet"
    rows = [base_sample(0, status="QQQQQQQQQ"), base_sample(1)]
    pq.write_table(pa.Table.from_pylist(rows), src, compression="none", use_dictionary=False, write_statistics=False)
    raw = src.read_bytes()
    assert raw.count(b"QQQQQQQQQ") == 1
    src.write_bytes(raw.replace(b"QQQQQQQQQ", b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7"))
    res = convert([src], tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert str(src) in res.stderr and "status" in res.stderr


def test_keep_text_with_binary_label_in_parquet(tmp_path):
    """BUG (today: exit 1, TypeError in normalize._text): text that cannot become JSON is invalid input."""
    src = tmp_path / "6.parquet"
    t = pa.Table.from_pylist([base_sample(0), base_sample(1)]).append_column("label", pa.array([b"\xff", b"ok"], pa.binary()))
    pq.write_table(t, src)
    res = convert([src], tmp_path / "out", "--keep-text")
    assert res.exit_code == 3, res.output
    assert f"{src}:row 0: label" in res.stderr


# ------------------------------------------------------------------------------- .pt


def _torch_save(obj, path: Path) -> None:
    import torch

    torch.save(obj, str(path))


def _pt_values():
    import torch

    tensors = st.sampled_from([
        torch.tensor([1, 2, 3]), torch.tensor([1.5, math.nan]), torch.tensor([math.inf]), torch.tensor(1.0),
        torch.tensor([[1, 2], [3, 4]]), torch.tensor([True, False]), torch.tensor([2**40]), torch.zeros(0),
        torch.tensor([1, 2], dtype=torch.bfloat16), torch.tensor([1, 2], dtype=torch.int8), torch.tensor(5),
        torch.zeros((4, 1, 1), dtype=torch.int32), torch.tensor([-1, 0]),
    ])
    return st.one_of(_hostile, tensors, st.sampled_from([{1, 2}, frozenset(), 1 + 2j, b"\xff\x00", bytearray(b"ab"), (1, 2)]))


@pytest.fixture(scope="module")
def pt_values():
    import torch  # noqa: F401  (the test extra installs it)
    return _pt_values()


@FUZZ
@given(data=st.data())
def test_fuzzed_pt(tmp_path, pt_values, data):
    samples: list = []
    for i in range(data.draw(st.integers(1, 3))):
        s = base_sample(i)
        for _ in range(data.draw(st.integers(0, 2))):
            key = data.draw(st.sampled_from(MUTABLE))
            if data.draw(st.booleans()):
                s[key] = data.draw(pt_values)
            else:
                s.pop(key, None)
        samples.append(s if data.draw(st.integers(0, 9)) else data.draw(_junk))
    payload: object = {"rollout_id": data.draw(st.one_of(st.just(1), _junk)), "samples": samples}
    if not data.draw(st.integers(0, 9)):
        payload = data.draw(_junk)
    keep_text = data.draw(st.booleans())
    d = fresh(tmp_path)
    src = d / "8.pt"
    _torch_save(payload, src)
    res = convert([src], d / "out", *(["--keep-text"] if keep_text else []))
    assert_clean_outcome(res, d / "out", str(src), located="sample")


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4),
       cut=st.one_of(st.none(), st.floats(0, 1)))
def test_byte_flips_of_a_valid_pt(tmp_path, flips, cut):
    data = bytearray((SAMPLE / "pt" / "rollout_data" / "3.pt").read_bytes())
    for where, value in flips:
        data[int(where * len(data))] = value
    if cut is not None:
        data = data[: int(cut * len(data))]
    d = fresh(tmp_path)
    src = d / "3.pt"
    src.write_bytes(bytes(data))
    res = convert([src], d / "out")
    assert_clean_outcome(res, d / "out", str(src), located="sample")


def test_keep_text_with_unserialisable_prompt_in_pt(tmp_path):
    """BUG (today: exit 1, TypeError): a prompt that is a set (allowed by the safe unpickler)."""
    import torch  # noqa: F401  (the test extra installs it)
    src = tmp_path / "1.pt"
    _torch_save({"rollout_id": 1, "samples": [base_sample(0, prompt={1, 2}), base_sample(1)]}, src)
    res = convert([src], tmp_path / "out", "--keep-text")
    assert res.exit_code == 3, res.output
    assert f"{src}:sample 0: prompt" in res.stderr


class _RunsCode:
    """Pickles as a call of `fn(arg)`: what a malicious dump looks like."""

    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


@pytest.mark.parametrize("how", ["os.system", "builtins.exec", "nested"])
def test_pickle_that_would_run_code_never_runs_without_trust_pickle(tmp_path, how):
    import torch  # noqa: F401  (the test extra installs it)
    import builtins

    marker = tmp_path / "PWNED"
    if how == "os.system":
        evil = _RunsCode(os.system, f"touch {marker}")
    else:
        evil = _RunsCode(builtins.exec, f"open({str(marker)!r}, 'w').write('x')")
    payload = evil if how != "nested" else {"rollout_id": 1, "samples": [base_sample(0), {"trace": evil}]}
    src = tmp_path / "in" / "1.pt"
    src.parent.mkdir()
    _torch_save(payload, src)
    for k, inputs in enumerate(([src], [src.parent])):
        out = tmp_path / f"out{k}"
        res = convert(inputs, out)
        assert res.exit_code == 3, res.output
        assert "--trust-pickle" in res.stderr and str(src) in res.stderr
        assert not marker.exists(), "unpickling ran code without --trust-pickle"
        assert not (out / "manifest.json").exists()
    # the fixture is real: with --trust-pickle the file does run its code
    res = convert([src], tmp_path / "trusted", "--trust-pickle")
    assert marker.exists()
    assert res.exit_code in (0, 3) and "Traceback" not in res.output


# ------------------------------------------------------------------------------- the process pool


def test_invalid_input_through_the_process_pool(tmp_path):
    """Errors raised in worker processes reach the user the same way (exit 3, file:line: field)."""
    src_dir = tmp_path / "in"
    src_dir.mkdir()
    for k in range(1, 4):
        lines = [orjson.dumps(base_sample(i)) for i in range(4)]
        if k == 2:
            lines[2] = orjson.dumps(base_sample(2, tokens=[1, "x", 3]))
        (src_dir / f"{k}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    res = CliRunner().invoke(app, ["convert", str(src_dir), str(tmp_path / "out"), "-q", "--workers", "2"])
    assert res.exit_code == 3, res.output
    assert f"{src_dir / '2.jsonl'}:line 3: tokens" in res.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


# ------------------------------------------------------------------------------- the output location

# Exit codes that would misdescribe an output that cannot be written: success, our own bug,
# invalid input, a broken output, "exists". A dedicated code (6, see the README) or 2 fits.
WRONG_FOR_OUTPUT_ERRORS = (0, 1, 3, 4, 5)


def _tree(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file, outside the staging area."""
    res = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".staging" not in p.relative_to(root).parts:
            res[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return res


def test_out_whose_parent_is_a_file(tmp_path):
    """BUG (today: exit 1, NotADirectoryError). Works as root, unlike chmod."""
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "out"
    res = convert([SAMPLE / "jsonl" / "rollout_data" / "1.jsonl"], out)
    assert res.exit_code not in WRONG_FOR_OUTPUT_ERRORS, res.output
    assert str(out) in res.stderr and "Traceback" not in res.output and "internal error" not in res.output
    assert (tmp_path / "afile").read_text() == "x"


def _enospc(*a, **k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["shard", "manifest"])
def test_disk_full_leaves_the_old_output_untouched(tmp_path, monkeypatch, where):
    """BUG (today: exit 1, 'internal error: OSError'). A full disk is not our bug: a clear message,
    a non-1 exit code, no manifest of the new run, and the previous output exactly as it was."""
    import rollout_cli.output.commit as output_mod
    import rollout_cli.output.write as write_mod

    src = SAMPLE / "jsonl" / "rollout_data"
    out = tmp_path / "out"
    assert convert([src], out, "--shards", "2").exit_code == 0
    before = _tree(out)
    if where == "shard":
        monkeypatch.setattr(write_mod._HashingFile, "write", lambda self, data: _enospc())
    else:
        real = output_mod.write_json_atomic

        def write_json_atomic(path, obj):
            if os.path.basename(path) == "manifest.json":
                _enospc()
            return real(path, obj)

        monkeypatch.setattr(output_mod, "write_json_atomic", write_json_atomic)
    for target, extra in ((out, ["--overwrite"]), (tmp_path / "fresh", [])):
        res = convert([src], target, "--shards", "3", *extra)
        assert res.exit_code not in WRONG_FOR_OUTPUT_ERRORS, res.output
        assert "No space left on device" in res.stderr and "Traceback" not in res.output
        assert "internal error" not in res.output
    assert not (tmp_path / "fresh" / "manifest.json").exists()
    monkeypatch.undo()
    assert _tree(out) == before
    assert verify_output(str(out))["failures"] == []


def test_failed_run_leaves_no_manifest_and_resume_after_the_fix_works(tmp_path):
    src = tmp_path / "in" / "1.jsonl"
    src.parent.mkdir()
    src.write_bytes(orjson.dumps(base_sample(0)) + b"\n{not json\n")
    out = tmp_path / "out"
    res = convert([src], out)
    assert res.exit_code == 3 and f"{src}:line 2" in res.stderr
    assert not (out / "manifest.json").exists()
    src.write_bytes(orjson.dumps(base_sample(0)) + b"\n" + orjson.dumps(base_sample(1)) + b"\n")
    res = convert([src], out, "--resume")
    assert res.exit_code == 0, res.output
    assert verify_output(str(out))["failures"] == []
    assert json.loads((out / "manifest.json").read_text())["counts"]["rows"] == 2


_HOSTILE_PARQUET = [
    # (column values for rows 0..2, the type, the field named, words of the message); row 1 is bad
    ("tokens", [[[1, 2, 3, 4, 5]], [[1, 2], [3, 4], [5, 6]], [[1, 2, 3, 4, 5]]], None, "tokens", "flat list"),
    ("tokens", [[1, 2, 3, 4, 5], None, [1, 2, 3, 4, 5]], None, "tokens", "got null"),
    ("tokens", [[1, 2, 3, 4, 5], [1, None, 3, 4, 5], [1, 2, 3, 4, 5]], None, "tokens", "integers"),
    ("tokens", [[1, 2, 3, 4, 5], [1, 2, 3, 4, 2**31], [1, 2, 3, 4, 5]], pa.list_(pa.int64()), "tokens", "2147483648"),
    ("status", ["completed", None, "completed"], None, "status", "null"),
    ("loss_mask", [[1, 1], [1, 2], [1, 1]], pa.list_(pa.int8()), "loss_mask", "[0, 1]"),
    ("rollout_log_probs", [[-0.5, -0.25], [float("inf"), 0.0], [-0.5, -0.25]], None, "rollout_log_probs", "finite"),
    ("reward", [0.0, None, 1.0], None, "reward", "number"),
    ("tokens", ["[1, 2, 3, 4, 5]", "[1, 2, 3, 4, 2147483648]", "[1, 2, 3, 4, 5]"], None, "tokens", "2147483648"),
    ("tokens", ["[1, 2, 3, 4, 5]", "[1, 2,", "[1, 2, 3, 4, 5]"], None, "tokens", "invalid JSON"),
]


@pytest.mark.parametrize("column,values,typ,field,words", _HOSTILE_PARQUET)
def test_hostile_parquet_rows_name_file_row_and_field(tmp_path, column, values, typ, field, words):
    cols = {k: [base_sample(i)[k] for i in range(3)] for k in base_sample(0)}
    cols[column] = values
    d = fresh(tmp_path)
    src = d / "5.parquet"
    pq.write_table(pa.table({k: pa.array(v, typ if k == column else None) for k, v in cols.items()}), src)
    res = convert([src], d / "out")
    assert res.exit_code == 3, res.output
    row = 0 if words == "flat list" else 1  # nested: every row is
    assert f"{src}:row {row}: {field}:" in res.stderr and words in res.stderr, res.stderr
    assert not (d / "out" / "manifest.json").exists()
    assert_clean_outcome(res, d / "out", str(src), located="row")


@pytest.mark.parametrize("keep", [0.3, 0.9, 0.999])
def test_truncated_parquet_is_refused(tmp_path, keep):
    d = fresh(tmp_path)
    whole = d / "whole.parquet"
    pq.write_table(pa.Table.from_pylist([base_sample(i) for i in range(6)]), whole, row_group_size=2)
    src = d / "5.parquet"
    data = whole.read_bytes()
    src.write_bytes(data[: int(len(data) * keep)])
    res = convert([src], d / "out")
    assert res.exit_code == 3, res.output
    assert str(src) in res.stderr
    assert not (d / "out" / "manifest.json").exists()
