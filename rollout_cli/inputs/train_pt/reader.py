"""slime's train-side debug dumps (`--save-debug-train-data`, `--dump-details DIR/train_data`):
one `.pt` per step holding what the trainer computed, as slime's
`observability/train_data_utils._build_dump_payload` lays it out (THUDM/slime@624b824a):

    {"format_version": 2, "rollout_id": step, "rank": writer rank,
     "samples": [{"rollout_position", "sample_index", "data_parallel_rank", "tokens",
                  "response_lengths", "loss_masks", "rewards", "rollout_ids", "log_probs", ...}],
     "dp_shards": [{"rank", "data_parallel_rank", "partition", "micro_batch_indices", ...}],
     "raw_reward": [one per rollout-dump sample]}

Read through the same restricted unpickler as rollout dumps (`inputs.slime_pt.reader.load_payload`), tensors
as numpy arrays. `TrainDump` is the checked form every train reader hands on: a reader of another
framework returns a payload shaped like slime's and `from_payload` checks it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core import slime_keys as K
from ...core.errors import InvalidInputError

FORMAT_VERSION = 2
TOKEN_FIELDS = K.DUMP_TOKEN_KEYS  # one value per response token
SCALAR_FIELDS = K.DUMP_SCALAR_KEYS  # one value per sample


@dataclass
class TrainDump:
    """One train-side payload, checked: samples keyed by their rollout-dump position."""

    display: str
    step: int
    samples: list[dict]  # slime's key names; numeric fields as numpy arrays or Python numbers
    positions: np.ndarray  # int64, each sample's rollout_position, ascending
    raw_reward: list | None = None  # the whole batch's, indexed by rollout position
    rank: Any = None
    dp_shards: list = field(default_factory=list)

    def index(self) -> dict[int, int]:
        """rollout_position -> index in `samples`."""
        return {int(p): i for i, p in enumerate(self.positions.tolist())}


def _int(v: Any) -> int | None:
    if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu":
        return int(v)
    if isinstance(v, (bool, np.bool_)):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    return None


def _array(v: Any) -> np.ndarray | None:
    if isinstance(v, np.ndarray):
        return v
    if isinstance(v, (list, tuple)):
        try:
            return np.asarray(v)
        except (ValueError, TypeError):
            return None
    return None


def _bad(display: str, i: int, fld: str, message: str) -> InvalidInputError:
    return InvalidInputError(f"{display}:sample {i}: {fld}: {message}")


def _check_sample(display: str, i: int, s: Any) -> int:
    """The sample's rollout_position; its per-token fields turned into 1-D arrays of the
    response's length."""
    if not isinstance(s, dict):
        raise _bad(display, i, "samples", f"expected a dict per training sample, got {type(s).__name__}")
    if "rollout_position" not in s or s["rollout_position"] is None:
        raise _bad(display, i, "rollout_position", "missing: the trainer wrote no partition, so the sample "
                                                   "cannot be paired with the rollout dump")
    pos = _int(s["rollout_position"])
    if pos is None or pos < 0:
        raise _bad(display, i, "rollout_position", f"expected a position in the rollout dump (an integer >= 0), got {s['rollout_position']!r}")
    rl = _int(s.get(K.RESPONSE_LENGTHS))
    if K.RESPONSE_LENGTHS in s and rl is None:
        raise _bad(display, i, K.RESPONSE_LENGTHS, f"expected an integer, got {type(s[K.RESPONSE_LENGTHS]).__name__}")
    if "tokens" in s:
        t = _array(s["tokens"])
        if t is None or t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
            raise _bad(display, i, "tokens", "expected a 1-D integer tensor or list")
        s["tokens"] = t
    for k in TOKEN_FIELDS:
        if k not in s or s[k] is None:
            continue
        a = _array(s[k])
        if a is None or a.ndim != 1 or (a.size and a.dtype.kind not in "iufb"):
            raise _bad(display, i, k, "expected a 1-D numeric tensor or list, one value per response token")
        if rl is not None and len(a) != rl:
            raise _bad(display, i, k, f"expected {rl} values (response_lengths), got {len(a)}")
        s[k] = a
    for k in SCALAR_FIELDS:
        v = s.get(k)
        if isinstance(v, np.ndarray) and v.ndim == 0:
            s[k] = v.item()
    return pos


