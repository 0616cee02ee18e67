"""The Thrift compact protocol, and a Parquet file's footer decoded with it.

A small generic codec (`decode_struct` / `encode_struct`) that keeps every field, known or not,
so an unchanged struct encodes back to the same bytes. The writer's stitcher (output/stitch.py)
rewrites footers with it; discovery and part planning read a Parquet input's column names and
row-group count with it, without importing pyarrow into the converting process. pyarrow exposes
no such codec, and Thrift's own Python package would be a dependency for a hundred lines.
"""
from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import Any

MAGIC = b"PAR1"

# Compact-protocol type ids. Booleans are one type (BOOL); the wire form 1/2 carries the value.
STOP = 0
BOOL = 1
_BOOL_FALSE = 2
BYTE = 3
I16 = 4
I32 = 5
I64 = 6
DOUBLE = 7
BINARY = 8
LIST = 9
SET = 10
MAP = 11
STRUCT = 12

_MAX_DEPTH = 64


# ---------------------------------------------------------------------------------------------
# Thrift compact protocol


@dataclass(slots=True)
class TList:
    """A Thrift list (or set, when `ttype` is SET) of elements of compact type `etype`."""

    etype: int
    items: list
    ttype: int = LIST


@dataclass(slots=True)
class TMap:
    """A Thrift map; `items` is a list of (key, value) pairs in wire order."""

    ktype: int
    vtype: int
    items: list


@dataclass(slots=True)
class TStruct:
    """A Thrift struct: its fields as [field_id, type, value] in wire order (unknown ones too)."""

    fields: list = field(default_factory=list)

    def get(self, fid: int, default: Any = None) -> Any:
        for f in self.fields:
            if f[0] == fid:
                return f[2]
        return default

    def type_of(self, fid: int) -> int | None:
        for f in self.fields:
            if f[0] == fid:
                return f[1]
        return None

    def ids(self) -> list[int]:
        return [f[0] for f in self.fields]

    def set(self, fid: int, ttype: int, value: Any) -> None:
        """Replace field `fid`, or insert it before the first field with a larger id."""
        for i, f in enumerate(self.fields):
            if f[0] == fid:
                self.fields[i] = [fid, ttype, value]
                return
            if f[0] > fid:
                self.fields.insert(i, [fid, ttype, value])
                return
        self.fields.append([fid, ttype, value])

    def copy(self) -> "TStruct":
        """A copy whose field list (not the values in it) can be changed independently."""
        return TStruct([list(f) for f in self.fields])


class _Reader:
    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0
        self.end = len(data)

    def _fail(self, what: str):
        raise ValueError(f"malformed Thrift compact data: {what} at byte {self.pos}")

    def byte(self) -> int:
        if self.pos >= self.end:
            self._fail("unexpected end")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        result = 0
        shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                self._fail("varint longer than 10 bytes")

    def zigzag(self, bits: int) -> int:
        n = self.varint()
        v = (n >> 1) ^ -(n & 1)
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            self._fail(f"integer out of i{bits} range")
        return v

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            self._fail("length past the end")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return bytes(b)

    def value(self, ttype: int, depth: int) -> Any:
        if ttype == BYTE:
            b = self.byte()
            return b - 256 if b >= 128 else b
        if ttype == I16:
            return self.zigzag(16)
        if ttype == I32:
            return self.zigzag(32)
        if ttype == I64:
            return self.zigzag(64)
        if ttype == DOUBLE:
            return _struct.unpack("<d", self.take(8))[0]
        if ttype == BINARY:
            return self.take(self.varint())
        if depth >= _MAX_DEPTH:
            self._fail("nesting too deep")
        if ttype in (LIST, SET):
            head = self.byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if etype in (BOOL, _BOOL_FALSE):
                items = []
                for _ in range(size):
                    b = self.byte()
                    if b not in (1, 2):
                        self._fail(f"boolean list element {b}")
                    items.append(b == 1)
            else:
                if size > self.end - self.pos:  # every element takes at least one byte
                    self._fail("list longer than the data")
                items = [self.value(etype, depth + 1) for _ in range(size)]
            return TList(etype, items, ttype)
        if ttype == MAP:
            size = self.varint()
            if size == 0:
                return TMap(0, 0, [])
            if size > self.end - self.pos:
                self._fail("map longer than the data")
            kv = self.byte()
            ktype, vtype = kv >> 4, kv & 0x0F
            items = [(self.elem(ktype, depth + 1), self.elem(vtype, depth + 1)) for _ in range(size)]
            return TMap(ktype, vtype, items)
        if ttype == STRUCT:
            return self.struct(depth + 1)
        self._fail(f"unknown type {ttype}")

    def elem(self, ttype: int, depth: int) -> Any:
        if ttype in (BOOL, _BOOL_FALSE):
            b = self.byte()
            if b not in (1, 2):
                self._fail(f"boolean element {b}")
            return b == 1
        return self.value(ttype, depth)

    def struct(self, depth: int = 0) -> TStruct:
        fields = []
        last = 0
        while True:
            head = self.byte()
            ttype = head & 0x0F
            if ttype == STOP:
                if head != 0:
                    self._fail("bad stop byte")
                return TStruct(fields)
            delta = head >> 4
            fid = last + delta if delta else self.zigzag(16)
            if ttype in (BOOL, _BOOL_FALSE):
                fields.append([fid, BOOL, ttype == BOOL])
            else:
                fields.append([fid, ttype, self.value(ttype, depth)])
            last = fid


