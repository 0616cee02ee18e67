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

The allow-list is pt_allow.py, the tensor rebuild pt_tensors.py; this module reads the zip
archive (its records and storages) and runs the restricted unpickler over it.
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
from typing import Any

import numpy as np

from .pt_allow import _ALLOWED, _PLAIN_TYPES, ALLOWED_GLOBALS, PlainData
from .pt_errors import PtFormatError, UnsafePickleError
from .pt_tensors import _Storage, _StorageKind

__all__ = [
    "ALLOWED_GLOBALS",
    "PlainData",
    "PtFormatError",
    "UnsafePickleError",
    "load_pt",
    "load_pt_trusted",
]


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
