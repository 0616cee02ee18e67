"""The allow-list of the torch-free `.pt` loader's restricted unpickler (``ALLOWED_GLOBALS``):
the only globals a pickle may name, each mapped to an inert function or token of this module
(or of pt_tensors.py, the tensor rebuild); nothing is imported and nothing else can be called.
Any other global raises ``UnsafePickleError``.

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

from collections import OrderedDict
from typing import Any, Callable

from .pt_errors import PtFormatError
from .pt_tensors import _DTYPES, _LEGACY_STORAGES, _Frozen, _rebuild_tensor_v2, _StorageKind


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
