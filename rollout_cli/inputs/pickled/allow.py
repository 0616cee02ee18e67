"""The allow-list of the restricted unpickler: the only globals a pickle may name, each mapped to
a function, token or plain-data class of this package (plain.py, torch_globals.py,
numpy_globals.py, tensordict_globals.py, frameworks.py, images.py); nothing is imported and nothing else
can be called. Any other global raises ``UnsafePickleError``.

One list serves every pickled input (slime and miles ``.pt`` dumps, SkyRL, verl and ROLL
batches, and the torch.save bytes inside them): a global is allowed for all or for none.

Not allowed (among everything else), since no rollout dump holds them: complex tensors and the
conj/neg view bits, ``_rebuild_tensor_v3`` (the uint16/32/64 and float8 dtypes),
``torch._utils._rebuild_parameter``, sparse/quantized/nested/meta/wrapper-subclass rebuilds,
``bytearray``, ``complex``, tensorclasses, the frameworks' other classes.
"""
from __future__ import annotations

import types
from typing import Any

from .frameworks import framework_classes, framework_functions
from .images import image_classes
from .numpy_globals import numpy_globals
from .plain import BUILTINS, SafeCallable
from .tensordict_globals import tensordict_globals
from .torch_globals import torch_globals


def _wrap(name: str, obj: Any) -> Any:
    # functions are wrapped (inert, unpatchable); tokens and storage kinds are used as they are
    return SafeCallable(name, obj) if isinstance(obj, types.FunctionType) else obj


_ALLOWED: dict[str, Any] = {name: _wrap(name, obj) for part in (BUILTINS, torch_globals(), numpy_globals(),
                                                                  tensordict_globals(), framework_functions())
                            for name, obj in part.items()}
#: the classes NEWOBJ may instantiate (types, so kept apart from the inert objects above)
_PLAIN_TYPES: dict[str, type] = {**framework_classes(), **image_classes()}
#: Every global name the restricted unpickler resolves (``"module.name"``), sorted.
ALLOWED_GLOBALS: tuple[str, ...] = tuple(sorted([*_ALLOWED, *_PLAIN_TYPES]))


def resolve(module: str, name: str) -> Any:
    """The object `module.name` resolves to, or None when it is not allowed."""
    full = f"{module}.{name}"
    return _ALLOWED.get(full) or _PLAIN_TYPES.get(full)
