"""Pictures as vision APIs take them: JPEG, PNG, GIF or WebP, long edge ≤ 1,568 px,
≤ 3.75 MB. A picture already within those limits and upright is kept byte for byte;
any other is scaled down, turned upright and re-encoded (docs/architecture.md,
"Attachments").

The work is bounded by what comes out, not by what was sent: a JPEG is decoded at the
smallest of 1/2, 1/4 or 1/8 scale that is still large enough (libjpeg scales as it
decodes); any other picture, and a progressive JPEG, is refused before decoding when it
holds more than MAX_PIXELS; and the one decoded picture is converted and scaled a band
of rows at a time, so no second full-size copy is made. Only an animation's first frame
is read.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import filetype
from PIL import ExifTags, Image, UnidentifiedImageError

from agent.attachments.text import Unreadable

MAX_EDGE = 1568  # Anthropic's advice: larger pictures are scaled down on their side anyway
MAX_BYTES = 3_932_160  # 3.75 MiB, which is 5 MiB once base64-encoded (Anthropic's cap)
JPEG_QUALITY = 85
# Pixels decoded at full size, at most. Pillow keeps a pixel in up to 4 bytes, so this is
# 160 MB for the one decode: an 8K screenshot (33 MP) or a 6000×6000 scan fits; the
# 9400×9400 PNG that took 1.2 GB to read does not. Photos are JPEGs and decode scaled
# (unless progressive: libjpeg then keeps 2 to 8 bytes of coefficients a pixel).
MAX_PIXELS = 40_000_000
BAND_ROWS = 64  # output rows made at a time when scaling down
# Pillow's format names of the files we pass on as they are. MPO is how Pillow names the
# JPEGs many phones write (a JPEG with a second image appended): a JPEG to every reader.
_KEPT = {"JPEG": "image/jpeg", "MPO": "image/jpeg", "PNG": "image/png", "GIF": "image/gif",
         "WEBP": "image/webp"}
# How to turn each EXIF orientation upright (the same table as ImageOps.exif_transpose).
_UPRIGHT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
            4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
            6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
            8: Image.Transpose.ROTATE_90}


@dataclass(frozen=True)
class ModelImage:
    data: bytes  # JPEG, PNG, GIF or WebP within the limits above
    mime: str
    width: int
    height: int


def model_image(data: bytes) -> ModelImage:
    """The picture in `data` as a vision API takes it; Unreadable when it cannot be decoded."""
    try:
        return _model_image(data)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise Unreadable("the picture has too many pixels to open") from exc
    except UnidentifiedImageError as exc:
        raise Unreadable(_unopened(data)) from exc
    except Unreadable:
        raise
    except Exception as exc:  # Pillow's decoders raise many kinds of error on a broken file
        raise Unreadable("the picture is damaged") from exc


def _model_image(data: bytes) -> ModelImage:
    image = Image.open(io.BytesIO(data))  # the header only: pixels are decoded when needed
    width, height = image.size
    # Pillow raises past twice MAX_IMAGE_PIXELS but only warns above it: refuse both.
    if width * height > (Image.MAX_IMAGE_PIXELS or width * height):
        raise Unreadable("the picture has too many pixels to open")
    size = fitted(width, height)
    box: tuple[float, float, float, float] = (0, 0, width, height)
    if size is not None:
        drafted = image.draft(None, size)  # JPEG only; other formats ignore it
        if drafted is not None:
            box = drafted[1]  # the whole picture, in the smaller decode's pixels
    # A progressive JPEG decodes scaled too, but libjpeg first holds all its coefficients.
    held = width * height if image.info.get("progressive") else image.width * image.height
    if held > MAX_PIXELS:
        raise Unreadable(f"the picture is too large to open ({width}×{height} pixels)")
    # After the size checks: a PNG may keep its EXIF after the pixels, so reading it decodes.
    orientation = image.getexif().get(ExifTags.Base.Orientation, 1)
    if image.format in _KEPT and size is None and orientation == 1 and len(data) <= MAX_BYTES:
        image.load()  # a damaged file is refused here, not by the provider
        return ModelImage(data, _KEPT[image.format], width, height)
    return _reencoded(image, size, box, orientation)


def fitted(width: int, height: int) -> tuple[int, int] | None:
    """The size within MAX_EDGE × MAX_EDGE with the same proportions; None when it fits."""
    if max(width, height) <= MAX_EDGE:
        return None
    if width >= height:
        return MAX_EDGE, max(1, round(height * MAX_EDGE / width))
    return max(1, round(width * MAX_EDGE / height)), MAX_EDGE


def _reencoded(image: Image.Image, size: tuple[int, int] | None,
               box: tuple[float, float, float, float], orientation: int) -> ModelImage:
    """The first frame, scaled to `size`, upright, and encoded within MAX_BYTES: PNG when
    some of it is transparent, else JPEG."""
    alpha = image.mode in ("LA", "La", "PA", "RGBa") or "transparency" in image.info
    mode = image.mode if image.mode in ("RGB", "RGBA", "L") else "RGBA" if alpha else "RGB"
    if size is not None:
        image = scaled(image, size, box, mode)
    elif image.mode != mode:
        image = image.convert(mode)  # within MAX_EDGE: a copy of at most 2.5 megapixels
    if orientation in _UPRIGHT:  # turned after scaling: the turn copies the small picture
        image = image.transpose(_UPRIGHT[orientation])
    transparent = image.mode == "RGBA" and image.getchannel("A").getextrema()[0] < 255
    if image.mode == "RGBA" and not transparent:
        image = image.convert("RGB")
    kind, quality = ("PNG" if transparent else "JPEG"), JPEG_QUALITY
    while True:
        out = io.BytesIO()
        image.save(out, kind, **({"quality": quality} if kind == "JPEG" else {}))
        if out.tell() <= MAX_BYTES:
            return ModelImage(out.getvalue(), _KEPT[kind], image.width, image.height)
        if kind == "JPEG" and quality > 55:
            quality -= 15
        else:
            image = image.resize((max(1, image.width * 3 // 4), max(1, image.height * 3 // 4)),
                                 Image.Resampling.LANCZOS)


def scaled(image: Image.Image, size: tuple[int, int], box: tuple[float, float, float, float],
           mode: str) -> Image.Image:
    """The `box` of `image` in `mode`, scaled down to `size` as Image.thumbnail scales (a box
    reduce that leaves at least twice the size, then Lanczos), BAND_ROWS output rows at a
    time. Each band is cut from the decoded picture with the rows the filter reaches on
    either side, so the bands meet seamlessly, and only a band is ever converted."""
    left, top, right, bottom = box
    step_x = max(1, int((right - left) / size[0] / 2))
    step_y = max(1, int((bottom - top) / size[1] / 2))
    rows = math.ceil(image.height / step_y)  # rows once reduced
    scale = (bottom - top) / step_y / size[1]  # reduced rows per output row
    reach = math.ceil(3 * max(scale, 1.0)) + 1  # Lanczos reads three output rows each side
    work = "RGBa" if mode == "RGBA" else mode  # alpha premultiplied once, as resize does
    out = Image.new(work, size)
    for first in range(0, size[1], BAND_ROWS):
        last = min(size[1], first + BAND_ROWS)
        upper, lower = top / step_y + first * scale, top / step_y + last * scale
        start = max(0, math.floor(upper) - reach)
        stop = min(rows, math.ceil(lower) + reach)
        band = image.crop((0, start * step_y, image.width, min(image.height, stop * step_y)))
        band = band if band.mode == mode else band.convert(mode)
        band = band if work == mode else band.convert(work)
        if step_x > 1 or step_y > 1:
            band = band.reduce((step_x, step_y))
        out.paste(band.resize((size[0], last - first), Image.Resampling.LANCZOS,
                              box=(left / step_x, upper - start, right / step_x,
                                   lower - start)), (0, first))
    return out if work == mode else out.convert(mode)


def _unopened(data: bytes) -> str:
    """Why Pillow could not open a picture: a format it does not read (HEIC without its
    plugin, a RAW file), or a damaged file of one it does."""
    match = filetype.guess(data)
    if match is None or match not in filetype.image_matchers:
        return "the picture is damaged"
    if f".{match.extension}" in Image.registered_extensions():
        return "the picture is damaged"
    return f"it is a picture in {match.extension.upper()} format, which I can't open"
