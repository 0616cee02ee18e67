"""Pickled framework batches read without running code and without the framework installed: the
restricted unpickler the pickle-based formats stand on (not a format itself).

Entry points (unpickle.py; a reader calls reading.py's ``read_pickled(path, display,
trust_pickle)``, which turns their failures into exit 3 naming the file):

``load_pickle(path)`` / ``loads_pickle(data, display)``
    A bare pickle (``pickle.dump``, any protocol).
``load_torch(path)`` / ``load_torch_bytes(data, display)``
    A ``torch.save`` zip archive (slime and miles ``.pt`` dumps use ``load_torch``).

README.md lists the invariants that keep a hostile file from running code, corrupting memory or
exhausting it. Every global the file names resolves through one allow-list (allow.py) to a function, token or
plain-data class of this package; any other raises ``UnsafePickleError`` (its ``global_name``
and ``path``; readers turn it into exit 3 and offer ``--trust-pickle``). Data its writer never
writes raises ``PickleFormatError`` (``PtFormatError`` is the same class). Nothing of torch,
numpy's pickle hooks, tensordict or a framework is imported or called by the file.

What comes back, all plain data:

* tensors (torch.save storages, SkyRL's numpy-format tensors, TensorDict leaves, a lone
  tensor's legacy storage bytes) and numpy arrays: ``numpy.ndarray`` (bfloat16 as float32,
  exactly, or, with ``load_torch(path, as_stored=True)``, as its bit patterns:
  ``core.tensors.BFloat16Bits``); numpy arrays of the dtypes README.md
  lists, an object array's items made by the same restricted unpickler; numpy scalars as numpy scalars;
  ``torch.device`` as its str (``"cpu"``, ``"cuda:0"``); ``torch.Size`` as a tuple of ints;
  ``io.BytesIO`` as a ``BytesIOData`` (``.data``: its bytes).
* a TensorDict: ``TensorDictData``, a dict of its entries (key -> array, nested
  ``TensorDictData`` or a non-tensor entry's value) with ``.batch_size`` (tuple) and ``.device``
  (str or None); consolidated or not.
* a framework object: a ``PlainData`` (a dict) whose ``class_name`` is the class the file names.
* a PIL image (``PIL.Image.Image`` or a file plugin's class, slime's ``multimodal_inputs``): an
  ``ImageData`` (images.py), a dict of its checked ``mode``, ``size``, ``palette``, ``data`` (the
  raw pixel bytes), ``info`` and ``filename``; PIL is not imported.

Per framework file (writers in frameworks.py's docstring, repository@commit path:line):

SkyRL ``{export_path}/dumped_data/global_step_{N}_training_input.pkl`` (``load_pickle``)::

    PlainData class_name "skyrl.backends.skyrl_train.training_batch.TrainingInputBatch"
    {"batch_dict": {"sequences": int64 (B, S) left-padded, "attention_mask": int64 (B, S),
                    "response_mask": int64 (B, R), "loss_mask": float32 (B, R),
                    "rollout_logprobs": float32 (B, R) | None, "action_log_probs", "advantages",
                    "returns", "values", "kl", "base_action_log_probs", "rollout_expert_indices",
                    "router_padding_mask": arrays or None (as present),
                    "pixel_values", "image_grid_thw": list of arrays (TensorList) or None},
     "batch_size": int, "device": "cpu" | None,
     "metadata": {"policy_prompt_boundaries": [...], "policy_mini_batch_boundaries": [...],
                  "response_length": int, "avg_response_length": float, "pad_size": int, ...}}

  (the writer's own keys, decoded; ``rewards`` and ``metadata["uids"]`` are popped before it
  dumps; bfloat16 tensors as float32).

verl ``.../GBS{gbs}_N{n}_in{P}_out{R}/{step}/gen_batch.dp`` (``load_pickle``; ``meta.json``
beside it is JSON ``{"global_steps": step}``)::

    PlainData class_name "verl.protocol.DataProto"
    {"batch": TensorDictData {"prompts": (B, P), "responses": (B, R), "input_ids", "attention_mask",
                              "position_ids", "response_mask", "rollout_log_probs", "rm_scores", ...}
              | None,
     "non_tensor_batch": {key: numpy array (object arrays of str / dict / list, or numeric);
                          "multi_modal_inputs": object array of dicts of tensors (legacy.py) or None},
     "meta_info": dict}

ROLL ``{dump_dir}/{train,val}/step_{NNNNNN}.pkl`` (``load_pickle``)::

    PlainData class_name "roll.distributed.scheduler.protocol.DataProto"
    {"batch": TensorDictData {"input_ids", "attention_mask", "response_mask", "infer_logprobs",
                              "scores", "prompt_mask", ...} | None,
     "non_tensor_batch": {"traj_group_id": object array of str, "traj_id": object array of str,
                          ...: object arrays (of object arrays, too)},
     "meta_info": dict}

slime / miles ``.pt`` (``load_torch``): ``{"rollout_id": step, "samples": [dict, ...]}`` with
tensors and numpy arrays (miles R3's ``rollout_routed_experts``: int32, (tokens - 1, layers,
top-k)) as numpy arrays, miles' ``AdapterRef`` / ``RewardSpec`` as PlainData.
"""
from .allow import ALLOWED_GLOBALS
from .errors import PickleFormatError, PtFormatError, UnsafePickleError
from .frameworks import BytesIOData
from .plain import PlainData
from .tensordict_globals import TensorDictData
from .reading import read_pickled
from .unpickle import load_pickle, load_torch, load_torch_bytes, loads_pickle

__all__ = [
    "ALLOWED_GLOBALS",
    "BytesIOData",
    "PickleFormatError",
    "PlainData",
    "PtFormatError",
    "TensorDictData",
    "UnsafePickleError",
    "load_pickle",
    "load_torch",
    "load_torch_bytes",
    "loads_pickle",
    "read_pickled",
]
