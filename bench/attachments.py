"""What attachments cost: reading a file once when it arrives, and showing pictures to the
model on every request (cold: read and encoded from disk; warm: from the in-memory cache).

Prints medians (ms) and the warm/cold ratio. Run: .venv/bin/python bench/attachments.py
"""

from __future__ import annotations

import io
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.attachments.files import AttachmentFiles  # noqa: E402
from agent.attachments.parts import attachment_part, build_content  # noqa: E402
from agent.attachments.present import for_model  # noqa: E402
from agent.attachments.read import model_image, read_text  # noqa: E402
from tests.harness.media import pdf  # noqa: E402

RUNS = 15


def median_ms(work: Callable[[], object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def photo(width: int, height: int, seed: int = 0) -> bytes:
    image = Image.effect_noise((width, height), 40 + seed).convert("RGB")
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def main() -> None:
    text = ("\n".join(f"line {i:07d} of a long server log" for i in range(70_000))).encode()
    paper = pdf(*[f"Page {n}. " + "Revenue grew again this quarter. " * 40 for n in range(50)])
    big = photo(4000, 3000)
    print(f"read a {len(text) / 1e6:.1f} MB text, clipped to 100,000 chars: "
          f"{median_ms(lambda: read_text(text, 'server.log', 'text/plain', 100_000)):.1f} ms")
    print(f"read a 50-page PDF ({len(paper) // 1024} KB): "
          f"{median_ms(lambda: read_text(paper, 'r.pdf', 'application/pdf', 100_000)):.1f} ms")
    print(f"fit a 4000x3000 photo ({len(big) // 1024} KB) for a vision API: "
          f"{median_ms(lambda: model_image(big), 5):.1f} ms")
    with tempfile.TemporaryDirectory() as tmp:
        pictures = [photo(1280, 960, i) for i in range(40)]
        store = AttachmentFiles(Path(tmp))
        messages = []
        for i, data in enumerate(pictures):
            ref = store.save("telegram:1", data, "jpeg")
            part = attachment_part("image", file=ref, name=f"p{i}.jpg", mime="image/jpeg",
                                   size=len(data))
            messages.append({"role": "user", "content": build_content(f"picture {i}", [part])})
            messages.append({"role": "assistant", "content": f"seen {i}"})
        total = sum(len(p) for p in pictures) / 1e6
        cold = median_ms(lambda: for_model(messages, AttachmentFiles(Path(tmp)), vision=True),
                         5)
        warm = median_ms(lambda: for_model(messages, store, vision=True))
        print(f"40 pictures ({total:.1f} MB) into one request: cold {cold:.1f} ms, "
              f"warm {warm:.2f} ms (warm/cold {warm / cold:.3f})")


if __name__ == "__main__":
    main()
