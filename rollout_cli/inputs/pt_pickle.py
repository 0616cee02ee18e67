"""Load torch ``.pt`` files (``torch.save`` zip format) without torch, safely, at C-pickle speed.

slime writes its rollout debug dumps with ``torch.save({"rollout_id": step, "samples": [...]})``.
Those payloads are plain Python data plus a few tensors, so they can be read with the C
``pickle.Unpickler`` as long as every global the pickle references is replaced by our own,
inert implementation:

``load_pt(path)``
    Opens the zip archive, unpickles ``<prefix>/data.pkl`` with a restricted C unpickler and
    resolves tensor storages from ``<prefix>/data/<key>``. Tensors come back as numpy arrays with
    the tensor's dtype, shape, strides and storage offset; tensors that shared a storage in torch
    come back as views of one shared buffer (writes through one are seen by the others, as in
    torch). The device a tensor was saved from (``cpu``, ``cuda:0``, ...) is ignored: everything
    is loaded into host memory. Arrays are writable and in little-endian (native) byte order;
    storages saved on a big-endian host are byte-swapped.

    * ``bfloat16`` tensors are returned as **float32** arrays (numpy has no bfloat16; the
      conversion is exact). Views sharing a bfloat16 storage share the converted float32 buffer.
    * A bare storage object saved outside a tensor (never the case in slime dumps) comes back as
      an opaque ``_Storage`` object; call its ``numpy()`` for a 1-D array.

``load_pt_trusted(path)``
    ``torch.load(path, weights_only=False, map_location="cpu")`` (torch imported lazily) and the
    same tensor -> numpy conversion. Full unpickling can execute arbitrary code: only for files
    the user trusts (the CLI's ``--trust-pickle``).

Allowlist (``ALLOWED_GLOBALS``): every name maps to a function or constant of this module; nothing
is imported and nothing else can be called. Any other global raises ``UnsafePickleError``.

Allowed, each with the dump content that needs it:

* ``torch._utils._rebuild_tensor_v2`` -- every plain strided tensor with a typed storage: slime's
  int32 ``rollout_top_p_token_*`` and ``rollout_routed_experts`` (decoded from SGLang), int64
  ``tokens`` when a generator kept them as a tensor, float32 log-probs, and the tensors of
  ``multimodal_train_inputs`` (float32/float16/bfloat16 ``pixel_values``, int64
  ``image_grid_thw``, bool/uint8 masks and images).
* ``torch.<Double|Float|Half|BFloat16|Long|Int|Short|Char|Byte|Bool>Storage`` -- the storage class
  in the persistent id of such a tensor's storage; here only a token carrying the dtype.
* ``collections.OrderedDict`` -- every tensor carries an empty ``OrderedDict()`` of backward hooks.
* ``_codecs.encode`` (only ``(str, "latin1")``), ``__builtin__``/``builtins`` ``bytes``, ``set``
  and ``frozenset`` -- how pickle protocol 2 (torch.save's default) writes bytes (raw media in
  ``multimodal_inputs``) and sets (free-form ``metadata`` values); each is a strict wrapper that
  accepts only the arguments pickle itself writes.
* A ``byteorder`` record of ``big``: storages of a dump saved on a big-endian host are swapped.
* ``miles.utils.types.AdapterRef`` and ``miles.utils.types.RewardSpec`` -- the frozen dataclasses
  of miles' ``Sample.adapter`` / ``Sample.reward_spec`` (radixark/miles@31f1ca96:
  miles/utils/types.py:9-23), pickled as NEWOBJ of the class plus BUILD of its field dict. Each
  comes back as a ``PlainData``: a dict of the fields, nothing of miles imported or run.

Not allowed (among everything else), since no rollout dump holds them: complex tensors and the
conj/neg view bits, ``_rebuild_tensor_v3`` (the uint16/32/64 and float8 dtypes),
``torch._utils._rebuild_parameter``, sparse/quantized/nested/meta/wrapper-subclass rebuilds,
``torch.Size``, ``torch.device``, numpy reconstructors, ``bytearray``, ``complex``.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

__all__ = [
    "ALLOWED_GLOBALS",
    "PlainData",
    "PtFormatError",
    "UnsafePickleError",
    "load_pt",
    "load_pt_trusted",
]


class UnsafePickleError(Exception):
    """The pickle references a global outside the plain-data allowlist."""

    def __init__(self, global_name: str, path: str | None = None):
        self.global_name = global_name
        self.path = path
        super().__init__(
            f"pickle references global {global_name!r}, which is not on the plain-data allowlist: "
            "this file needs full unpickling; pass --trust-pickle only if the file is trusted "
            "(full unpickling can run arbitrary code)"
        )


class PtFormatError(Exception):
    """The file is not a readable torch zip archive (or its pickle/storage records are corrupt)."""

    def __init__(self, message: str, path: str | None = None):
        self.path = path
        super().__init__(message)


# --------------------------------------------------------------------------- dtypes and tokens


class _Frozen:
    """Base for allowlisted objects: immutable, refuses pickle BUILD (__setstate__)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise PtFormatError(f"pickle tried to set attribute {name!r} on {self!r}")

    def __delattr__(self, name: str) -> None:
        raise PtFormatError(f"pickle tried to delete attribute {name!r} on {self!r}")

    def __setstate__(self, state: Any) -> None:
        raise PtFormatError(f"pickle tried to BUILD {self!r}")

    def __reduce__(self):  # never re-pickle these tokens
        raise TypeError(f"{self!r} cannot be pickled")