def decode_struct(data) -> TStruct:
    """Decode one compact-protocol struct that fills `data` exactly (else ValueError)."""
    r = _Reader(bytes(data))
    s = r.struct()
    if r.pos != r.end:
        raise ValueError(f"malformed Thrift compact data: {r.end - r.pos} bytes after the struct")
    return s


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, v: int, bits: int) -> None:
    if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
        raise ValueError(f"{v} does not fit in i{bits}")
    _varint(out, (v << 1) ^ (v >> (bits - 1)))


def _write_value(out: bytearray, ttype: int, v: Any) -> None:
    if ttype == BYTE:
        if not -128 <= v < 128:
            raise ValueError(f"{v} does not fit in a byte")
        out.append(v & 0xFF)
    elif ttype == I16:
        _zigzag(out, v, 16)
    elif ttype == I32:
        _zigzag(out, v, 32)
    elif ttype == I64:
        _zigzag(out, v, 64)
    elif ttype == DOUBLE:
        out += _struct.pack("<d", v)
    elif ttype == BINARY:
        _varint(out, len(v))
        out += v
    elif ttype in (LIST, SET):
        n = len(v.items)
        if n < 15:
            out.append((n << 4) | v.etype)
        else:
            out.append(0xF0 | v.etype)
            _varint(out, n)
        for item in v.items:
            _write_elem(out, v.etype, item)
    elif ttype == MAP:
        _varint(out, len(v.items))
        if v.items:
            out.append((v.ktype << 4) | v.vtype)
            for k, val in v.items:
                _write_elem(out, v.ktype, k)
                _write_elem(out, v.vtype, val)
    elif ttype == STRUCT:
        _write_struct(out, v)
    else:
        raise ValueError(f"cannot encode Thrift type {ttype}")


def _write_elem(out: bytearray, ttype: int, v: Any) -> None:
    if ttype in (BOOL, _BOOL_FALSE):
        out.append(1 if v else 2)
    else:
        _write_value(out, ttype, v)


def _write_struct(out: bytearray, s: TStruct) -> None:
    last = 0
    for fid, ttype, v in s.fields:
        wire = (BOOL if v else _BOOL_FALSE) if ttype == BOOL else ttype
        if 0 < fid - last <= 15:
            out.append(((fid - last) << 4) | wire)
        else:
            out.append(wire)
            _zigzag(out, fid, 16)
        if ttype != BOOL:
            _write_value(out, ttype, v)
        last = fid
    out.append(STOP)


def encode_struct(s: TStruct) -> bytes:
    """Encode a struct in the compact protocol."""
    out = bytearray()
    _write_struct(out, s)
    return bytes(out)


def _view(buf, what: str) -> memoryview:
    try:
        mv = memoryview(buf)
    except TypeError:
        raise ValueError(f"{what} is not a bytes-like object") from None
    if mv.ndim != 1 or mv.format != "B":
        try:
            mv = mv.cast("B")
        except TypeError as e:
            raise ValueError(f"{what}: {e}") from None
    return mv


def read_footer(buf, what: str = "file") -> tuple[TStruct, int]:
    """Decode a Parquet file's footer; return (FileMetaData, the offset where the footer starts)."""
    mv = _view(buf, what)
    n = mv.nbytes
    if n < 12 or mv[:4] != MAGIC or mv[n - 4 :] != MAGIC:
        raise ValueError(f"{what} is not a Parquet file (no PAR1 magic at both ends)")
    flen = int.from_bytes(mv[n - 8 : n - 4], "little")
    start = n - 8 - flen
    if start < 4:
        raise ValueError(f"{what}: footer length {flen} exceeds the file")
    try:
        meta = decode_struct(mv[start : n - 8])
    except ValueError as e:
        raise ValueError(f"{what}: cannot decode footer: {e}") from None
    return meta, start


