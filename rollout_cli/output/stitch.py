"""Stitch Parquet files encoded in parallel into one Parquet file, without re-encoding.

Each piece is a complete Parquet file holding some rows and some of the columns of a shared
schema. `stitch` copies the pieces' column-chunk bytes unchanged, in the template's leaf-column
order, and writes a new footer (the template's schema and metadata, the pieces' column-chunk
metadata with every file offset moved to its new position).

The footer is a Thrift compact-protocol `FileMetaData` struct, decoded and encoded by
core/thrift.py, which keeps every field, known or not.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.thrift import (
    _MAX_DEPTH, BINARY, I32, I64, LIST, MAGIC, STRUCT, TList, TStruct, _view, encode_struct, read_footer,
)

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
