"""The image placeholder rule (`--image-token-id ID`, `--spatial-merge-size M`): a valid row whose
prompt holds image placeholder tokens must carry pixel values, and the count of placeholders must
be what its `image_grid_thw` gives, prod(t, h, w) / M**2 per image (Qwen2-VL's processor pads an
image to one placeholder per merged patch). A row that breaks it becomes an invalid sample, its
problem named as any other (rules `multimodal_train_inputs.missing`,
`multimodal_train_inputs.placeholders`)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...core import tensors
from ...core.errors import Problem
from ...inputs.base import RawChunk
from .batch import NormChunk

FIELD = "multimodal_train_inputs"
MISSING, PLACEHOLDERS = f"{FIELD}.missing", f"{FIELD}.placeholders"


def expected_placeholders(grid: np.ndarray, merge: int) -> int:
    """Placeholder tokens the images of `grid` ([n_images, 3] t, h, w) take."""
    g = np.asarray(grid, dtype=np.int64).reshape(-1, 3)
    return int((g.prod(axis=1) // (merge * merge)).sum())


def row_problem(tokens: np.ndarray, mm: dict | None, image_token_id: int, merge: int) -> tuple[str, str] | None:
    """(rule, reason) where the row breaks the rule; None where it keeps it."""
    count = int(np.count_nonzero(tokens == image_token_id))
    has_pixels = mm is not None and mm.get("pixel_values") is not None
    grid = None if mm is None else mm.get("image_grid_thw")
    if count and not has_pixels:
        return MISSING, (f"the prompt holds {count} image placeholder token(s) (--image-token-id {image_token_id}) "
                         "but the sample has no pixel_values")
    if grid is None:
        if has_pixels:
            return PLACEHOLDERS, "pixel_values without image_grid_thw: the placeholder count cannot be checked"
        return None
    g = np.asarray(grid)
    if g.ndim != 2 or g.shape[1] != 3:
        return PLACEHOLDERS, f"image_grid_thw: expected shape [n_images, 3], got {list(g.shape)}"
    want = expected_placeholders(g, merge)
    if want != count:
        return PLACEHOLDERS, (f"the prompt holds {count} image placeholder token(s) (--image-token-id {image_token_id}), "
                              f"image_grid_thw gives {want} (prod(t, h, w) / {merge}**2 per image, "
                              f"--spatial-merge-size {merge})")
    return None


def check_images(nc: NormChunk, chunk: RawChunk, base_pos: int, image_token_id: int, merge: int) -> NormChunk:
    """`nc` with the rows that break the rule made invalid samples (their problem recorded, their
    rows left out of its batches)."""
    bad: list[tuple[int, Problem]] = []
    kept = []
    for b in nc.batches:
        pos = b.column("_pos").to_numpy()
        tok = b.column("tokens")
        offs = tok.offsets.to_numpy()
        flat = tok.values.to_numpy()
        mms = tensors.decode_column(b.column(FIELD))
        sidx = b.column("sample_index").to_pylist()
        keep = np.ones(len(b), bool)
        for r in range(len(b)):
            found = row_problem(flat[offs[r]:offs[r + 1]], mms[r], image_token_id, merge)
            if found is not None:
                i = int(pos[r]) - base_pos
                bad.append((i, Problem(chunk.location(i), FIELD, found[1], found[0], sample_index=sidx[r])))
                keep[r] = False
        kept.append(b if keep.all() else b.filter(pa.array(keep)))
    if not bad:
        return nc
    for i, _ in bad:
        nc.valid[i] = False
    nc.problems = sorted(nc.problems + bad, key=lambda ip: ip[0])
    nc.batches = [b for b in kept if len(b)]
    return nc
