"""The restricted unpickler and its four entry points, for a torch.save zip archive or a bare
pickle, from a file or from bytes: the C ``pickle.Unpickler`` with ``find_class`` answering
only from the allow-list (allow.py) and ``persistent_load`` only with the archive's storages.
torch.save bytes met inside a pickle (verl's and ROLL's TensorDicts, SkyRL's bfloat16 tensors)
are loaded by the same unpickler (context.py)."""
from __future__ import annotations

import io
import os
import pickle
import zipfile
from typing import Any

from .allow import resolve
from .archive import _ZIP_ERRORS, _Archive, _diagnose_not_zip
from .context import current, loading
from .errors import PickleFormatError, UnsafePickleError
from .numpy_globals import replace_builds

_PICKLE_BUFFER = 1 << 20


class RestrictedUnpickler(pickle.Unpickler):
    """C unpickler whose globals come only from the allow-list and whose persistent ids are the
    storages of `archive` (none for a bare pickle). `trusted` (``--trust-pickle``): a global
    off the list is imported and called as plain ``pickle`` does, which can run any code."""

    def __init__(self, stream: Any, path: str, archive: _Archive | None = None, trusted: bool = False):
        super().__init__(stream, encoding="utf-8")
        self._path = path
        self._archive = archive
        self._trusted = trusted

    def find_class(self, module: str, name: str) -> Any:
        obj = resolve(module, name)
        if obj is None:
            if self._trusted:
                return super().find_class(module, name)
            raise UnsafePickleError(f"{module}.{name}", self._path)
        return obj

    def persistent_load(self, pid: Any) -> Any:
        if self._archive is None:
            raise PickleFormatError(f"persistent id {pid!r:.80} in a bare pickle (only torch archives have storages)")
        return self._archive.storage(pid)


def _run(unpickler: RestrictedUnpickler, what: str) -> Any:
    try:
        box = [unpickler.load()]
        unpickler.memo.clear()
        return replace_builds(box, current().builds)
    except (UnsafePickleError, PickleFormatError, OSError):
        raise
    except zipfile.BadZipFile as e:  # the record's CRC, or a broken archive
        raise PickleFormatError(f"corrupt record {what}: {e}") from e
    except Exception as e:  # anything a corrupt stream makes the C unpickler raise
        raise PickleFormatError(f"corrupt pickle stream in {what}: {type(e).__name__}: {str(e)[:200]}") from e


def _torch_from(fh: Any, display: str, memory: bytes | None = None, trusted: bool = False,
                as_stored: bool = False) -> Any:
    try:
        zf = zipfile.ZipFile(fh)
    except _ZIP_ERRORS as e:
        raise PickleFormatError(_diagnose_not_zip(fh, e), display) from None
    with zf:
        try:
            archive = _Archive(fh, zf, display, memory, as_stored)
            pkl_name = archive.prefix + "data.pkl"
            # Streamed, not read whole: the pickle's bytes (most of a dump without tensors)
            # are then never held next to the objects they make. The buffer's peek lets the
            # C unpickler prefetch a megabyte at a time.
            try:
                stream = io.BufferedReader(zf.open(pkl_name), buffer_size=_PICKLE_BUFFER)
            except KeyError:
                raise PickleFormatError(f"missing record {pkl_name!r}") from None
            except _ZIP_ERRORS as e:
                raise PickleFormatError(f"corrupt record {pkl_name!r}: {e}") from e
            with stream:
                obj = _run(RestrictedUnpickler(stream, display, archive, trusted), repr(pkl_name))
                try:
                    while stream.read(_PICKLE_BUFFER):  # to the record's end: its CRC is checked there
                        pass
                except zipfile.BadZipFile as e:
                    raise PickleFormatError(f"corrupt record {pkl_name!r}: {e}") from e
                return obj
        except PickleFormatError as e:
            if e.path is None:
                e.path = display
            raise


def _embedded_torch(data: bytes, what: str) -> Any:
    outer = current()
    return load_torch_bytes(data, f"{outer.path} ({what}: embedded torch.save bytes)", trusted=outer.trusted)


def load_torch(path: str | os.PathLike[str], as_stored: bool = False) -> Any:
    """Load a ``torch.save`` zip file without torch; tensors become numpy arrays (bfloat16 ones
    widened to float32, or with `as_stored` views of their bit patterns, core.tensors.BFloat16Bits,
    for a caller that stores them as bfloat16 and would only narrow them back; `as_stored` also
    reads the stored tensors into one buffer, in the pickle's order, that a column can view).

    Raises ``UnsafePickleError`` when the pickle needs a global outside ``ALLOWED_GLOBALS``,
    ``PickleFormatError`` when the file is not a readable torch zip archive, and ``OSError`` when
    the file cannot be opened.
    """
    fspath = os.fspath(path)
    display = os.fsdecode(fspath)
    with open(fspath, "rb") as fh, loading(display, _embedded_torch):
        return _torch_from(fh, display, as_stored=as_stored)


def load_torch_bytes(data: bytes, display: str, trusted: bool = False) -> Any:
    """``load_torch`` of torch.save bytes held in memory; `display` names them in errors. Its
    tensors are read-only views of `data` (no copy), bfloat16 ones (widened) excepted."""
    with loading(display, _embedded_torch, trusted):
        return _torch_from(io.BytesIO(data), display, data, trusted)


def _bare_from(fh: Any, display: str, trusted: bool = False) -> Any:
    try:
        return _run(RestrictedUnpickler(fh, display, trusted=trusted), "the pickle")
    except PickleFormatError as e:
        if e.path is None:
            e.path = display
        raise


def load_pickle(path: str | os.PathLike[str], trusted: bool = False) -> Any:
    """Load a bare pickle (``pickle.dump``, any protocol) through the restricted unpickler: the
    frameworks' classes come back as plain data, tensors and arrays as numpy arrays. Raises as
    ``load_torch`` does. `trusted` (``--trust-pickle``, a file the user trusts): the allowed
    globals are read as always, and any other is imported and run as ``pickle.load`` would."""
    fspath = os.fspath(path)
    display = os.fsdecode(fspath)
    with open(fspath, "rb") as fh, loading(display, _embedded_torch, trusted):
        return _bare_from(fh, display, trusted)


def loads_pickle(data: bytes, display: str, trusted: bool = False) -> Any:
    """``load_pickle`` of pickle bytes held in memory; `display` names them in errors."""
    with loading(display, _embedded_torch, trusted):
        return _bare_from(io.BytesIO(data), display, trusted)
