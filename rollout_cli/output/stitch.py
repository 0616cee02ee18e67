"""Stitch Parquet files encoded in parallel into one Parquet file, without re-encoding.

Each piece is a complete Parquet file holding some rows and some of the columns of a shared
schema. `stitch` copies the pieces' column-chunk bytes unchanged, in the template's leaf-column
order, and writes a new footer (the template's schema and metadata, the pieces' column-chunk
metadata with every file offset moved to its new position).

The footer is a Thrift compact-protocol `FileMetaData` struct; this module carries a small
generic codec for that protocol (`decode_struct` / `encode_struct`) that keeps every field,
known or not, so an unchanged struct encodes back to the same bytes.
"""
from __future__ import annotations

import struct as _struct
from collections.abc import Sequence
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


# ---------------------------------------------------------------------------------------------
# Parquet footer

# Field ids (parquet-format parquet.thrift).
_FMD_FIELDS = {1: "version", 2: "schema", 3: "num_rows", 4: "row_groups", 5: "key_value_metadata",
               6: "created_by", 7: "column_orders"}
_RG_FIELDS = {1: "columns", 2: "total_byte_size", 3: "num_rows", 5: "file_offset",
              6: "total_compressed_size", 7: "ordinal"}
_CC_FIELDS = {2: "file_offset", 3: "meta_data"}
# ColumnMetaData fields that hold no file offset and are copied as they are.
_CMD_KEPT = {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17}
_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE = 9, 10, 11
_REFUSED = {
    "FileMetaData": {8: "encryption_algorithm (encrypted file)", 9: "footer_signing_key_metadata (encrypted file)"},
    "RowGroup": {4: "sorting_columns"},
    "ColumnChunk": {1: "file_path (column data in another file)", 4: "offset_index_offset (page index)",
                    5: "offset_index_length (page index)", 6: "column_index_offset (page index)",
                    7: "column_index_length (page index)", 8: "crypto_metadata (encrypted column)",
                    9: "encrypted_column_metadata (encrypted column)"},
    "ColumnMetaData": {14: "bloom_filter_offset (bloom filter)", 15: "bloom_filter_length (bloom filter)"},
}


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


def _check_fields(s: TStruct, kind: str, known: dict | set, what: str) -> None:
    refused = _REFUSED.get(kind, {})
    for fid in s.ids():
        if fid in refused:
            raise ValueError(f"{what}: {kind} field {fid} {refused[fid]} is not supported")
        if fid not in known:
            raise ValueError(f"{what}: unknown {kind} field {fid} is not supported")


def _get(s: TStruct, fid: int, ttype: int, what: str, required: bool = True) -> Any:
    t = s.type_of(fid)
    if t is None:
        if required:
            raise ValueError(f"{what}: required field {fid} missing")
        return None
    if t != ttype:
        raise ValueError(f"{what}: field {fid} has Thrift type {t}, expected {ttype}")
    return s.get(fid)


def _get_list(s: TStruct, fid: int, etype: int, what: str, required: bool = True) -> list | None:
    v = _get(s, fid, LIST, what, required)
    if v is None:
        return None
    if v.items and v.etype != etype:
        raise ValueError(f"{what}: field {fid} is a list of type {v.etype}, expected {etype}")
    return v.items


@dataclass(slots=True)
class _Leaf:
    path: tuple[bytes, ...]
    key: bytes  # the schema elements from the root's child down to the leaf, minus num_children
    physical_type: int


def _leaves(meta: TStruct, what: str) -> list[_Leaf]:
    elems = _get_list(meta, 2, STRUCT, what)
    if not elems:
        raise ValueError(f"{what}: empty schema")
    leaves: list[_Leaf] = []
    pos = 1

    def walk(count: int, path: tuple, chain: list) -> None:
        nonlocal pos
        for _ in range(count):
            if pos >= len(elems):
                raise ValueError(f"{what}: schema ends inside a group")
            el = elems[pos]
            pos += 1
            name = _get(el, 4, BINARY, f"{what}: schema element {pos - 1}")
            bare = TStruct([f for f in el.fields if f[0] != 5])
            sub = chain + [encode_struct(bare)]
            children = _get(el, 5, I32, what, required=False)
            if children is not None and children < 0:
                raise ValueError(f"{what}: schema element {name!r} has {children} children")
            if children:
                if len(path) >= _MAX_DEPTH:
                    raise ValueError(f"{what}: schema nested too deep")
                walk(children, path + (name,), sub)
            else:
                ptype = _get(el, 1, I32, f"{what}: leaf {name!r}")
                leaves.append(_Leaf(path + (name,), b"".join(len(c).to_bytes(4, "little") + c for c in sub),
                                    ptype))

    root_children = _get(elems[0], 5, I32, f"{what}: schema root")
    walk(root_children, (), [])
    if pos != len(elems):
        raise ValueError(f"{what}: {len(elems) - pos} schema elements outside the root")
    return leaves