def from_payload(payload: Any, display: str) -> TrainDump:
    """Check a train-side payload (slime's layout, from any reader) and hold it as a TrainDump."""
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{display}: expected a train dump {{'format_version': 2, 'samples': [...]}}, got {type(payload).__name__}")
    if K.FORMAT_VERSION not in payload:
        keys = sorted(map(str, payload))[:8]
        raise InvalidInputError(f"{display}: format_version: missing (keys {keys}): not a train-side dump; "
                                "a rollout dump goes before --train")
    version = payload[K.FORMAT_VERSION]
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise InvalidInputError(f"{display}: format_version: expected {FORMAT_VERSION}, got {version!r}: "
                                "a train dump of a layout this version cannot read")
    samples = payload.get(K.SAMPLES)
    if not isinstance(samples, list):
        raise InvalidInputError(f"{display}: samples: expected a list, got {type(samples).__name__}")
    step = _int(payload.get(K.ROLLOUT_ID))
    if step is None or not 0 <= step < 2**63:
        raise InvalidInputError(f"{display}: rollout_id: expected the step number, an integer in [0, 2**63 - 1], "
                                f"got {payload.get('rollout_id')!r}")
    positions = np.fromiter((_check_sample(display, i, s) for i, s in enumerate(samples)), dtype=np.int64,
                            count=len(samples))
    order = np.argsort(positions, kind="stable")
    if len(order) and (order != np.arange(len(order))).any():  # slime sorts; another writer may not
        samples = [samples[k] for k in order.tolist()]
        positions = positions[order]
    dup = np.flatnonzero(positions[1:] == positions[:-1])
    if len(dup):
        raise InvalidInputError(f"{display}: rollout_position: {int(positions[dup[0]])} appears twice")
    raw = payload.get(K.RAW_REWARD)
    if raw is not None and not isinstance(raw, list):
        raw = list(raw) if isinstance(raw, (tuple, np.ndarray)) else None
    shards = payload.get(K.DP_SHARDS)
    return TrainDump(display, step, samples, positions, raw, payload.get(K.RANK),
                     shards if isinstance(shards, list) else [])


def merge(dumps: list[TrainDump]) -> TrainDump:
    """One step's dumps (one file per writing rank, when a template has `{rank}`) as one, by
    rollout_position; a position two files hold is an error naming both."""
    if len(dumps) == 1:
        return dumps[0]
    owner: dict[int, str] = {}
    for d in dumps:
        for p in d.positions.tolist():
            if p in owner:
                raise InvalidInputError(f"{d.display}: rollout_position: {p} is also in {owner[p]} (same step {d.step})")
            owner[p] = d.display
    samples = [s for d in dumps for s in d.samples]
    positions = np.concatenate([d.positions for d in dumps])
    order = np.argsort(positions, kind="stable")
    raw = next((d.raw_reward for d in dumps if d.raw_reward is not None), None)
    return TrainDump(" + ".join(d.display for d in dumps), dumps[0].step, [samples[k] for k in order.tolist()],
                     positions[order], raw, [d.rank for d in dumps], [s for d in dumps for s in d.dp_shards])


_PEEK_BYTES = 1 << 16


def peek_keys(path: str) -> dict[str, int] | None:
    """The integer values of the top-level keys a dump's pickle begins with (slime's train
    dump: `format_version`, then `rollout_id`; its rollout dump: `rollout_id`), read from the
    opcodes of the first bytes of `data.pkl` without unpickling anything; None when the file
    is not a readable torch archive (the full read then reports why)."""
    import io
    import pickletools
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            name = next((n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if name is None:
                return None
            with zf.open(name) as f:
                head = f.read(_PEEK_BYTES)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError):
        return None
    keys: dict[str, int] = {}
    ops = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            if op.name not in _MEMO_OPS:
                ops.append((op.name, arg))
            if len(ops) > 12:
                break
    except Exception:  # a cut or odd stream: what was read so far
        pass
    # PROTO, EMPTY_DICT, MARK, then key/value pairs while both are a string and an integer
    k = next((i for i, (name, _) in enumerate(ops) if name == "MARK"), None)
    if k is None or k > 3:
        return keys
    for (kn, key), (vn, value) in zip(ops[k + 1::2], ops[k + 2::2]):
        if kn not in _STR_OPS or vn not in _INT_OPS or not isinstance(value, int) or isinstance(value, bool):
            break
        keys[key] = value
    return keys



_MEMO_OPS = frozenset({"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"})
_INT_OPS = frozenset({"BININT1", "BININT2", "BININT", "LONG1", "INT"})
_STR_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "UNICODE"})


def read_train(inp, trust_pickle: bool = False) -> TrainDump:
    """The registry's train entry: load the `.pt` (restricted unpickler unless `trust_pickle`)
    and check it."""
    from ..slime_pt.reader import load_payload

    return from_payload(load_payload(inp.path, inp.display, trust_pickle), inp.display)
