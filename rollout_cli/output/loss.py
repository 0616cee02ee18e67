"""The loss aggregations as per-token weights (docs/loss.md): for a batch of a step, the weight of
each token of its flat token stream, such that Σ weight × per-token loss over every
micro-batch of every rank of the step is the step's loss under the aggregation, whatever the
world size, token budget and micro-batching. Each weight is the token's loss-mask value over a
divisor made of the output's own denominator columns (pipeline/fields.py); prompt tokens weigh
0, as does every token of a divisor 0.

Written once against an array namespace (`NUMPY` here; loader/batch.py's for torch), so the
numpy Batch and the torch PackedBatch compute the same weights, the torch one on the batch's
device."""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..pipeline.fields import STEP_FIELDS

__all__ = ["AGGREGATIONS", "Ops", "NUMPY", "divisors", "token_weights", "of_batch"]

# aggregation -> the divisor of a trained token of sample i (M_i: its loss-mask total)
AGGREGATIONS = {
    "token_mean": "step_mask_sum",
    "sample_mean": "M_i × step_samples",
    "rollout_mean": "rollout_mask_sum_i × step_rollouts",
    "group_mean": "group_mask_sum_i × step_groups",
    "constant": "constant × step_samples",
}


@dataclass(frozen=True)
class Ops:
    """The few array functions the weights need, of one array library (`like`: an array whose
    device the result goes to)."""

    arange: Callable[[int, Any], Any]  # int64 0..n-1
    zeros: Callable[[int, Any], Any]  # float32 zeros (the weights' type)
    as_weight: Callable[[Any], Any]  # float32
    as_float: Callable[[Any], Any]  # float64
    as_index: Callable[[Any], Any]  # int64
    cumsum: Callable[[Any], Any]  # inclusive running sum
    repeat: Callable[[Any, Any], Any]  # x[i] repeated counts[i] times
    segment_sum: Callable[[Any, Any, int], Any]  # float64 [n]: the sum of values per segment label
    where: Callable[[Any, Any, Any], Any]


NUMPY = Ops(
    arange=lambda n, like: np.arange(n, dtype=np.int64),
    zeros=lambda n, like: np.zeros(n, dtype=np.float32),
    as_weight=lambda x: np.asarray(x, dtype=np.float32),
    as_float=lambda x: np.asarray(x, dtype=np.float64),
    as_index=lambda x: np.asarray(x, dtype=np.int64),
    cumsum=np.cumsum,
    repeat=np.repeat,
    segment_sum=lambda values, labels, n: np.bincount(labels, weights=values, minlength=n),
    where=np.where,
)


def divisors(aggregation: str, mask_totals, rollout_mask_sums, group_mask_sums, step: dict, constant=None):
    """Per sample, the divisor of each of its trained tokens under `aggregation` (AGGREGATIONS),
    from float arrays [n] and the step's denominators `step` (step_mask_sum, step_samples,
    step_rollouts, step_groups). `constant` is required for "constant" and refused otherwise."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation: expected one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    if aggregation == "constant":
        if constant is None or isinstance(constant, bool) or not isinstance(constant, numbers.Real) or not constant > 0:
            raise ValueError(f"constant: the 'constant' aggregation needs a positive number, got {constant!r}")
        return mask_totals * 0 + float(constant) * step["step_samples"]
    if constant is not None:
        raise ValueError(f"constant: only the 'constant' aggregation takes one, not {aggregation!r}")
    if aggregation == "token_mean":
        return mask_totals * 0 + float(step["step_mask_sum"])
    if aggregation == "sample_mean":
        return mask_totals * step["step_samples"]
    if aggregation == "rollout_mean":
        return rollout_mask_sums * step["step_rollouts"]
    return group_mask_sums * step["step_groups"]


def token_weights(ops: Ops, aggregation: str, *, num_tokens: int, cu_seqlens, response_lengths, loss_mask,
                  rollout_mask_sums, group_mask_sums, step: dict, constant=None):
    """The float32 weight of each of `num_tokens` tokens of a batch, aligned with its flat
    tokens: sample i's response is the last response_lengths[i] tokens of its span
    cu_seqlens[i]:cu_seqlens[i+1], and its t-th response token weighs loss_mask[i, t] / the
    sample's divisor (`divisors`); every other token, and every token of a divisor 0, weighs 0."""
    mask = ops.as_float(loss_mask)
    lengths = ops.as_index(response_lengths)
    n = len(lengths)
    out = ops.zeros(num_tokens, mask)
    if not n or not len(mask):
        divisors(aggregation, mask, mask, mask, step, constant)  # the arguments checked all the same
        return out
    sample_of = ops.repeat(ops.arange(n, mask), lengths)  # the sample of each response token
    totals = ops.segment_sum(mask, sample_of, n)
    d = divisors(aggregation, totals, ops.as_float(rollout_mask_sums), ops.as_float(group_mask_sums), step, constant)
    per_sample = ops.where(d > 0, 1.0 / ops.where(d > 0, d, 1.0), 0.0)
    # response token j of the flat mask is token j + cu_seqlens[i+1] - (its sample's response end)
    shift = ops.as_index(cu_seqlens)[1:] - ops.cumsum(lengths)
    at = ops.arange(len(mask), mask) + shift[sample_of]
    out[at] = ops.as_weight(mask * per_sample[sample_of])
    return out


def of_batch(ops: Ops, batch, aggregation: str, constant=None):
    """token_weights of a Batch or PackedBatch (output/batch_fields.FIELDS), with `ops` of its
    array library."""
    return token_weights(ops, aggregation, num_tokens=len(batch.tokens), cu_seqlens=batch.cu_seqlens,
                         response_lengths=batch.response_lengths, loss_mask=batch.loss_mask,
                         rollout_mask_sums=batch.rollout_mask_sums, group_mask_sums=batch.group_mask_sums,
                         step={name: getattr(batch, name) for name in STEP_FIELDS}, constant=constant)