def _name(path: tuple[bytes, ...]) -> str:
    return ".".join(p.decode("utf-8", "replace") for p in path)


@dataclass(slots=True)
class _Chunk:
    cc: TStruct  # ColumnChunk
    start: int
    size: int


@dataclass(slots=True)
class _RowGroup:
    num_rows: int
    chunks: list  # (template leaf index, _Chunk) in the piece's column order


@dataclass(slots=True)
class _Piece:
    view: memoryview
    row_groups: list


def _check_file(meta: TStruct, what: str) -> None:
    _check_fields(meta, "FileMetaData", _FMD_FIELDS, what)
    _get(meta, 1, I32, what)


def _parse_chunk(cc: TStruct, data_end: int, what: str) -> _Chunk:
    _check_fields(cc, "ColumnChunk", _CC_FIELDS, what)
    _get(cc, 2, I64, what)
    md = _get(cc, 3, STRUCT, what)
    _check_fields(md, "ColumnMetaData", _CMD_KEPT | {9, 10, 11}, what)
    size = _get(md, 7, I64, what)
    num_values = _get(md, 5, I64, what)
    _get(md, 6, I64, what)
    data_page = _get(md, _CMD_DATA_PAGE, I64, what)
    dict_page = _get(md, _CMD_DICT_PAGE, I64, what, required=False)
    index_page = _get(md, _CMD_INDEX_PAGE, I64, what, required=False)
    # pyarrow writes an empty chunk (no rows) with data_page_offset 0 and, when the column is
    # dictionary-encoded, only a dictionary page; 0 stays 0 when offsets are moved.
    start = dict_page if dict_page else data_page
    if size < 0 or start < 0 or start + size > data_end or (size and start < 4):
        raise ValueError(f"{what}: column chunk bytes [{start}, {start + size}) lie outside the data pages")
    if not data_page and num_values:
        raise ValueError(f"{what}: {num_values} values but no data page offset")
    for off in (data_page, dict_page, index_page):
        if off and not start <= off < start + size:
            raise ValueError(f"{what}: page offset {off} lies outside its column chunk")
    return _Chunk(cc, start, size)


def _parse_piece(buf, i: int, tleaves: dict, tleaf_list: list[_Leaf], tmeta: TStruct) -> _Piece:
    what = f"piece {i}"
    mv = _view(buf, what)
    meta, data_end = read_footer(mv, what)
    _check_file(meta, what)
    created_by, t_created_by = meta.get(6), tmeta.get(6)
    if created_by != t_created_by:
        raise ValueError(f"{what}: created_by {created_by!r} differs from the template's {t_created_by!r}")
    leaves = _leaves(meta, what)
    index = []
    for leaf in leaves:
        t = tleaves.get(leaf.path)
        if t is None:
            raise ValueError(f"{what}: leaf column {_name(leaf.path)!r} is not in the template")
        if tleaf_list[t].key != leaf.key:
            raise ValueError(f"{what}: column {_name(leaf.path)!r} has a different schema than in the template")
        index.append(t)
    orders, t_orders = _get_list(meta, 7, STRUCT, what, False), _get_list(tmeta, 7, STRUCT, "template", False)
    if orders is not None and t_orders is not None:
        if len(orders) != len(leaves) or any(encode_struct(o) != encode_struct(t_orders[t])
                                             for o, t in zip(orders, index)):
            raise ValueError(f"{what}: column orders differ from the template's")
    row_groups = []
    for r, rg in enumerate(_get_list(meta, 4, STRUCT, what) or []):
        rwhat = f"{what} row group {r}"
        _check_fields(rg, "RowGroup", _RG_FIELDS, rwhat)
        num_rows = _get(rg, 3, I64, rwhat)
        ccs = _get_list(rg, 1, STRUCT, rwhat)
        if len(ccs) != len(leaves):
            raise ValueError(f"{rwhat}: {len(ccs)} column chunks for {len(leaves)} leaf columns")
        chunks = []
        for leaf, t, cc in zip(leaves, index, ccs):
            cwhat = f"{rwhat} column {_name(leaf.path)!r}"
            chunk = _parse_chunk(cc, data_end, cwhat)
            md = cc.get(3)
            path = tuple(_get_list(md, 3, BINARY, cwhat))
            if path != leaf.path:
                raise ValueError(f"{cwhat}: path_in_schema {_name(path)!r} does not match the schema")
            if _get(md, 1, I32, cwhat) != leaf.physical_type:
                raise ValueError(f"{cwhat}: physical type differs from the schema")
            chunks.append((t, chunk))
        row_groups.append(_RowGroup(num_rows, chunks))
    return _Piece(mv, row_groups)


