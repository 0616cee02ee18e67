"""What an allowed global resolves to: an inert callable (``SafeCallable``) wrapping a function
of this package, an uncallable ``Token`` (a class a rebuild function names, never instantiated
by the file), or a ``PlainData`` class (a framework class read as the dict of its state). Plus the
builtins every pickle protocol writes (``OrderedDict``, ``bytes``, ``set``, ``frozenset``,
``_codecs.encode``), each accepting only the arguments pickle itself writes."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

from .errors import PickleFormatError
from .tensors import _Frozen


class PlainData(dict):
    """An instance of an allowlisted class, read as the dict of its fields; ``class_name`` is
    the class the file names (``module.Name``). The base form: ``NEWOBJ`` with no arguments,
    then ``BUILD`` with a dict of str keys (or its ``(dict, None)`` form). Subclasses for the
    frameworks' batch classes take their writer's own state instead."""

    __slots__ = ()
    _class_name = "?"

    def __new__(cls, *args: Any) -> "PlainData":
        if args:
            raise PickleFormatError(f"pickle tried to create {cls._class_name} with arguments")
        return dict.__new__(cls)

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and state[1] is None:
            state = state[0]
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state) or self:
            raise PickleFormatError(f"pickle tried to BUILD {self._class_name} from {type(state).__name__}")
        dict.update(self, state)

    @property
    def class_name(self) -> str:
        return self._class_name

    def __reduce__(self):  # never re-pickle these
        raise TypeError("plain data read from a pickle is not picklable")

    def __repr__(self) -> str:
        return f"{self._class_name}({dict.__repr__(self)})"


def plain_class(full_name: str, base: type = PlainData) -> type:
    """A PlainData subclass that names `full_name` (``module.Name``)."""
    return type(full_name.rsplit(".", 1)[1], (base,), {"__slots__": (), "_class_name": full_name})


class SafeCallable(_Frozen):
    """An allowed function: calling it calls `fn`; BUILD, attribute writes and pickling refused."""

    __slots__ = ("_fn", "_name")

    def __init__(self, name: str, fn: Callable[..., Any]):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def __repr__(self) -> str:
        return f"<allowlisted {self._name}>"


class Token(_Frozen):
    """An allowed global that is only ever an argument (a class a rebuild function is handed):
    calling it, NEWOBJ on it and BUILD on it are refused."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        object.__setattr__(self, "name", name)

    def __call__(self, *args: Any) -> Any:
        raise PickleFormatError(f"pickle tried to call {self.name}, which its writer only names")

    def __repr__(self) -> str:
        return f"<allowlisted name {self.name}>"


def check(cond: bool, what: str) -> None:
    if not cond:
        raise PickleFormatError(what)


# --------------------------------------------------------------------------- builtins


def _ordered_dict(*args: Any) -> OrderedDict:
    if not args:
        return OrderedDict()
    if len(args) == 1 and isinstance(args[0], (list, tuple, dict)):
        return OrderedDict(args[0])
    raise PickleFormatError("collections.OrderedDict: unexpected arguments")


def _codecs_encode(text: Any, encoding: Any = "utf-8", *rest: Any) -> bytes:
    # protocol 2 writes bytes objects as _codecs.encode(bytes.decode("latin1"), "latin1")
    if rest or type(text) is not str or encoding not in ("latin1", "latin-1", "iso-8859-1"):
        raise PickleFormatError("_codecs.encode: only (str, 'latin1') is accepted")
    return text.encode("latin-1")


def _bytes(*args: Any) -> bytes:
    if not args:
        return b""
    if len(args) == 1 and type(args[0]) in (bytes, bytearray):
        return bytes(args[0])
    raise PickleFormatError("builtins.bytes: only () or (bytes,) is accepted")


_ITERABLE_TYPES = (list, tuple, set, frozenset)


def _set(*args: Any) -> set:
    if not args:
        return set()
    if len(args) == 1 and type(args[0]) in _ITERABLE_TYPES:
        return set(args[0])
    raise PickleFormatError("builtins.set: only () or (list,) is accepted")


def _frozenset(*args: Any) -> frozenset:
    if not args:
        return frozenset()
    if len(args) == 1 and type(args[0]) in _ITERABLE_TYPES:
        return frozenset(args[0])
    raise PickleFormatError("builtins.frozenset: only () or (list,) is accepted")


BUILTINS: dict[str, Callable[..., Any]] = {
    "collections.OrderedDict": _ordered_dict,
    "_codecs.encode": _codecs_encode,
    **{f"{mod}.{name}": fn for mod in ("__builtin__", "builtins")
       for name, fn in (("bytes", _bytes), ("set", _set), ("frozenset", _frozenset))},
}
