"""What a reader of a pickled input calls: ``read_pickled(path, display, trust_pickle)``, the
file loaded by the restricted unpickler (``--trust-pickle``: globals off the list imported and
run), its failures turned into the tool's errors: a global off the list or a corrupt file is
``InvalidInputError`` (exit 3) naming the file (and the global, offering ``--trust-pickle``),
a storage fault ``InputUnavailableError``. A URI is read from a local copy."""
from __future__ import annotations

from typing import Any

from ...core.errors import InvalidInputError
from .errors import PickleFormatError, UnsafePickleError
from .unpickle import load_pickle, load_torch


def unsafe_message(display: str, e: UnsafePickleError) -> str:
    return (f"{display}: needs full unpickling (it references {e.global_name}); "
            "pass --trust-pickle only if you trust this file, since unpickling can run code")


def read_pickled(path: str, display: str, trust_pickle: bool = False, torch_archive: bool = False,
                 as_stored: bool = False) -> Any:
    """The plain data of a bare pickle (``torch_archive``: a torch.save zip, restricted only,
    its bfloat16 tensors as bit patterns with `as_stored`; ``--trust-pickle`` on a ``.pt`` is
    slime_pt's torch.load path)."""
    from ...core import storage

    if storage.is_uri(path):
        with storage.reading(display), storage.LocalCopy(path) as local:
            return read_pickled(local, display, trust_pickle, torch_archive, as_stored)
    try:
        return load_torch(path, as_stored) if torch_archive else load_pickle(path, trusted=trust_pickle)
    except UnsafePickleError as e:
        raise InvalidInputError(unsafe_message(display, e)) from None
    except PickleFormatError as e:
        what = "torch dump" if torch_archive else "pickle"
        raise InvalidInputError(f"{display}: not a readable {what}: {e}") from None
    except OSError as e:
        raise storage.input_error(display, e, f"{display}: cannot open: {e.strerror or e}") from None