def _moved(chunk: _Chunk, new_start: int) -> TStruct:
    """A copy of the chunk's ColumnChunk with every file offset moved to start at `new_start`."""
    delta = new_start - chunk.start
    cc = chunk.cc.copy()
    md = cc.get(3).copy()
    for fid in (_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE):
        off = md.get(fid)
        if off:  # 0: no such page (pyarrow's empty chunks), stays 0
            md.set(fid, I64, off + delta)
    cc.set(3, STRUCT, md)
    off = cc.get(2)
    if off:  # pyarrow 26 writes 0 here (the field is deprecated); other writers the chunk start
        cc.set(2, I64, off + delta)
    return cc


class Stitcher:
    """Builds one Parquet file a row group at a time, so that pieces can be encoded, written
    and freed in order. `header()`, then `add()` per final row group, then `footer()`; the
    caller writes what each returns, in that order."""

    def __init__(self, template):
        tmeta, _ = read_footer(template, "template")
        _check_file(tmeta, "template")
        self._tleaf_list = _leaves(tmeta, "template")
        if not self._tleaf_list:
            raise ValueError("template has no leaf columns")
        self._tleaves = {leaf.path: i for i, leaf in enumerate(self._tleaf_list)}
        if len(self._tleaves) != len(self._tleaf_list):
            raise ValueError("template has two leaf columns with the same path")
        self._tmeta = tmeta
        self._pos = len(MAGIC)
        self._out_rgs: list[TStruct] = []
        self._total_rows = 0

    def header(self) -> bytes:
        return MAGIC

    def parse(self, buf, i: int = 0):
        """Check one piece against the template (its index `i` only names it in errors)."""
        return _parse_piece(buf, i, self._tleaves, self._tleaf_list, self._tmeta)

    def add(self, members: Sequence[tuple[Any, int]], k: int | None = None) -> list[memoryview]:
        """The next row group, from (parsed piece, row group index) pairs (pieces from `parse`);
        returns its column chunks, in template column order, as zero-copy slices."""
        k = len(self._out_rgs) if k is None else k
        tleaf_list = self._tleaf_list
        slots: list = [None] * len(tleaf_list)
        num_rows = None
        for piece, r, p in members:
            if not (isinstance(r, int) and 0 <= r < len(piece.row_groups)):
                raise ValueError(f"row group {k}: piece {p} has no row group {r!r}")
            rg = piece.row_groups[r]
            if num_rows is None:
                num_rows = rg.num_rows
            elif rg.num_rows != num_rows:
                raise ValueError(f"row group {k}: piece {p} row group {r} has {rg.num_rows} rows, "
                                 f"expected {num_rows}")
            for t, chunk in rg.chunks:
                if slots[t] is not None:
                    raise ValueError(f"row group {k}: column {_name(tleaf_list[t].path)!r} supplied twice")
                slots[t] = (piece, chunk)
        missing = [_name(tleaf_list[t].path) for t, s in enumerate(slots) if s is None]
        if missing:
            raise ValueError(f"row group {k}: missing columns {missing}")
        columns = []
        parts: list[memoryview] = []
        first = pos = self._pos
        uncompressed = 0
        for piece, chunk in slots:
            columns.append(_moved(chunk, pos))
            parts.append(piece.view[chunk.start : chunk.start + chunk.size])
            uncompressed += chunk.cc.get(3).get(6)
            pos += chunk.size
        # As pyarrow writes it: file_offset is the first chunk's first page (0 for an empty
        # chunk), and no ordinal (pyarrow sets it only in encrypted files).
        md0 = columns[0].get(3)
        self._out_rgs.append(TStruct([
            [1, LIST, TList(STRUCT, columns)],
            [2, I64, uncompressed],
            [3, I64, num_rows],
            [5, I64, md0.get(_CMD_DICT_PAGE) or md0.get(_CMD_DATA_PAGE)],
            [6, I64, pos - first],
        ]))
        self._total_rows += num_rows
        self._pos = pos
        return parts

    def footer(self) -> bytes:
        """The footer, its length and the closing magic."""
        meta = self._tmeta.copy()
        meta.set(3, I64, self._total_rows)
        meta.set(4, LIST, TList(STRUCT, self._out_rgs))
        footer = encode_struct(meta)
        return footer + len(footer).to_bytes(4, "little") + MAGIC
