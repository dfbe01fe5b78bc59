"""Redaction's cost on what a compaction screens: 2,000 ordinary messages, the same with
every tenth holding a realistic secret (tests/harness/secret_forms.py), and 100 KB of prose.

    python bench/redact.py [--reps 30]

Prints the median of `--reps` runs of each, in milliseconds. To compare with an older
release, run this file with that release's checkout first on `sys.path`
(`PYTHONPATH=/path/to/old python bench/redact.py`).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: see above

from agent.redact import redact, redact_each  # noqa: E402


def secret_texts() -> list[str]:
    """The forms of this checkout's test table (an older release may not have it)."""
    spec = importlib.util.spec_from_file_location("secret_forms",
                                                  ROOT / "tests/harness/secret_forms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["secret_forms"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return [form.text for form in module.FORMS]


def median_ms(work: Callable[[], object], reps: int) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main(reps: int) -> None:
    plain = [f"message {i}: we talked about the deploy on friday, the password policy and "
             f"token budgets; see https://example.com/notes/{i}" for i in range(2000)]
    forms = secret_texts()
    mixed = [forms[i % len(forms)] if i % 10 == 0 else plain[i] for i in range(2000)]
    prose = ("The user asked how to rotate keys; the answer: use the console, then update "
             "the config. " * 1200)[:100_000]
    print(f"2,000 ordinary messages: {median_ms(lambda: redact_each(plain), reps):.2f} ms")
    print(f"2,000 messages, every tenth with a secret: "
          f"{median_ms(lambda: redact_each(mixed), reps):.2f} ms")
    print(f"100 KB of prose: {median_ms(lambda: redact(prose), reps):.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    main(parser.parse_args().reps)
