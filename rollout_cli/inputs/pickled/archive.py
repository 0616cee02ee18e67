"""The torch.save zip archive, read without torch: its records, its byte order and its tensor
storages (each read once into a writable buffer; the CRC checked). From a file or from bytes
held in memory (torch.save bytes embedded in a framework's pickle)."""
from __future__ import annotations

import struct
import sys
import zipfile
import zlib
from typing import Any

import pyarrow as pa

from .context import current
from .errors import PtFormatError
from .tensors import _Storage, _StorageKind

# --------------------------------------------------------------------------- archive access

_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."  # pickle of torch's legacy MAGIC_NUMBER
_PICKLE_BUFFER = 1 << 20
_LATER_CRC = 1 << 20  # in-memory storages this large have their CRC checked on a thread
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, ValueError, struct.error)


class _Archive:
    """`memory`: the archive's bytes when it is held in memory (torch.save bytes embedded in a
    pickle): its storages are then read-only views of those bytes, never copies. `as_stored`
    (a read whose tensors are to be stored as they are: the rollout dumps' multimodal inputs):
    its bfloat16 tensors come as their bit patterns (core.tensors.BFloat16Bits), not widened,
    and its stored records are read into one buffer (_slot)."""

    def __init__(self, fh: Any, zf: zipfile.ZipFile, path: str, memory: Any = None, as_stored: bool = False):
        self.fh = fh
        self.as_stored = as_stored
        self.memory = memoryview(memory) if memory is not None else None
        self.zf = zf
        self.path = path
        self.storages: dict[str, _Storage] = {}
        self.infos = {i.filename: i for i in zf.infolist()}
        for info in self.infos.values():
            _check_record(info)
        self.file_len = fh.seek(0, 2)
        self.prefix = self._find_prefix()
        self._arena: Any = None  # the file's stored storages, one buffer: see _slot
        self._cursor = 0
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

    def read_record(self, name: str) -> bytearray:
        """A record's bytes, inflated in bounded steps (a record's declared size was checked,
        _check_record, and it never grows past it)."""
        try:
            info = self.zf.getinfo(name)
            out = bytearray()
            with self.zf.open(info) as f:
                while len(out) < info.file_size:
                    chunk = f.read(min(_PICKLE_BUFFER, info.file_size - len(out)))
                    if not chunk:
                        break
                    out += chunk
                if len(out) != info.file_size or f.read(1):
                    raise PtFormatError(f"record {name!r}: {len(out)} bytes, its header says {info.file_size}")
            return out
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
            return self.read_record(name)  # compressed (re-zipped) archive: slow path
        start = self._data_offset(info)
        if start + info.file_size > self.file_len:
            raise PtFormatError(f"storage record {name!r} extends past the end of the file (truncated?)")
        if self.memory is not None and info.file_size >= _LATER_CRC:
            # in memory: a view, not a copy; its CRC checked on a thread while the outer pickle loads on
            buf = self.memory[start:start + info.file_size]
            current().check_crc(buf, info.CRC, f"storage record {name!r}: CRC mismatch (corrupt file)")
            return buf
        if self.memory is not None:
            buf = self.memory[start:start + info.file_size]
        else:
            buf = self._slot(info.file_size)
            self.fh.seek(start)
            got = self.fh.readinto(buf)
            if got != info.file_size:
                raise PtFormatError(f"storage record {name!r}: file ends after {got} of {info.file_size} bytes (truncated?)")
        if zlib.crc32(buf) != info.CRC:
            raise PtFormatError(f"storage record {name!r}: CRC mismatch (corrupt file)")
        return buf

    def _slot(self, size: int) -> memoryview:
        """Room for a storage read from the file: the next `size` bytes of one buffer holding
        every stored storage record of the archive in the order the pickle asks for them (the
        order of the samples and their keys), so that tensors read one after another lie back
        to back and a column of them can view this buffer instead of copying it
        (core/tensors.py). It is taken from Arrow's pool, whose freed pages are reused warm
        (docs/performance.md), and is sized by the records' declared sizes only where they fit
        in the file (each record is still checked as it is read)."""
        if self._arena is None and not self.as_stored:  # each record its own buffer, freed with its last tensor
            self._arena = False
        if self._arena is None:
            stored = [i.file_size for n, i in self.infos.items() if n.startswith(self.prefix + "data/")
                      and i.compress_type == zipfile.ZIP_STORED and not i.flag_bits & 0x1]
            total = sum(stored)
            self._arena = pa.allocate_buffer(total) if 0 < total <= self.file_len else False
        if self._arena is False or self._cursor + size > self._arena.size:
            return memoryview(pa.allocate_buffer(size))
        at, self._cursor = self._cursor, self._cursor + size
        return memoryview(self._arena)[at:at + size]

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
        st = _Storage(key, kind, nbytes, self.storage_bytes(key, nbytes), self.little, self.as_stored)
        self.storages[key] = st
        return st


def _check_record(info: zipfile.ZipInfo) -> None:
    """Refuse a record, before any of it is read, that is encrypted, declares more than
    --max-storage-bytes or is compressed more than MAX_INFLATION times (torch.save stores
    records uncompressed; a re-zipped archive's tensors compress far less)."""
    from ..limits import MAX_INFLATION, max_storage_bytes

    if info.flag_bits & 0x1:
        raise PtFormatError(f"record {info.filename!r} is encrypted (torch.save never encrypts)")
    most = max_storage_bytes()
    if info.file_size > most:
        raise PtFormatError(f"record {info.filename!r} declares {info.file_size} bytes, over --max-storage-bytes ({most}); "
                            "refused before reading it")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
        raise PtFormatError(f"record {info.filename!r} inflates {info.compress_size} bytes to {info.file_size}, over "
                            f"{MAX_INFLATION}x (a decompression bomb?); refused before reading it")


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