class _DType(_Frozen):
    """A torch dtype as stored on disk: numpy element type (little-endian) and how to present it."""

    __slots__ = ("name", "file_dtype", "itemsize")

    def __init__(self, name: str, file_dtype: str):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "file_dtype", np.dtype(file_dtype))
        object.__setattr__(self, "itemsize", np.dtype(file_dtype).itemsize)

    def __repr__(self) -> str:
        return f"<pt_pickle dtype torch.{self.name}>"


# file_dtype is the on-disk element type in little-endian order. bfloat16 is read as uint16 and
# widened to float32 (see _Storage.base).
_DTYPES = {
    d.name: d
    for d in (
        _DType("bool", "|b1"),
        _DType("uint8", "|u1"),
        _DType("int8", "|i1"),
        _DType("int16", "<i2"),
        _DType("int32", "<i4"),
        _DType("int64", "<i8"),
        _DType("float16", "<f2"),
        _DType("float32", "<f4"),
        _DType("float64", "<f8"),
        _DType("bfloat16", "<u2"),
    )
}
_BF16 = _DTYPES["bfloat16"]


class _StorageKind(_Frozen):
    """Token for a torch storage class; ``dtype`` is None for UntypedStorage (bytes)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: _DType | None):
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dtype", dtype)

    def __repr__(self) -> str:
        return f"<pt_pickle storage class torch.{self.name}>"


_LEGACY_STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


class _Storage:
    """One storage record of the archive: raw bytes, plus element arrays built from them (cached
    per dtype so that all tensors viewing this storage share one buffer)."""

    __slots__ = ("key", "kind", "nbytes", "_raw", "_bases", "_little")

    def __init__(self, key: str, kind: _StorageKind, nbytes: int, raw: Any, little: bool):
        self.key = key
        self.kind = kind
        self.nbytes = nbytes
        self._raw = raw  # a bytearray of at least nbytes
        self._bases: dict[str, np.ndarray] = {}
        self._little = little

    def __setstate__(self, state: Any) -> None:
        raise PtFormatError("pickle tried to BUILD a storage")

    def __repr__(self) -> str:
        return f"<pt_pickle storage {self.key!r} {self.kind.name} {self.nbytes} bytes>"

    def base(self, dtype: _DType) -> np.ndarray:
        """The whole storage as a 1-D writable array of `dtype` (float32 for bfloat16)."""
        arr = self._bases.get(dtype.name)
        if arr is not None:
            return arr
        count = self.nbytes // dtype.itemsize
        fdt = dtype.file_dtype if self._little else dtype.file_dtype.newbyteorder(">")
        if self.nbytes == 0:
            raw = np.empty(0, fdt)
        else:
            raw = np.frombuffer(self._raw, dtype=fdt, count=count)
        if dtype is _BF16:
            arr = (raw.astype("<u4") << 16).view("<f4")
        elif not self._little and fdt.byteorder == ">":
            arr = raw.astype(dtype.file_dtype)
        else:
            arr = raw
        self._bases[dtype.name] = arr
        return arr

    def numpy(self) -> np.ndarray:
        """The storage as a 1-D array (for bare storages; tensors are rebuilt automatically)."""
        return self.base(self.kind.dtype or _DTYPES["uint8"])


# --------------------------------------------------------------------------- allowlisted callables


class PlainData(dict):
    """A dataclass instance of an allowlisted class, read as the dict of its fields. `NEWOBJ`
    takes no arguments; `BUILD` takes only a dict of str keys (or its (dict, None) form)."""

    __slots__ = ()
    _class_name = "?"

    def __new__(cls, *args: Any) -> "PlainData":
        if args:
            raise PtFormatError(f"pickle tried to create {cls._class_name} with arguments")
        return dict.__new__(cls)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state) or self:
            raise PtFormatError(f"pickle tried to BUILD {self._class_name} from {type(state).__name__}")
        dict.update(self, state)

    def __reduce__(self):  # never re-pickle these
        raise TypeError("pt_pickle plain data is not picklable")

    def __repr__(self) -> str:
        return f"{self._class_name}({dict.__repr__(self)})"


# dataclasses read as PlainData: module.name -> the dump content that needs it
_PLAIN_CLASSES = (
    "miles.utils.types.AdapterRef",  # miles Sample.adapter (multi-LoRA routing)
    "miles.utils.types.RewardSpec",  # miles Sample.reward_spec (per-sample reward dispatch)
)


class _SafeCallable(_Frozen):
    __slots__ = ("_fn", "_name")

    def __init__(self, name: str, fn: Callable[..., Any]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def __repr__(self) -> str:
        return f"<pt_pickle allowlisted {self._name}>"


def _as_index_tuple(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)):
        raise PtFormatError(f"tensor {what}: expected a tuple of ints, got {type(value).__name__}")
    out = []
    for v in value:
        if type(v) is not int:
            raise PtFormatError(f"tensor {what}: expected ints, got {type(v).__name__}")
        if v < 0:
            raise PtFormatError(f"tensor {what}: negative value {v}")
        out.append(v)
    return tuple(out)


def _make_view(storage: Any, dtype: _DType, offset: Any, size: Any, stride: Any, metadata: Any) -> np.ndarray:
    if not isinstance(storage, _Storage):
        raise PtFormatError(f"tensor rebuild: expected a storage record, got {type(storage).__name__}")
    if type(offset) is not int or offset < 0:
        raise PtFormatError(f"tensor storage offset: expected a non-negative int, got {offset!r}")
    shape = _as_index_tuple(size, "size")
    strides = _as_index_tuple(stride, "stride")
    if len(shape) != len(strides):
        raise PtFormatError(f"tensor size {shape} and stride {strides} differ in length")
    base = storage.base(dtype)
    item = base.itemsize
    if 0 in shape:
        arr = np.ndarray(shape, base.dtype, buffer=bytearray(0), strides=tuple(s * item for s in strides))
    else:
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides))
        if last >= base.shape[0]:
            raise PtFormatError(
                f"tensor of size {shape}, stride {strides}, offset {offset} reaches element {last} "
                f"of storage {storage.key!r}, which has {base.shape[0]} {dtype.name} elements"
            )
        arr = np.ndarray(shape, base.dtype, buffer=base, offset=offset * item, strides=tuple(s * item for s in strides))
    if metadata:  # conj/neg view bits: complex or negated views, which no rollout dump holds
        raise PtFormatError(f"tensor metadata: unsupported {metadata!r}")
    return arr


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None, *extra):
    if extra:
        raise PtFormatError(f"_rebuild_tensor_v2: {len(extra)} unexpected extra arguments")
    if not isinstance(storage, _Storage) or storage.kind.dtype is None:
        raise PtFormatError("_rebuild_tensor_v2: expected a typed storage record")
    return _make_view(storage, storage.kind.dtype, storage_offset, size, stride, metadata)


def _ordered_dict(*args: Any) -> OrderedDict:
    if not args:
        return OrderedDict()
    if len(args) == 1 and isinstance(args[0], (list, tuple, dict)):
        return OrderedDict(args[0])
    raise PtFormatError("collections.OrderedDict: unexpected arguments")


def _codecs_encode(text: Any, encoding: Any = "utf-8", *rest: Any) -> bytes:
    # protocol 2 writes bytes objects as _codecs.encode(bytes.decode("latin1"), "latin1")
    if rest or type(text) is not str or encoding not in ("latin1", "latin-1", "iso-8859-1"):
        raise PtFormatError("_codecs.encode: only (str, 'latin1') is accepted")
    return text.encode("latin-1")


def _bytes(*args: Any) -> bytes:
    if not args:
        return b""
    if len(args) == 1 and type(args[0]) in (bytes, bytearray):
        return bytes(args[0])
    raise PtFormatError("builtins.bytes: only () or (bytes,) is accepted")


_ITERABLE_TYPES = (list, tuple, set, frozenset)


def _set(*args: Any) -> set:
    if not args:
        return set()
    if len(args) == 1 and type(args[0]) in _ITERABLE_TYPES:
        return set(args[0])
    raise PtFormatError("builtins.set: only () or (list,) is accepted")


def _frozenset(*args: Any) -> frozenset:
    if not args:
        return frozenset()
    if len(args) == 1 and type(args[0]) in _ITERABLE_TYPES:
        return frozenset(args[0])
    raise PtFormatError("builtins.frozenset: only () or (list,) is accepted")


def _build_allowlist() -> dict[str, Any]:
    rc: dict[str, Any] = {}

    def fn(name: str, f: Callable[..., Any]) -> None:
        rc[name] = _SafeCallable(name, f)

    fn("torch._utils._rebuild_tensor_v2", _rebuild_tensor_v2)
    for cls, dt in _LEGACY_STORAGES.items():
        rc[f"torch.{cls}"] = _StorageKind(cls, _DTYPES[dt])
    fn("collections.OrderedDict", _ordered_dict)
    fn("_codecs.encode", _codecs_encode)
    for mod in ("__builtin__", "builtins"):
        fn(f"{mod}.bytes", _bytes)
        fn(f"{mod}.set", _set)
        fn(f"{mod}.frozenset", _frozenset)
    return rc


_ALLOWED: dict[str, Any] = _build_allowlist()
# the classes NEWOBJ may instantiate (types, so kept apart from the inert tokens above)
_PLAIN_TYPES: dict[str, type] = {
    full: type(full.rsplit(".", 1)[1], (PlainData,), {"__slots__": (), "_class_name": full}) for full in _PLAIN_CLASSES
}
#: Every global name the restricted unpickler resolves (``"module.name"``), sorted.
ALLOWED_GLOBALS: tuple[str, ...] = tuple(sorted([*_ALLOWED, *_PLAIN_TYPES]))


# --------------------------------------------------------------------------- archive access

_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."  # pickle of torch's legacy MAGIC_NUMBER
_PICKLE_BUFFER = 1 << 20
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, ValueError, struct.error)


class _Archive:
    def __init__(self, fh: Any, zf: zipfile.ZipFile, path: str):
        self.fh = fh
        self.zf = zf
        self.path = path
        self.storages: dict[str, _Storage] = {}
        self.infos = {i.filename: i for i in zf.infolist()}
        self.file_len = os.fstat(fh.fileno()).st_size
        self.prefix = self._find_prefix()
        order = self.infos.get(self.prefix + "byteorder")
        if order is None:
            self.little = sys.byteorder == "little"
        else:
            mark = self.read_record(order.filename)
            if mark not in (b"little", b"big"):
                raise PtFormatError(f"unknown byteorder record {mark[:16]!r}")
            self.little = mark == b"little"

    def _find_prefix(self) -> str:
        names = list(self.infos)
        if names and "/" in names[0]:
            prefix = names[0].split("/", 1)[0] + "/"
            if prefix + "data.pkl" in self.infos:
                return prefix
        candidates = [n[: -len("data.pkl")] for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(candidates) == 1:
            return candidates[0]
        if not candidates:
            raise PtFormatError("zip archive has no '<name>/data.pkl' record: not a torch.save file")
        raise PtFormatError(f"zip archive has {len(candidates)} '<name>/data.pkl' records")

    def read_record(self, name: str) -> bytes:
        try:
            return self.zf.read(name)
        except KeyError:
            raise PtFormatError(f"missing record {name!r}") from None
        except _ZIP_ERRORS as e:
            raise PtFormatError(f"corrupt record {name!r}: {e}") from e

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        self.fh.seek(info.header_offset)
        header = self.fh.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise PtFormatError(f"record {info.filename!r}: bad local file header (truncated archive?)")
        fields = _LOCAL_HEADER.unpack(header)
        return info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]

    def storage_bytes(self, key: str, nbytes: int) -> Any:
        name = f"{self.prefix}data/{key}"
        info = self.infos.get(name)
        if info is None:
            raise PtFormatError(f"missing storage record {name!r}")
        if info.file_size < nbytes:
            raise PtFormatError(f"storage record {name!r} has {info.file_size} bytes, the pickle needs {nbytes}")
        if nbytes == 0:
            return bytearray(0)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            return bytearray(self.read_record(name))  # compressed (re-zipped) archive: slow path
        start = self._data_offset(info)
        if start + info.file_size > self.file_len:
            raise PtFormatError(f"storage record {name!r} extends past the end of the file (truncated?)")
        buf = bytearray(info.file_size)
        self.fh.seek(start)
        got = self.fh.readinto(buf)
        if got != info.file_size:
            raise PtFormatError(f"storage record {name!r}: file ends after {got} of {info.file_size} bytes (truncated?)")
        if zlib.crc32(buf) != info.CRC:
            raise PtFormatError(f"storage record {name!r}: CRC mismatch (corrupt file)")
        return buf

    def storage(self, pid: Any) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage"):
            raise PtFormatError(f"unexpected persistent id {pid!r:.80}")
        _, kind, key, location, numel = pid
        if not isinstance(kind, _StorageKind):
            raise PtFormatError(f"persistent id: storage class {kind!r:.60} is not a storage class")
        if type(key) is not str or type(location) is not str or type(numel) is not int or numel < 0:
            raise PtFormatError(f"malformed storage persistent id {pid!r:.120}")
        st = self.storages.get(key)
        if st is not None:
            if st.kind is not kind:
                raise PtFormatError(f"storage {key!r} referenced as both {st.kind.name} and {kind.name}")
            return st
        nbytes = numel * (kind.dtype.itemsize if kind.dtype is not None else 1)
        st = _Storage(key, kind, nbytes, self.storage_bytes(key, nbytes), self.little)
        self.storages[key] = st
        return st


class _RestrictedUnpickler(pickle.Unpickler):
    """C unpickler whose globals come only from _ALLOWED and whose persistent ids are storages."""

    def __init__(self, stream: Any, archive: _Archive):
        super().__init__(stream, encoding="utf-8")
        self._archive = archive

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        obj = _ALLOWED.get(full) or _PLAIN_TYPES.get(full)
        if obj is None:
            raise UnsafePickleError(full, self._archive.path)
        return obj

    def persistent_load(self, pid: Any) -> Any:
        return self._archive.storage(pid)


def _diagnose_not_zip(fh: Any, err: Exception) -> str:
    fh.seek(0)
    head = fh.read(512)
    if not head:
        return "empty file"
    if head.startswith(_LEGACY_MAGIC):
        return ("legacy (pre-1.6, non-zip) torch.save format is not supported; re-save it with a "
                "current torch.save, or pass --trust-pickle if the file is trusted")
    if len(head) >= 262 and head[257:262] == b"ustar":
        return ("legacy tar-based torch.save format is not supported; re-save it with a current "
                "torch.save, or pass --trust-pickle if the file is trusted")
    if head[:1] == b"\x80":
        return ("a bare pickle stream, not a torch zip archive (legacy torch.save format or "
                "pickle.dump); re-save it with torch.save, or pass --trust-pickle if the file is trusted")
    if head.startswith(b"PK"):
        return f"truncated or corrupt zip archive ({err})"
    return f"not a torch zip archive (no zip signature; file starts with {head[:8]!r})"


def load_pt(path: str | os.PathLike[str]) -> Any:
    """Load a ``torch.save`` zip file without torch; tensors become numpy arrays.

    Raises ``UnsafePickleError`` when the pickle needs a global outside ``ALLOWED_GLOBALS``,
    ``PtFormatError`` when the file is not a readable torch zip archive, and ``OSError`` when
    the file cannot be opened. See the module docstring for dtypes.
    """
    fspath = os.fspath(path)
    display = os.fsdecode(fspath)
    with open(fspath, "rb") as fh:
        try:
            zf = zipfile.ZipFile(fh)
        except _ZIP_ERRORS as e:
            raise PtFormatError(_diagnose_not_zip(fh, e), display) from None
        with zf:
            try:
                archive = _Archive(fh, zf, display)
                pkl_name = archive.prefix + "data.pkl"
                # Streamed, not read whole: the pickle's bytes (most of a dump without tensors)
                # are then never held next to the objects they make. The buffer's peek lets the
                # C unpickler prefetch a megabyte at a time.
                try:
                    stream = io.BufferedReader(zf.open(pkl_name), buffer_size=_PICKLE_BUFFER)
                except KeyError:
                    raise PtFormatError(f"missing record {pkl_name!r}") from None
                except _ZIP_ERRORS as e:
                    raise PtFormatError(f"corrupt record {pkl_name!r}: {e}") from e
                with stream:
                    unpickler = _RestrictedUnpickler(stream, archive)
                    try:
                        obj = unpickler.load()
                        while stream.read(_PICKLE_BUFFER):  # to the record's end: its CRC is checked there
                            pass
                        return obj
                    except (UnsafePickleError, PtFormatError):
                        raise
                    except OSError:
                        raise
                    except zipfile.BadZipFile as e:  # the record's CRC, or a broken archive
                        raise PtFormatError(f"corrupt record {pkl_name!r}: {e}") from e
                    except Exception as e:  # anything a corrupt stream makes the C unpickler raise
                        raise PtFormatError(f"corrupt pickle stream in {pkl_name!r}: {type(e).__name__}: {str(e)[:200]}") from e
            except PtFormatError as e:
                if e.path is None:
                    e.path = display
                raise


# --------------------------------------------------------------------------- trusted path


def load_pt_trusted(path: str | os.PathLike[str]) -> Any:
    """``torch.load(weights_only=False)`` -- runs arbitrary pickled code; only for trusted files.

    Tensors anywhere in dicts/lists/tuples/OrderedDicts/namedtuples are converted to numpy arrays exactly as
    ``load_pt`` returns them (bfloat16 -> float32; conj/neg bits applied; views of one storage
    share memory). Other objects are returned as torch unpickled them.
    """
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is optional
        raise ImportError("loading with --trust-pickle needs torch installed") from e
    fspath = os.fspath(path)
    try:
        obj = torch.load(fspath, weights_only=False, map_location="cpu")
    except OSError:
        raise
    except Exception as e:
        raise PtFormatError(f"torch.load failed: {type(e).__name__}: {str(e)[:300]}", os.fsdecode(fspath)) from e
    return _TorchToNumpy(torch).convert(obj)


class _TorchToNumpy:
    _SCALARS = (str, int, float, bool, type(None), bytes, complex)

    def __init__(self, torch: Any):
        self.torch = torch
        self.memo: dict[int, Any] = {}
        self.bf16_bases: dict[tuple[int, int], np.ndarray] = {}

    def convert(self, obj: Any) -> Any:
        t = type(obj)
        if t in self._SCALARS:
            return obj
        if t is dict:
            return {k: self.convert(v) for k, v in obj.items()}
        if t is list:
            return [self.convert(v) for v in obj]
        if isinstance(obj, self.torch.Tensor):
            key = id(obj)
            out = self.memo.get(key)
            if out is None:
                out = self.memo[key] = self.tensor(obj)
            return out
        if t is tuple:
            return tuple(self.convert(v) for v in obj)
        if t is OrderedDict:
            return OrderedDict((k, self.convert(v)) for k, v in obj.items())
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return t(*(self.convert(v) for v in obj))
        return obj

    def tensor(self, t: Any) -> np.ndarray:
        torch = self.torch
        t = t.detach()
        if t.layout != torch.strided:
            t = t.to_dense()
        if t.is_quantized:
            t = t.dequantize()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.is_conj() or t.is_neg():
            return t.resolve_conj().resolve_neg().numpy()
        if t.dtype == torch.bfloat16:
            return self._bf16(t)
        try:
            return t.numpy()
        except (TypeError, RuntimeError):  # dtypes numpy lacks (float8, complex32, ...)
            return t.to(torch.complex64 if t.is_complex() else torch.float32).numpy()

    def _bf16(self, t: Any) -> np.ndarray:
        # widen the whole storage once, so views of one bfloat16 storage share the float32 buffer
        torch = self.torch
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        base = self.bf16_bases.get(key)
        if base is None:
            whole = torch.empty(0, dtype=torch.bfloat16).set_(st, 0, (st.nbytes() // 2,), (1,))
            base = self.bf16_bases[key] = whole.float().numpy()
        shape = tuple(t.shape)
        if 0 in shape:
            return np.empty(shape, np.float32)
        return np.ndarray(shape, np.float32, buffer=base, offset=t.storage_offset() * 4, strides=tuple(s * 4 for s in t.stride()))
