"""Group messages reach the model labelled with their sender (gateway/turns/speakers.py); the
fake model echoes what it got. These read an echo as the words alone, or name the label."""

from __future__ import annotations

import re

from gateway.turns.speakers import label

_LABEL = re.compile(r"^(echo: )?\[[^\]\n]* · [0-9a-f]{4}\]: ")


def unlabelled(text: str) -> str:
    """`echo: [Alice · 7f3a]: hi` -> `echo: hi` (and a bare labelled text -> `hi`)."""
    return _LABEL.sub(lambda m: m.group(1) or "", text, count=1)


def labelled(platform: str, user_id: object, name: str, text: str) -> str:
    return f"{label(platform, str(user_id), name)}: {text}"
