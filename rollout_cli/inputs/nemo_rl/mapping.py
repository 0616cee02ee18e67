"""NeMo-RL step-log records onto slime's sample fields, on arrays (numpy slices of the padded
rows, never Python lists per token).

Per line (docs/frameworks.md has the table): `L = input_lengths[0]`; tokens = `token_ids[0][:L]`;
the response starts at the first loss-masked token `p0`; loss mask and rollout log-probs are
`[p0:L]` of `token_loss_mask` and `generation_logprobs`; reward = `rewards[0]`; index = `idx`;
`sample_loss_mask[0] == 0` is a removed sample; status `completed` (NeMo-RL records none).
group_index is a key of the prompt tokens `token_ids[0][:p0]`: a step's parts are parsed by
different workers, so the key depends on the prompt alone, and the step's finish renumbers the
keys 0, 1, ... in order of first appearance (the format's `content_groups`). One rollout per line:
the ids are left to the id rule, which numbers the lines of the step 0, 1, ... in order.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from ...core import slime_keys as K
from ...core.errors import InvalidInputError, Location, Problem
from ..base import RawChunk, line_json_error
from ..columns import columnar
from ..jsonl.simd import SampleParser

PADDED = {"token_ids": "i", "token_loss_mask": "i", "generation_logprobs": "d", "prev_logprobs": "d", "advantages": "d"}
_KINDS = {"i": "iu", "d": "fiu"}
STATUS = "completed"  # NeMo-RL records no status: a logged row is one that was trained on


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


# the padded rows slime's fields are cut from; the trainer's rows are left to train_payload
_READ = ("token_ids", "token_loss_mask", "generation_logprobs")
_TRAINER = ("advantages", "prev_logprobs")
_OPEN = {k: b'"' + k.encode() + b'": [[' for k in PADDED}  # as json.dumps writes them
# the padded rows in the order the GRPO loop puts them in the logged dict (NVIDIA-NeMo/RL@7ea279ab:
# nemo_rl/algorithms/grpo.py:3642-3649): each key is looked for from the end of the row before,
# so a key is never searched for across a whole padded row
_LINE_ORDER = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")
_COMMA, _CLOSE = 44, 93  # ',' and ']'


class LineParser:
    """Parses one NeMo-RL line per call (see `parse`); keep one per reader."""

    def __init__(self) -> None:
        import simdjson

        self._simdjson = simdjson
        self._skeleton = simdjson.Parser()
        self._rows = simdjson.Parser()
        self._full = SampleParser(PADDED, frozenset(PADDED))
        self._runs: dict[bytes, bytes] = {}

    def _run(self, pad: bytes, count: int) -> memoryview:
        """`pad` repeated `count` times (a view of one string kept per padding value)."""
        run = self._runs.get(pad)
        if run is None or len(run) < len(pad) * count:
            run = self._runs[pad] = pad * max(count, 2 * len(run) // len(pad) if run else 0, 1024)
        return memoryview(run)[:len(pad) * count]

    def parse(self, block: bytes | bytearray, start: int, end: int) -> dict | None:
        """The record on `block[start:end]` with the padded rows as arrays, or None when orjson
        must decide. Most lines take the short way: the padded rows are found by their keys, the
        rest of the line (text and scalars) is parsed as JSON on its own, and of the rows only
        the first `input_lengths` values of those slime's fields come from are parsed (the
        padding, a run of one value at the end, is found by comparing bytes); the trainer's
        two rows are not read (no train-row field comes from them; train_payload reads them). A line the short
        way does not fit is parsed whole."""
        try:
            rec = self._short(block, start, end)
        except Exception:  # not the logger's layout: the whole line decides
            rec = None
        return rec if rec is not None else self._full.parse(block, start, end)

    def _short(self, block: bytes | bytearray, start: int, end: int) -> dict | None:
        find = block.find
        spans = {}
        pos = start
        for k in _LINE_ORDER:  # json.dumps keeps the writer's key order; any other order is found too
            key = _OPEN[k]
            at = find(key, pos, end)
            if at < 0:
                at = find(key, start, end)
                if at < 0:
                    return None
            if not (block[at - 2:at] == b", " and at - 2 >= start) and at - 1 != start:
                return None  # not where a key of an object stands
            s = at + len(key)
            e = find(b"]", s, end)
            if e < 0 or block[e + 1] != _CLOSE:
                return None
            spans[k] = (at + len(key) - 2, s, e, e + 2)  # value start, inner start, inner end, value end
            pos = e + 2
        order = sorted(spans.values())
        if any(a[3] > b[0] for a, b in zip(order, order[1:])):
            return None
        # the line without the padded rows, each left as [[]]: text, scalars and the key set
        pieces, at = [], start
        for vs, s, e, ve in order:
            pieces.append(block[at:vs])
            pieces.append(b"[[]]")
            at = ve
        pieces.append(block[at:end])
        doc = self._skeleton.parse(b"".join(pieces))
        if not isinstance(doc, self._simdjson.Object):
            return None
        keys = list(doc.keys())
        if len(set(keys)) != len(keys):
            return None
        rec = doc.as_dict()
        del doc
        if any(rec.get(k) != [[]] for k in PADDED):
            return None  # a padded row found inside another value, not at the top level
        n = rec.get("input_lengths")
        if not (isinstance(n, list) and len(n) == 1 and isinstance(n[0], int) and not isinstance(n[0], bool) and n[0] > 0):
            return None
        n = n[0]
        ms, me = spans["token_loss_mask"][1:3]
        # a 0/1 row as json.dumps writes it is "d, d, ..., d": 3 bytes a value. The width read off
        # the row's length is only a guess, but every row below either matches `width - n` copies
        # of its padding after exactly n parsed values (so its width is `width`) or is counted
        # value by value; a wrong guess cannot pass. Saves a scan of the mask row: parsing a 726 MB
        # log (bench/nemo_rl.py's) 0.402 -> 0.390 CPU-s.
        if me <= ms:
            width = 0
        elif (me - ms + 2) % 3 == 0:
            width = (me - ms + 2) // 3
        else:
            width = block.count(b",", ms, me) + 1
        u8 = None
        view = memoryview(block)
        widths, cuts, tails = {}, [b"[["], []
        for k in _READ:
            vs, s, e, ve = spans[k]
            cut = e if n >= width or e == s else None
            if cut is None:  # the padding is the last value repeated: cut where its run starts
                last = block.rfind(b", ", s, e)
                pad_text = bytes(block[last:e]) if last >= 0 else b""
                rest = width - n
                size = len(pad_text) * rest
                if pad_text and e - size > s and block.startswith(self._run(pad_text, rest), e - size, e):
                    cut = e - size
            if cut is None:
                if u8 is None:
                    u8 = np.frombuffer(block, dtype=np.uint8, count=end - start, offset=start)
                commas = np.flatnonzero(u8[s - start:e - start] == _COMMA)
                widths[k] = len(commas) + 1
                cut = e if n > len(commas) else s + int(commas[n - 1])
                tails.append(None)
            else:
                tails.append(width)
            cuts += (view[s:cut], b"],[")
        cuts[-1] = b"]]"
        rows = self._rows.parse(b"".join(cuts))  # the rows' text copied once
        del view
        for k, part, kind, known in zip(_READ, rows, ("i", "i", "d"), tails):
            a = np.frombuffer(part.as_buffer(of_type=kind), dtype=np.int64 if kind == "i" else np.float64)
            if known is not None:
                if n < known and len(a) != n:
                    return None  # not n values before the padding: the whole line decides
                widths[k] = known if n < known else len(a)
            rec[k] = a
        del rows, part
        for k in _TRAINER:
            rec[k] = None  # not read here (no train-row field comes from them): see train_payload
        rec[_WIDTHS] = widths
        return rec


_EMPTY = np.zeros(0)
_WIDTHS = "\0widths"  # no JSON key holds a NUL: the short way's count of each padded row


def parser() -> LineParser:
    """The parser the reader hands to the JSONL path."""
    return LineParser()


def _got(v: Any) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r[:60] + '...' if len(r) > 60 else r}"


def _padded(rec: dict, name: str, required: bool) -> np.ndarray | None:
    v = rec.get(name)
    if v is None:
        if required:
            raise _Bad(name, "missing")
        return None
    if isinstance(v, np.ndarray):
        return v
    kinds = _KINDS[PADDED[name]]
    if isinstance(v, list) and len(v) == 1 and isinstance(v[0], list):
        row = v[0]
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in row):
            ints = all(isinstance(x, int) for x in row)
            try:
                a = np.asarray(row, dtype=np.int64 if ints else np.float64)
            except OverflowError:
                raise _Bad(name, "expected values in the 64-bit range") from None
            if ints or kinds != "iu":
                return a
        raise _Bad(name, f"expected a one-element list holding a list of {'integers' if kinds == 'iu' else 'numbers'}")
    raise _Bad(name, f"expected a one-element list holding the padded row ([[...]]), got {_got(v)}")


def _scalar(rec: dict, name: str, integer: bool, required: bool = True):
    if name not in rec:
        if required:
            raise _Bad(name, "missing")
        return None
    v = rec[name]
    if not (isinstance(v, list) and len(v) == 1):
        raise _Bad(name, f"expected a one-element list, got {_got(v)}")
    x = v[0]
    ok = isinstance(x, int) if integer else isinstance(x, (int, float))
    if not ok or isinstance(x, bool):
        raise _Bad(name, f"expected [{'an integer' if integer else 'a number'}], got {_got(v)}")
    return x


def group_key(prompt: np.ndarray) -> int:
    """A non-negative 63-bit key of the prompt tokens (the same in every worker and process)."""
    digest = hashlib.blake2b(np.ascontiguousarray(prompt, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _spans(rec: dict, trainer: bool = False) -> tuple[dict, int, int, dict]:
    """(slime sample fields, p0, L, the padded rows read) of one record; the trainer's rows
    (prev_logprobs, advantages) are read and checked only with `trainer`: no train-row field
    comes from them, so convert leaves them as it leaves any field it does not read."""
    widths = rec.get(_WIDTHS, {})
    ids = _padded(rec, "token_ids", True)
    width = widths.get("token_ids", len(ids))
    rows = {"token_ids": ids, "prev_logprobs": None, "advantages": None}
    for name in ("token_loss_mask", "generation_logprobs") + (_TRAINER if trainer else ()):
        a = _padded(rec, name, name == "token_loss_mask")
        got = widths.get(name, 0 if a is None else len(a))
        if a is not None and got != width:
            raise _Bad(name, f"expected length {width} (the width of token_ids), got {got}")
        rows[name] = a
    n = _scalar(rec, "input_lengths", True)
    if not 1 <= n <= width:
        raise _Bad("input_lengths", f"expected 1 <= input_lengths <= {width} (the width of token_ids), got {n}")
    mask = rows["token_loss_mask"][:n]
    if len(mask) and (mask.min() < 0 or mask.max() > 1):
        raise _Bad("token_loss_mask", "expected 0/1 values")
    on = np.flatnonzero(mask)
    if not len(on):
        raise _Bad("token_loss_mask", f"no loss-masked token within input_lengths ({n}): where the response starts is unknown")
    p0 = int(on[0])
    reward = _scalar(rec, "rewards", False)
    idx = rec.get("idx")
    if idx is not None and (not isinstance(idx, int) or isinstance(idx, bool) or idx < 0):
        raise _Bad("idx", f"expected a non-negative integer, got {_got(idx)}")
    keep = _scalar(rec, "sample_loss_mask", False, required=False)
    sample = {
        "index": idx,
        "group_index": group_key(ids[:p0]),
        "tokens": ids[:n],
        "response_length": n - p0,
        "loss_mask": mask[p0:],
        "reward": reward,
        "status": STATUS,
        "remove_sample": keep is not None and keep == 0,
    }
    glp = rows["generation_logprobs"]
    if glp is not None:
        sample["rollout_log_probs"] = glp[p0:n]
    return sample, p0, n, rows


def to_sample(rec: dict) -> dict:
    """One record's slime sample fields; raises _Bad(field, message)."""
    return _spans(rec)[0]


