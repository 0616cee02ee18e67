"""PackedBatch: one shard of one step (or a slice of it) as flat torch tensors: the token and
response streams with their offsets, the per-sample arrays and the step's denominators; moving
it (one pinned staging buffer, one host-to-device copy) and cutting it into micro-batches.
slime's train_data form is loader/slime.py's."""
from __future__ import annotations

import warnings
from dataclasses import field, fields, replace
from typing import Any, Iterator

import numpy as np

try:
    import torch
except ModuleNotFoundError as e:  # torch is an extra: say which
    if e.name != "torch":
        raise
    raise ModuleNotFoundError("the loader (open_dataset, PackedBatch, RankDataset) hands out torch tensors and needs "
                              "torch: pip install 'rollout-cli[torch]'", name="torch") from None

from ..core import tensors
from ..core.errors import UsageError
from ..output.batch_fields import ARRAY_FIELDS, PER_SAMPLE, batch_dataclass
from ..output import loss
from ..output.gather import block_layout
from ..output.views import Ragged
from . import slime

__all__ = ["PackedBatch"]


@batch_dataclass("torch.Tensor")
class PackedBatch:
    """One shard of one step, packed: flat token and response streams plus per-sample arrays.

    Layout (n = num_samples):
      tokens            int32 [sum(total_lengths)]   every sample's prompt+response ids, concatenated
      cu_seqlens        int32 [n+1]                  sample i is tokens[cu_seqlens[i]:cu_seqlens[i+1]]
      loss_mask         uint8 [sum(response_lengths)] every sample's mask, concatenated
      rollout_log_probs, teacher_log_probs
                        float32, same layout as loss_mask, or None when the shard has none
                        (samples that lack them, in a shard where others have them, hold NaN)
      response_lengths, total_lengths                int32 [n]
      rewards float32, raw_rewards float64, rollout_ids int64, rollout_mask_sums int64,
      group_mask_sums, group_rollouts int64 (of the sample's prompt group),
      sample_indices / group_indices int64 (-1 where null), truncated bool,
      remove_samples bool (slime's remove_sample: the sample's loss mask is all zeros; false
                        for every sample of an output written before the column, schema 2),
      round_numbers int64 (-1 where null) or None      [n]
      source_names      list[str] or None (not a tensor)
      step_mask_sum, step_rollouts, step_samples, step_groups   int: the whole step's loss-mask
                        total, rollouts, samples and prompt groups (over all shards; README
                        "Loss denominators")
      rollout_positions int64 [n]                    each sample's place in its step (the key
                        back to the dump: slime's partition entry)
      optimizer_steps, micro_batch_ids   int64 [n] or None: a --schedule slime shard served as
                        converted: the sample's optimizer step within the step and its
                        micro-batch within the rank's optimizer step
      extras            every other column of the row schema, by its column name, also read as
                        an attribute (`batch.status`): output/views.py says each type's form
      micro_batch_index, num_micro_batches   int: this batch's place among its rank's
                        micro-batches of the step (iter_batches; 0 and 1 for `load()`)

    On CPU after `load()` the tensors are views of the memory-mapped shard (no copy). The
    fields are declared once, for this class and the numpy Batch: output/batch_fields.FIELDS.
    """

    # the step's schedule record from the manifest, and a reader of its whole-batch lists
    schedule: dict | None = field(default=None, repr=False)
    _whole_batch: Any = field(default=None, repr=False)
    # the single pinned buffer every tensor is a view of, after pin_memory() (not public)
    _staging: torch.Tensor | None = field(default=None, repr=False)

    def __getattr__(self, name: str):
        # the columns without a field of their own (extras), read as attributes
        if not name.startswith("_") and name != "extras":
            extras = self.__dict__.get("extras")
            if extras is not None and name in extras:
                return extras[name]
        raise AttributeError(f"{type(self).__name__} has no field or column {name!r}")

    def __repr__(self) -> str:
        opt = [k for k in ("rollout_log_probs", "teacher_log_probs", "round_numbers") if getattr(self, k) is not None]
        return (f"PackedBatch(split={self.split!r}, step={self.step}, shard={self.shard}, samples={self.num_samples}, "
                f"tokens={self.num_tokens}, response_tokens={int(self.loss_mask.numel())}, device={self.device}, "
                f"pinned={self._staging is not None}, optional={opt})")

    # -- making ------------------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, arrays: dict[str, Any], **meta) -> "PackedBatch":
        """A batch whose tensors are views of the numpy arrays `arrays` (output/views.unpack's
        form: field name -> array, None, or a list for source_names); `meta`: step, shard, split."""
        arrays = dict(arrays)
        block = arrays.pop("_block", None)  # the one buffer the arrays lie in (output/gather.take_blocks)
        for name in ARRAY_FIELDS:  # (the rest are ints, strings, None)
            v = arrays.get(name)
            if v is not None:
                arrays[name] = torch.from_numpy(v)
        extras = arrays.get("extras")
        arrays["extras"] = {k: _map_value(v, torch.from_numpy) for k, v in extras.items()} if extras else {}
        per = arrays["extras"].get("multimodal_train_inputs")
        joined = {}
        if per:  # one copy a key (the file's bytes are read-only); each sample's tensors are views of it
            joined, per = tensors.join(per)
            joined = {k: _tensor(v) for k, v in joined.items()}
            per = arrays["extras"]["multimodal_train_inputs"] = [
                None if d is None else {k: _tensor(v) if isinstance(v, np.ndarray) else v for k, v in d.items()}
                for d in per]
        arrays["multimodal_train_inputs"] = _joined(per or [], joined)
        return cls(**arrays, **meta, _staging=None if block is None else torch.from_numpy(block))

    # -- shape ------------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return int(self.response_lengths.numel())

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @property
    def response_cu_seqlens(self) -> torch.Tensor:
        """int32 [n+1] offsets of each sample's response span in loss_mask / log-probs."""
        out = torch.zeros(self.num_samples + 1, dtype=torch.int32, device=self.response_lengths.device)
        torch.cumsum(self.response_lengths, 0, out=out[1:])
        return out

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the batch by field name (None fields left out)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "_staging" and isinstance(v, torch.Tensor):
                out[f.name] = v
        return out

    def buffers(self) -> list[torch.Tensor]:
        """The memory the batch's tensors lie in, as few contiguous uint8 tensors as there are:
        its staging buffer where it has one (a gathered micro-batch's block, or pin_memory()'s),
        else each tensor; then each extra's. To move or checksum a batch whole."""
        out = [self._staging] if self._staging is not None else [
            t.reshape(-1).view(torch.uint8) for t in self.tensors().values()]
        for v in self.extras.values():
            out.extend(p.reshape(-1).view(torch.uint8) for p in ((v.values, v.offsets) if isinstance(v, Ragged) else (v,))
                       if isinstance(p, torch.Tensor))
        return out

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    # -- moving -----------------------------------------------------------------------------
    def pin_memory(self) -> "PackedBatch":
        """A copy whose tensors are views of ONE page-locked host buffer (a single allocation,
        one memcpy per tensor).  Without CUDA it warns and returns self, as DataLoader does.
        Also what `DataLoader(pin_memory=True)` calls."""
        if self.device.type != "cpu":
            raise ValueError(f"pin_memory: the batch is on {self.device}, not the CPU")
        if self._staging is not None and self._staging.is_pinned():
            return self
        if not torch.cuda.is_available():
            warnings.warn("pin_memory: no CUDA device, so the batch is left unpinned", RuntimeWarning, stacklevel=2)
            return self
        if self._staging is not None:  # one block already (a gathered micro-batch): one copy of it
            pinned = torch.empty(self._staging.numel(), dtype=torch.uint8, pin_memory=True)
            pinned.copy_(self._staging)
            out = replace(self._views_of(pinned), _staging=pinned)
        else:
            out = self._stage(pin=True)
        # the multimodal tensors (outside the staging buffer) are pinned one by one
        pin = lambda t: t.pin_memory()  # noqa: E731
        return replace(out, extras={k: _map_value(v, pin) for k, v in self.extras.items()},
                       multimodal_train_inputs={k: pin(t) for k, t in self.multimodal_train_inputs.items()})

    def _stage(self, pin: bool) -> "PackedBatch":
        """Copy every tensor into one (pinned) host buffer; the result's tensors are views of it."""
        items = self.tensors()
        layout, total = _staging_layout(items)
        staging = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=pin)
        views = {}
        for name, t in items.items():
            off, nbytes = layout[name]
            v = staging[off:off + nbytes].view(t.dtype)
            v.copy_(t)
            views[name] = v
        return replace(self, _staging=staging, **views)

    def _views_of(self, buffer: torch.Tensor) -> "PackedBatch":
        """A batch whose tensors are views of `buffer`, a copy of this batch's staging buffer
        (on any device)."""
        layout, _ = _staging_layout(self.tensors())
        views = {name: buffer[off:off + nbytes].view(getattr(self, name).dtype) for name, (off, nbytes) in layout.items()}
        return replace(self, _staging=None, **views)

    def is_pinned(self) -> bool:
        if self.device.type != "cpu":
            return False
        if self._staging is not None:
            return self._staging.is_pinned()
        return all(t.is_pinned() for t in self.tensors().values())

    def to(self, device: str | torch.device, non_blocking: bool = True) -> "PackedBatch":
        """A new PackedBatch on `device`.

        CPU -> CUDA: pins once (one page-locked buffer holding every tensor, unless the batch is
        pinned already), then ONE `.to(device, non_blocking=True)` of that buffer; the device
        tensors are views of the one device buffer.  The copy is queued on the current stream:
        work on that stream sees the data, other streams must synchronise with it first.
        To the CPU the copy is always blocking (a non-blocking D2H copy would hand out memory
        that is not yet written).  Same device: returns a batch sharing the tensors.
        """
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if self.device == device:
            return replace(self)
        if device.type == "cpu":
            out = self._map(lambda t: t.to(device))
        else:
            src = self.pin_memory() if (self.device.type == "cpu" and device.type == "cuda") else self
            if src._staging is not None:
                out = src._views_of(src._staging.to(device, non_blocking=non_blocking))
            else:
                out = src._map(lambda t: t.to(device, non_blocking=non_blocking))
        # the extra columns' tensors are moved one by one (outside the staging buffer)
        move = lambda t: t.to(device, non_blocking=non_blocking and device.type != "cpu")  # noqa: E731
        return replace(out, extras={k: _map_value(v, move) for k, v in self.extras.items()},
                       multimodal_train_inputs={k: move(t) for k, t in self.multimodal_train_inputs.items()})

    def cpu(self) -> "PackedBatch":
        return self.to("cpu")

    def cuda(self, device: int | None = None, non_blocking: bool = True) -> "PackedBatch":
        return self.to(torch.device("cuda", device) if device is not None else "cuda", non_blocking=non_blocking)

    def _map(self, fn) -> "PackedBatch":
        return replace(self, _staging=None, **{k: fn(v) for k, v in self.tensors().items()})

    # -- micro-batches ----------------------------------------------------------------------
    @property
    def scheduled(self) -> bool:
        """True for a shard written by `convert --schedule slime`."""
        return self.micro_batch_ids is not None

    def micro_batch_bounds(self) -> list[tuple[int, int]]:
        """(first, end) sample ranges of the micro-batches, in order (runs of equal
        (optimizer_step, micro_batch)). UsageError on a shard not written by --schedule slime."""
        if not self.scheduled:
            raise UsageError(f"{self.split} step {self.step} shard {self.shard}: no micro-batch layout "
                             "(converted with --schedule balanced; reconvert with --schedule slime)")
        n = self.num_samples
        if not n:
            return []
        key = self.optimizer_steps.cpu().to(torch.int64) * (1 << 32) + self.micro_batch_ids.cpu().to(torch.int64)
        change = torch.nonzero(key[1:] != key[:-1]).flatten() + 1
        cuts = [0] + change.tolist() + [n]
        return list(zip(cuts[:-1], cuts[1:]))

    def slice(self, start: int, end: int) -> "PackedBatch":
        """Samples [start, end) as a PackedBatch of views (no copy)."""
        cu = self.cu_seqlens
        rcu = self.response_cu_seqlens
        t0, t1 = int(cu[start]), int(cu[end])
        r0, r1 = int(rcu[start]), int(rcu[end])

        def per(t):
            return None if t is None else t[start:end]

        def resp(t):
            return None if t is None else t[r0:r1]

        extras = {k: _slice_value(v, start, end) for k, v in self.extras.items()}
        return replace(
            self, _staging=None, tokens=self.tokens[t0:t1], cu_seqlens=cu[start:end + 1] - cu[start],
            loss_mask=resp(self.loss_mask), rollout_log_probs=resp(self.rollout_log_probs),
            teacher_log_probs=resp(self.teacher_log_probs),
            source_names=None if self.source_names is None else self.source_names[start:end],
            extras=extras, multimodal_train_inputs=_joined(extras.get("multimodal_train_inputs") or [], {}),
            **{k: per(getattr(self, k)) for k in PER_SAMPLE},
        )

    def micro_batches(self) -> Iterator["PackedBatch"]:
        """One PackedBatch (views) per micro-batch, in the order slime's trainer runs them."""
        for a, b in self.micro_batch_bounds():
            yield self.slice(a, b)


    # -- loss -------------------------------------------------------------------------------
    def token_weights(self, aggregation: str, constant: float | None = None) -> torch.Tensor:
        """float32 [num_tokens] on the batch's device, aligned with `tokens`: each token's weight
        in the step's loss under `aggregation` ("token_mean", "sample_mean", "rollout_mean",
        "group_mean", or "constant" with `constant`), 0 on prompt tokens and masked ones;
        Σ weights × per-token loss over every micro-batch of every rank is the step's loss
        (docs/loss.md; the numpy Batch's the same, output/loss.py)."""
        return loss.of_batch(_TORCH_OPS, self, aggregation, constant)

    # -- slime ------------------------------------------------------------------------------
    def to_slime_train_data(self) -> dict[str, Any]:
        """This shard as slime's train_data dict after `tensorize_rollout_data_for_training`
        (loader/slime.train_data, which says what each key holds)."""
        return slime.train_data(self)




