"""Pictures as vision APIs take them: JPEG, PNG, GIF or WebP, long edge ≤ 1,568 px,
≤ 3.75 MB. A picture already within those limits and upright is kept byte for byte;
any other is turned upright, scaled down and re-encoded (docs/architecture.md, "Attachments")."""

from __future__ import annotations

import io
from dataclasses import dataclass

import filetype
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError

from agent.attachments.text import Unreadable

MAX_EDGE = 1568  # Anthropic's advice: larger pictures are scaled down on their side anyway
MAX_BYTES = 3_932_160  # 3.75 MiB, which is 5 MiB once base64-encoded (Anthropic's cap)
JPEG_QUALITY = 85
# Pillow's format names of the files we pass on as they are. MPO is how Pillow names the
# JPEGs many phones write (a JPEG with a second image appended): a JPEG to every reader.
_KEPT = {"JPEG": "image/jpeg", "MPO": "image/jpeg", "PNG": "image/png", "GIF": "image/gif",
         "WEBP": "image/webp"}


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
    image = Image.open(io.BytesIO(data))
    # Pillow raises past twice MAX_IMAGE_PIXELS but only warns above it: refuse both.
    if image.width * image.height > (Image.MAX_IMAGE_PIXELS or image.width * image.height):
        raise Unreadable("the picture has too many pixels to open")
    upright = image.getexif().get(ExifTags.Base.Orientation, 1) == 1
    if image.format in _KEPT and upright and max(image.size) <= MAX_EDGE \
            and len(data) <= MAX_BYTES:
        image.load()  # a damaged file is refused here, not by the provider
        return ModelImage(data, _KEPT[image.format], image.width, image.height)
    return _reencoded(image)


def _reencoded(image: Image.Image) -> ModelImage:
    """The first frame, upright, scaled to MAX_EDGE and encoded within MAX_BYTES: PNG when
    some of it is transparent, else JPEG."""
    image = ImageOps.exif_transpose(image)  # decodes the first frame
    if image.mode not in ("RGB", "RGBA", "L"):
        alpha = image.mode in ("LA", "La", "PA", "RGBa") or "transparency" in image.info
        image = image.convert("RGBA" if alpha else "RGB")
    image.thumbnail((MAX_EDGE, MAX_EDGE), Image.Resampling.LANCZOS)
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


def _unopened(data: bytes) -> str:
    """Why Pillow could not open a picture: a format it does not read (HEIC without its
    plugin, a RAW file), or a damaged file of one it does."""
    match = filetype.guess(data)
    if match is None or match not in filetype.image_matchers:
        return "the picture is damaged"
    if f".{match.extension}" in Image.registered_extensions():
        return "the picture is damaged"
    return f"it is a picture in {match.extension.upper()} format, which I can't open"
