"""PIL images in a pickle (slime's `multimodal_inputs["images"]`) read as plain data, without PIL:
`PIL.Image.Image` and its file-plugin subclasses pickle as `NEWOBJ` of the class with no
arguments, then `BUILD` with the list `Image.__getstate__` returns, `[info, mode, size, palette,
data]` (a file plugin's adds the file name). Each field is checked before anything is kept: the
mode from a closed table, the size two non-negative ints, the palette a list of 0..255 values in
RGB triples, and the pixel bytes exactly size x the mode's bytes per pixel (a bit per pixel,
rows padded to whole bytes, for mode "1"). What comes back is an `ImageData`, a dict of those
fields; no PIL code runs."""
from __future__ import annotations

from typing import Any

from .errors import PickleFormatError
from .plain import PlainData

# mode -> bytes per pixel of Image.tobytes() (None: mode "1", one bit a pixel, rows padded)
MODE_BYTES: dict[str, int | None] = {
    "1": None, "L": 1, "P": 1, "LA": 2, "PA": 2, "La": 2, "RGB": 3, "YCbCr": 3, "LAB": 3, "HSV": 3,
    "RGBA": 4, "RGBa": 4, "RGBX": 4, "CMYK": 4, "I": 4, "F": 4,
    "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2,
}
MAX_SIDE = 1 << 20  # a side longer than this is no image a processor sees
MAX_PALETTE = 3 * 256

# the classes an image pickles as: PIL.Image.Image and the file plugins a loaded image keeps
PIL_CLASSES = ("PIL.Image.Image", "PIL.PngImagePlugin.PngImageFile", "PIL.JpegImagePlugin.JpegImageFile",
               "PIL.GifImagePlugin.GifImageFile", "PIL.WebPImagePlugin.WebPImageFile",
               "PIL.BmpImagePlugin.BmpImageFile", "PIL.TiffImagePlugin.TiffImageFile",
               "PIL.MpoImagePlugin.MpoImageFile", "PIL.PpmImagePlugin.PpmImageFile")


def pixel_bytes(mode: str, size: tuple[int, int]) -> int:
    """Bytes of Image.tobytes() for an image of `mode` and `size`."""
    w, h = size
    bpp = MODE_BYTES[mode]
    return ((w + 7) // 8) * h if bpp is None else w * h * bpp


def _fail(cls: str, what: str) -> PickleFormatError:
    return PickleFormatError(f"pickled {cls}: {what}")


class ImageData(PlainData):
    """A PIL image as its checked state: `mode`, `size` (w, h), `palette` (list or None), `data`
    (the raw pixel bytes, Image.tobytes()'s layout), `info` (dict) and `filename` (a file
    plugin's, else None)."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        cls = self._class_name
        if self:
            raise _fail(cls, "a second BUILD")
        if not isinstance(state, list) or len(state) not in (5, 6):
            raise _fail(cls, f"expected Image.__getstate__'s list of 5 or 6 fields, got {type(state).__name__}"
                        + (f" of {len(state)}" if isinstance(state, (list, tuple)) else ""))
        info, mode, size, palette, data = state[:5]
        filename = state[5] if len(state) == 6 else None
        if not isinstance(info, dict) or not all(isinstance(k, str) for k in info):
            raise _fail(cls, "info: expected a dict with string keys")
        if type(mode) is not str or mode not in MODE_BYTES:
            raise _fail(cls, f"mode: expected one of {', '.join(MODE_BYTES)}, got {mode!r}"[:200])
        if (not isinstance(size, (tuple, list)) or len(size) != 2
                or not all(type(v) is int and 0 <= v <= MAX_SIDE for v in size)):
            raise _fail(cls, f"size: expected (width, height), each 0..{MAX_SIDE}, got {size!r}"[:200])
        if palette is not None:
            if (not isinstance(palette, list) or len(palette) % 3 or len(palette) > MAX_PALETTE
                    or not all(type(v) is int and 0 <= v <= 255 for v in palette)):
                raise _fail(cls, f"palette: expected a list of RGB triples of 0..255, at most {MAX_PALETTE} values")
        if not isinstance(data, (bytes, bytearray)):
            raise _fail(cls, f"data: expected the pixel bytes, got {type(data).__name__}")
        want = pixel_bytes(mode, tuple(size))
        if len(data) != want:
            raise _fail(cls, f"data: {len(data)} bytes for a {size[0]}x{size[1]} {mode} image, which takes {want}")
        if filename is not None and not isinstance(filename, str):
            raise _fail(cls, "filename: expected a string")
        dict.update(self, mode=mode, size=(size[0], size[1]), palette=palette or None, data=bytes(data), info=info,
                    filename=filename or None)


def image_classes() -> dict[str, type]:
    """The PIL classes NEWOBJ may instantiate, each read as an ImageData naming it."""
    return {name: type(name.rsplit(".", 1)[1], (ImageData,), {"__slots__": (), "_class_name": name})
            for name in PIL_CLASSES}
