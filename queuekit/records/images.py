"""Turning any image file into 3-channel RGB of a fixed size (Pillow only, no TensorFlow).

This module runs inside ``make``'s worker processes, so it must stay cheap to import there.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import warnings
from typing import IO, TYPE_CHECKING

from PIL import Image, ImageOps

if TYPE_CHECKING:
    import numpy as np

IMAGE_EXTENSIONS = frozenset({
    ".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm",
})
# Transparent pixels are composited on white: a fixed, documented choice.
BACKGROUND = (255, 255, 255)
# Pillow's own default (Image.MAX_IMAGE_PIXELS); checked from the header, before decoding.
MAX_PIXELS = 89_478_485


def load_rgb(path: str, size: tuple[int, int], *, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Like :func:`load_rgb_image`, as a uint8 [height, width, 3] array."""
    import numpy as np

    return np.asarray(load_rgb_image(path, size, max_pixels=max_pixels), dtype=np.uint8)


def load_rgb_image(path: str | IO[bytes], size: tuple[int, int], *,
                   max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Read ``path`` (or an open binary file) as uint8 RGB resized to ``size`` = (height, width).

    Handles grayscale, grayscale+alpha, palette (with transparency), RGBA
    (composited on :data:`BACKGROUND`), CMYK, 16-bit and 32-bit integer and
    float images, EXIF orientation, and the first frame of animations.

    Raises:
        ValueError: naming the reason (not an image, truncated, too large...).
    """
    height, width = size
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            source = _regular(path) if isinstance(path, str) else contextlib.nullcontext(path)
            with source as f, Image.open(f) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise ValueError(f"decompression bomb: {w}x{h} pixels is over the limit "
                                     f"of {max_pixels}")
                if im.format == "JPEG":
                    # DCT-domain downscaling: decode at the smallest 1/2^k scale that is
                    # still at least the target size, so quality matches a full decode.
                    side = max(height, width)
                    im.draft("RGB", (side, side))
                im.load()
                rgb = _to_rgb(ImageOps.exif_transpose(im))
                if rgb.size != (width, height):
                    # reducing_gap: a box reduction first, then bicubic; visually the same
                    # as a full bicubic (tested), several times faster on large inputs.
                    rgb = rgb.resize((width, height), Image.Resampling.BICUBIC, reducing_gap=3.0)
                return rgb
        except ValueError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise ValueError(f"decompression bomb: {e}") from e
        except Image.UnidentifiedImageError as e:
            raise ValueError("not an image Pillow can read") from e
        except (OSError, SyntaxError, EOFError) as e:
            raise ValueError(f"unreadable or truncated image: {e}") from e


def _to_rgb(im: Image.Image) -> Image.Image:
    mode = im.mode
    if mode == "RGB":
        return im
    if mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        mode = im.mode
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        base = Image.new("RGBA", rgba.size, BACKGROUND + (255,))
        return Image.alpha_composite(base, rgba).convert("RGB")
    if mode.startswith("I;16") or mode in ("I", "F"):
        import numpy as np  # only here: make's workers start without it (#47)

        a = np.asarray(im).astype(np.float64)
        top = 65535.0 if (mode.startswith("I;16") or a.max(initial=0) > 255) else 255.0
        a = np.clip(a * (255.0 / top), 0, 255).round().astype(np.uint8)
        return Image.fromarray(a, "L").convert("RGB")
    return im.convert("RGB")  # L, 1, CMYK, YCbCr, LAB, HSV


def encode(pixels, encoding: str) -> bytes:
    """The ``img_raw`` bytes of an RGB image or array: raw, JPEG (quality 95) or PNG."""
    im = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels, "RGB")
    if encoding == "raw":
        return im.tobytes()
    buf = io.BytesIO()
    if encoding == "jpeg":
        im.save(buf, "JPEG", quality=95)
    elif encoding == "png":
        im.save(buf, "PNG", compress_level=1)
    else:
        raise ValueError(f"encoding must be raw, jpeg or png, not {encoding!r}")
    return buf.getvalue()


def _regular(path: str) -> IO[bytes]:
    """``path`` opened for reading, if it is a regular file: a FIFO named ``x.jpg`` would
    block the read forever, a device would read without end.

    Raises:
        ValueError: it is not a regular file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO with no writer: no wait
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file (a FIFO, device or socket): not read")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