# output/loss.py's array functions, in torch (on the batch's device)
_TORCH_OPS = loss.Ops(
    arange=lambda n, like: torch.arange(n, dtype=torch.int64, device=like.device),
    zeros=lambda n, like: torch.zeros(n, dtype=torch.float32, device=like.device),
    as_weight=lambda x: x.to(torch.float32),
    as_float=lambda x: x.to(torch.float64),
    as_index=lambda x: x.to(torch.int64),
    cumsum=lambda x: torch.cumsum(x, 0),
    repeat=torch.repeat_interleave,
    segment_sum=lambda values, labels, n: torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(
        0, labels, values),
    where=torch.where,
)


def _map_value(v, fn):
    """An extra column's value with `fn` applied to its arrays (a list or None stays; a list of
    dicts, multimodal_train_inputs', has `fn` applied to the dicts' tensors)."""
    if isinstance(v, Ragged):
        return v.map(fn)
    if isinstance(v, (np.ndarray, torch.Tensor)):
        return fn(v)
    if isinstance(v, list) and any(isinstance(d, dict) for d in v):
        return [{k: fn(x) if isinstance(x, torch.Tensor) else x for k, x in d.items()} if isinstance(d, dict) else d
                for d in v]
    return v


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A decoded array as a tensor of its stored dtype (BFloat16Bits: bfloat16), sharing memory."""
    if isinstance(a, tensors.BFloat16Bits):
        return torch.from_numpy(a.view(np.int16).view(np.ndarray)).view(torch.bfloat16)
    return torch.from_numpy(a.view(np.ndarray) if type(a) is not np.ndarray else a)


def _joined(per: list, joined: dict) -> dict:
    """slime's get_batch form of the per-sample dicts: `joined`'s tensors (one copy made
    already), the other keys by torch.cat (its type promotion where dtypes differ), in the
    order keys first appear."""
    order = tensors.concat(per, lambda ts: None)
    rest = tensors.concat([None if d is None else {k: v for k, v in d.items() if k not in joined} for d in per],
                          _torch_cat)
    return {k: joined[k] if k in joined else rest[k] for k in order}


def _torch_cat(ts: list) -> torch.Tensor:
    """slime's get_batch join: torch.cat along dim 0 (torch's type promotion: bf16 + f32 -> f32)."""
    return ts[0] if len(ts) == 1 else torch.cat(ts, dim=0)


def _slice_value(v, start: int, end: int):
    if v is None:
        return None
    if isinstance(v, Ragged):
        return v.slice(start, end)
    return v[start:end]


def _staging_layout(items: dict[str, torch.Tensor]) -> tuple[dict[str, tuple[int, int]], int]:
    # output/gather.block_layout: the layout a gathered micro-batch's block already has
    return block_layout([(name, t.numel() * t.element_size()) for name, t in items.items()])
