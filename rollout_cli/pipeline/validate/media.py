"""A sample's raw images (`multimodal_inputs["images"]`) as the `images` column's entries: each
image stored losslessly as PNG bytes (which carry its mode and size), laid out as Hugging Face's
`Image` feature (`{"bytes", "path"}`). An image comes as the restricted unpickler's ImageData (a
PIL image in a .pt dump), a PIL image (--trust-pickle), an encoded file's bytes, a data URL, a
file path, or Hugging Face's `{"bytes", "path"}` dict. PNG encoding needs Pillow (the `vlm`
extra). What cannot be kept (no Pillow, a mode PNG cannot hold, a file that cannot be read,
videos) is counted per sample, and the step says how many in a note."""
from __future__ import annotations

import base64
import io
from typing import Any

# the modes a PNG holds exactly
PNG_MODES = frozenset({"1", "L", "LA", "P", "RGB", "RGBA", "I;16"})


def _pil():
    try:
        from PIL import Image
    except ModuleNotFoundError:
        return None
    return Image


def _png(im) -> bytes:
    out = io.BytesIO()
    im.save(out, format="PNG", compress_level=6)
    return out.getvalue()


def _decoded(data: bytes, Image):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def one_image(v: Any, Image) -> tuple[bytes | None, str | None]:
    """(PNG bytes, None), or (None, why it cannot be kept)."""
    if Image is None:
        return None, "Pillow is not installed (pip install 'rollout-cli[vlm]')"
    try:
        if isinstance(v, dict) and getattr(v, "class_name", "").startswith("PIL."):  # the unpickler's ImageData
            if v["mode"] not in PNG_MODES:
                return None, f"mode {v['mode']} has no lossless PNG form"
            im = Image.frombytes(v["mode"], tuple(v["size"]), v["data"])
            if v["palette"]:
                im.putpalette(v["palette"])
            return _png(im), None
        if isinstance(v, Image.Image):
            return (_png(v), None) if v.mode in PNG_MODES else (None, f"mode {v.mode} has no lossless PNG form")
        if isinstance(v, dict) and ("bytes" in v or "path" in v):  # Hugging Face's Image feature
            v = v.get("bytes") or v.get("path")
        if isinstance(v, (bytes, bytearray, memoryview)):
            im = _decoded(bytes(v), Image)
        elif isinstance(v, str) and v.startswith("data:"):
            head, _, payload = v.partition(",")
            im = _decoded(base64.b64decode(payload) if head.endswith(";base64") else payload.encode(), Image)
        elif isinstance(v, str):
            with open(v, "rb") as f:
                im = _decoded(f.read(), Image)
        else:
            return None, f"not an image: {type(v).__name__}"
    except (OSError, ValueError, SyntaxError) as e:  # Pillow's errors for bad or unreadable image data
        return None, f"unreadable image: {e}"[:200]
    if im.mode not in PNG_MODES:
        return None, f"mode {im.mode} has no lossless PNG form"
    return _png(im), None


def encode_images(mm_inputs: Any) -> tuple[list | None, int, str | None]:
    """(the images column's entries or None, how many images and videos were not kept, the first
    reason). `mm_inputs` is the sample's multimodal_inputs (a dict, or None)."""
    if not isinstance(mm_inputs, dict):
        return None, 0, None
    images = mm_inputs.get("images") or []
    videos = mm_inputs.get("videos") or []
    dropped, why = 0, None
    if videos:
        dropped, why = len(videos), "videos are not stored"
    if not images:
        return None, dropped, why
    Image = _pil()
    out = []
    for v in images:
        png, reason = one_image(v, Image)
        if png is None:
            dropped += 1
            why = why or reason
        else:
            out.append({"bytes": png, "path": None})
    return out or None, dropped, why
