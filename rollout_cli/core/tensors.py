"""`multimodal_train_inputs` as typed Arrow: one entry per key of a sample's dict, a tensor kept
as its dtype name, shape and little-endian C-order bytes, any other value as JSON text
(docs/format.md "multimodal_train_inputs"). bfloat16, which neither Arrow nor numpy has, is
kept as its 16-bit patterns with the dtype name "bfloat16". No torch here: a torch tensor met
in a trusted pickle is read through its own methods, and the loader makes tensors."""
from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from .arrays import lists_of, null_mask

__all__ = ["ENTRY", "MM_TYPE", "DTYPES", "BFloat16Bits", "WidenedBFloat16", "encode", "entries_array",
           "decode_row", "decode_column", "widen_bf16", "row_nbytes"]

# dtype name (torch's) -> numpy storage dtype (little-endian); bfloat16 as its bit patterns
DTYPES: dict[str, np.dtype] = {name: np.dtype(code) for name, code in (
    ("bool", "|b1"), ("uint8", "|u1"), ("int8", "|i1"), ("int16", "<i2"), ("uint16", "<u2"),
    ("int32", "<i4"), ("uint32", "<u4"), ("int64", "<i8"), ("uint64", "<u8"),
    ("float16", "<f2"), ("bfloat16", "<u2"), ("float32", "<f4"), ("float64", "<f8"))}
_NUMPY_NAMES = {np.dtype(code).str: name for name, code in DTYPES.items() if name != "bfloat16"}

ENTRY = pa.struct([
    pa.field("key", pa.string(), nullable=False),
    pa.field("dtype", pa.string()),  # null: a non-tensor value (json)
    pa.field("shape", pa.list_(pa.int64())),
    pa.field("data", pa.large_binary()),
    pa.field("json", pa.string()),
])
MM_TYPE = pa.list_(pa.field("item", ENTRY, nullable=False))
# a sample's raw images, as Hugging Face's Image feature lays one out (PNG bytes; path unused)
IMAGE = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
IMAGES_TYPE = pa.list_(IMAGE)
# the schema metadata that makes datasets.load_dataset give the images column as PIL images
HF_FEATURES = b'{"info": {"features": {"images": {"feature": {"_type": "Image"}, "_type": "List"}}}}'


class BFloat16Bits(np.ndarray):
    """A uint16 array holding bfloat16 bit patterns (what a stored bfloat16 tensor reads as)."""


class WidenedBFloat16(np.ndarray):
    """A float32 array whose values were bfloat16 (the restricted unpickler's reading of a
    bfloat16 tensor): stored back as bfloat16, exactly."""


def _torch_parts(v) -> tuple[str, tuple, np.ndarray]:
    import torch  # only for a torch tensor given by a trusted (full) unpickling

    t = v.detach().cpu().contiguous()
    name = str(t.dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"tensor dtype {name} is not one rollout-cli stores")
    arr = t.view(torch.int16).numpy().view("<u2") if name == "bfloat16" else t.numpy()
    return name, tuple(t.shape), arr


def _tensor_parts(v) -> tuple[str, tuple, np.ndarray] | None:
    """(dtype name, shape, C-order little-endian array of the storage dtype), or None for a
    value that is not a tensor."""
    if isinstance(v, np.ndarray):
        if isinstance(v, WidenedBFloat16):
            return "bfloat16", v.shape, (np.ascontiguousarray(v, "<f4").view("<u4") >> 16).astype("<u2")
        if isinstance(v, BFloat16Bits):
            return "bfloat16", v.shape, np.ascontiguousarray(v, "<u2")
        name = _NUMPY_NAMES.get(v.dtype.newbyteorder("<").str if v.dtype.byteorder == ">" else v.dtype.str)
        if name is None:
            raise ValueError(f"array dtype {v.dtype} is not one rollout-cli stores")
        return name, v.shape, np.ascontiguousarray(v, DTYPES[name])
    t = type(v)
    if t.__module__ == "torch" and t.__name__ in ("Tensor", "Parameter"):
        return _torch_parts(v)
    return None