def shape_chunk(chunk: RawChunk) -> RawChunk:
    """A chunk of parsed records as slime samples, in the reader contract's columnar form; a
    record that does not map keeps its place with its problem (file, line, NeMo-RL's field)."""
    records = list(chunk.records or [])
    problems = dict(chunk.problems)
    for i, rec in enumerate(records):
        if rec is None:
            continue
        try:
            records[i] = to_sample(rec)
        except _Bad as e:
            problems[i] = Problem(chunk.location(i), e.field, e.message, "nemo_rl.record")
            records[i] = None
    return columnar(RawChunk(chunk.source, chunk.kind, chunk.numbers, records, problems))


def train_payload(inp) -> dict:
    """See reader.train_payload."""
    import orjson

    from .detect import step_and_split
    from ..jsonl.lenient import loads
    from ..jsonl.reader import open_binary

    path = inp if isinstance(inp, str) else inp.path
    display = path if isinstance(inp, str) else inp.display
    known = step_and_split(path)
    step = known[0] if known else None
    parse = SampleParser(PADDED, frozenset(PADDED)).parse  # every row whole: the trainer's too
    samples = []
    with open_binary(path) as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip(b"\r\n")
            if not line.strip():
                continue
            where = Location(display, "line", line_no)
            rec = parse(line, 0, len(line))
            if rec is None:
                try:
                    rec = loads(line)
                except orjson.JSONDecodeError as e:
                    raise InvalidInputError(f"{where}: {line_json_error(e)}") from None
            if not isinstance(rec, dict):
                raise InvalidInputError(f"{where}: expected a JSON object, got {type(rec).__name__}")
            try:
                s, p0, n, rows = _spans(rec, trainer=True)
            except _Bad as e:
                raise InvalidInputError(str(Problem(where, e.field, e.message, "nemo_rl.record"))) from None
            entry = {
                K.ROLLOUT_POSITION: len(samples),
                "sample_index": s["index"],
                K.TOKENS: s["tokens"],
                K.RESPONSE_LENGTHS: s["response_length"],
                K.LOSS_MASKS: s["loss_mask"],
                K.REWARDS: s["reward"],
                K.ROLLOUT_LOG_PROBS: s.get("rollout_log_probs"),
                K.LOG_PROBS: None if rows["prev_logprobs"] is None else rows["prev_logprobs"][p0:n],
                K.ADVANTAGES: None if rows["advantages"] is None else rows["advantages"][p0:n],
                "sample_mask": 0 if s.get("remove_sample") else 1,
            }
            samples.append(entry)
    return {K.FORMAT_VERSION: 2, K.ROLLOUT_ID: step, K.RANK: 0, K.SAMPLES: samples}