def encode(value: Any) -> list[dict] | None:
    """A sample's multimodal_train_inputs as the column's entries (None for None): a tensor's
    `data` is its C-order little-endian array (a view where the value already is one, never
    bytes), copied once, into the column's buffer, by entries_array. ValueError (its reason)
    for a value that is not a dict with string keys, or holds a value neither a tensor nor
    JSON-serialisable."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"expected a dict or null, got {type(value).__name__}")
    out = []
    for k, v in value.items():
        if not isinstance(k, str):
            raise ValueError(f"expected string keys, got {type(k).__name__} {k!r}")
        parts = _tensor_parts(v)
        if parts is None:
            try:
                js = orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
            except TypeError as e:
                raise ValueError(f"{k}: expected a tensor or JSON-serialisable data, got {e}") from None
            out.append({"key": k, "dtype": None, "shape": None, "data": None, "json": js})
        else:
            name, shape, arr = parts
            out.append({"key": k, "dtype": name, "shape": [int(s) for s in shape], "data": arr, "json": None})
    return out


def _back_to_back(values: list) -> pa.Buffer | None:
    """The one Arrow buffer that the arrays of `values` (None skipped) view, in order and back to
    back, sliced to them; None where they do not (then they are copied)."""
    root = start = end = None
    for v in values:
        if v is None or not v.nbytes:
            continue
        base = v
        while isinstance(base, np.ndarray):
            base = base.base
        owner = base.obj if isinstance(base, memoryview) else None
        if not isinstance(owner, pa.Buffer) or not v.flags.c_contiguous or (root is not None and owner is not root):
            return None
        addr = v.__array_interface__["data"][0]
        if root is None:
            root, start = owner, addr
        elif addr != end:
            return None
        end = addr + v.nbytes
    if root is None or not root.address <= start <= end <= root.address + root.size:
        return None
    return root.slice(start - root.address, end - start)


def _data_array(values: list) -> pa.Array:
    """The entries' `data` (arrays, None for a non-tensor value) as one large_binary array, the
    offsets between them: a view of the buffer they already lie in back to back (the .pt
    reader's, inputs/pickled/archive.py), else every tensor's bytes copied once into one."""
    sizes = np.fromiter((0 if v is None else v.nbytes for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = _back_to_back(values)
    if data is None or data.size != int(offsets[-1]):
        data = pa.allocate_buffer(int(offsets[-1]))  # Arrow's pool: pages a step before freed, reused warm
        buf = np.frombuffer(data, np.uint8)
        for v, a, b in zip(values, offsets[:-1].tolist(), offsets[1:].tolist()):
            if v is not None and b > a:
                buf[a:b] = v.reshape(-1).view(np.uint8)
    nulls = [v is None for v in values]
    validity = None
    if any(nulls):
        validity = pa.py_buffer(np.packbits(~np.array(nulls), bitorder="little"))
    return pa.Array.from_buffers(pa.large_binary(), len(values), [validity, pa.py_buffer(offsets), data],
                                 null_count=sum(nulls))


def entries_array(rows: list[list[dict] | None]) -> pa.Array:
    """The column of these rows' entries (encode's form), built from the tensors' buffers."""
    flat = [e for r in rows if r is not None for e in r]
    lens = np.fromiter((0 if r is None else len(r) for r in rows), np.int32, len(rows))
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    fields = [
        pa.array([e["key"] for e in flat], pa.string()),
        pa.array([e["dtype"] for e in flat], pa.string()),
        pa.array([e["shape"] for e in flat], ENTRY.field("shape").type),
        _data_array([e["data"] for e in flat]),
        pa.array([e["json"] for e in flat], pa.string()),
    ]
    values = pa.StructArray.from_arrays(fields, fields=list(ENTRY))
    return lists_of(offsets, values, np.fromiter((r is None for r in rows), bool, len(rows)), MM_TYPE)


def row_nbytes(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each row's tensor bytes (0 for a null row)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = []
    for ch in chunks:
        if not len(ch):
            continue
        offs = np.asarray(ch.offsets)
        data = ch.values.field("data")
        lens = np.zeros(len(data), np.int64)
        if len(data):
            o = np.frombuffer(data.buffers()[1], np.int64, len(data) + 1, offset=data.offset * 8)
            lens = o[1:] - o[:-1]
        cum = np.concatenate([[0], np.cumsum(lens)])
        out.append(cum[offs[1:]] - cum[offs[:-1]])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _check_entry(key: str, dtype: str, shape: list, nbytes: int) -> np.dtype:
    dt = DTYPES.get(dtype)
    if dt is None:
        raise ValueError(f"{key}: unknown tensor dtype {dtype!r}")
    if shape is None or any(s < 0 for s in shape):
        raise ValueError(f"{key}: bad shape {shape!r}")
    if int(np.prod(shape, dtype=np.int64)) * dt.itemsize != nbytes:
        raise ValueError(f"{key}: {nbytes} bytes for shape {list(shape)} of {dtype}")
    return dt


def decode_row(entries: pa.StructArray | None) -> dict | None:
    """One row's entries (a StructArray slice, None for a null row) as the sample's dict: key ->
    numpy array (read-only views of the column's bytes; bfloat16 as BFloat16Bits) or the JSON
    value. ValueError when an entry's bytes disagree with its dtype and shape."""
    if entries is None:
        return None
    keys = entries.field("key").to_pylist()
    dtypes = entries.field("dtype").to_pylist()
    shapes = entries.field("shape").to_pylist()
    jsons = entries.field("json").to_pylist()
    data = entries.field("data")
    bufs = data.buffers()  # the values sliced from the buffers: an Arrow scalar of one would copy it
    offs = np.frombuffer(bufs[1], np.int64, len(data) + 1, offset=data.offset * 8).tolist() if len(data) else [0]
    out: dict = {}
    for j, k in enumerate(keys):
        if dtypes[j] is None:
            out[k] = None if jsons[j] is None else orjson.loads(jsons[j])
            continue
        nbytes = offs[j + 1] - offs[j]
        buf = bufs[2].slice(offs[j], nbytes) if nbytes else None
        dt = _check_entry(k, dtypes[j], shapes[j], nbytes)
        arr = (np.frombuffer(buf, dt) if nbytes else np.empty(0, dt)).reshape(shapes[j])
        out[k] = arr.view(BFloat16Bits) if dtypes[j] == "bfloat16" else arr
    return out


def decode_column(col: pa.Array | pa.ChunkedArray) -> list[dict | None]:
    """Every row of a multimodal_train_inputs column as decode_row's dicts; a column of JSON text
    (schema versions before the typed one) as its parsed dicts."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out: list = []
    for ch in chunks:
        if ch.null_count == len(ch):  # a text-only step's: nothing to decode
            out.extend([None] * len(ch))
            continue
        if pa.types.is_string(ch.type) or pa.types.is_large_string(ch.type):
            out.extend(None if s is None else orjson.loads(s) for s in ch.to_pylist())
            continue
        valid = (~null_mask(ch)).tolist()
        offs = ch.offsets.to_pylist()
        values = ch.values
        for i in range(len(ch)):
            out.append(decode_row(values.slice(offs[i], offs[i + 1] - offs[i])) if valid[i] else None)
    return out


def widen_bf16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns as float32 holding the same values (exact)."""
    return (np.asarray(bits, "<u2").astype("<u4") << 16).view("<f4")


def as_torch(value: dict | None, torch) -> dict | None:
    """decode_row's dict with its arrays as torch tensors of their own dtype (bfloat16 for
    BFloat16Bits), each a copy owning its memory; other values as they are."""
    if value is None:
        return None
    out = {}
    for k, v in value.items():
        if isinstance(v, BFloat16Bits):
            out[k] = torch.from_numpy(np.array(v, "<i2")).view(torch.bfloat16)
        elif isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(np.array(v))
        else:
            out[k] = v
    return out


def as_numpy(value: dict | None) -> dict | None:
    """decode_row's dict for the numpy side: bfloat16 widened to float32 (the same values)."""
    if value is None:
        return None
    return {k: widen_bf16(v) if isinstance(v, BFloat16Bits) else v for k, v in value.items()}


def concat(per_sample: list, cat) -> dict:
    """A micro-batch's multimodal inputs as slime's get_batch makes them: per key, the samples'
    tensors joined along dim 0 by `cat` (a list -> one array or tensor), in sample order and in
    the order keys first appear; None samples and values that are not arrays or tensors are
    left out; {} when no sample has any."""
    by_key: dict = {}
    for d in per_sample:
        if not d:
            continue
        for k, v in d.items():
            if hasattr(v, "shape") and hasattr(v, "dtype"):
                by_key.setdefault(k, []).append(v)
    return {k: cat(vs) for k, vs in by_key.items()}


def numpy_cat(arrays: list) -> np.ndarray:
    """np.concatenate along dim 0 (numpy's type promotion; bfloat16 comes widened to float32)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays, axis=0)


def join(per_sample: list) -> tuple[dict, list]:
    """slime's get_batch join of decode_row's dicts in one copy: (key -> the samples' arrays
    joined along dim 0, the per-sample dicts with each joined key's array a view of the joined
    one). A key whose arrays differ in dtype is left per sample (copies) and out of the joined
    dict: its join needs the trainer's type promotion (concat, with torch.cat)."""
    by_key: dict = {}
    for j, d in enumerate(per_sample):
        for k, v in (d or {}).items():
            if isinstance(v, np.ndarray):
                by_key.setdefault(k, []).append((j, v))
    joined: dict = {}
    out = [None if d is None else dict(d) for d in per_sample]
    for k, items in by_key.items():
        kinds = {(type(v), v.dtype, v.shape[1:]) for _, v in items}
        if len(kinds) != 1 or items[0][1].ndim == 0:
            for j, v in items:
                out[j][k] = np.array(v).view(type(v))
            continue
        whole = np.concatenate([v for _, v in items], axis=0).view(type(items[0][1]))
        joined[k] = whole
        at = 0
        for j, v in items:
            out[j][k] = whole[at:at + len(v)]
            at += len(v)
    return joined, out


PATCH_KEYS = ("pixel_values", "pixel_values_videos")  # the processor's patch tensors: [patches, values]


def patches_per_row(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each row's patches (the first dim of its PATCH_KEYS tensors), from the entries' keys and
    shapes alone; 0 for a null row or a column of JSON text."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out = []
    for ch in chunks:
        if not pa.types.is_list(ch.type) or not len(ch):
            out.append(np.zeros(len(ch), np.int64))
            continue
        offs = np.asarray(ch.offsets)
        entries = ch.values
        keys = entries.field("key").to_pylist()
        shapes = entries.field("shape").to_pylist()
        first = np.array([s[0] if k in PATCH_KEYS and s else 0 for k, s in zip(keys, shapes)], np.int64)
        cum = np.concatenate([[0], np.cumsum(first)])
        out.append(cum[offs[1:]] - cum[offs[:-1]])
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def digests(value: dict) -> dict:
    """A multimodal dict's values as comparable text: a tensor (numpy, torch, or decode_row's) as
    `dtype[shape] <BLAKE3 of its bytes, 16 hex>`, any other value as its JSON text."""
    import blake3

    out = {}
    for k, v in value.items():
        parts = _tensor_parts(v)
        if parts is None:
            out[k] = orjson.dumps(v, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        else:
            name, shape, arr = parts
            out[k] = f"{name}{list(shape)} {blake3.blake3(arr.tobytes()).hexdigest()[:16]}"
    return out
