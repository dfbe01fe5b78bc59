"""Generated ShareGPT trajectories: agent transcripts with tool calls and results, some
short, most long enough to need compressing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = ("deploy", "config", "retry", "cache", "token", "buffer", "socket", "parser",
         "schema", "index", "queue", "worker", "shard", "lease", "backoff", "timeout")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def entry(rng: random.Random, index: int, *, turns: int, words: int) -> dict[str, Any]:
    convo = [{"from": "system", "value": "You are a careful coding agent."},
             {"from": "human", "value": f"Task {index}: {_text(rng, 20)}"}]
    while len(convo) < turns:
        convo.append({"from": "gpt", "value": f"<tool_call>{_text(rng, 8)}</tool_call>"})
        for _ in range(rng.choice((1, 1, 2))):  # sometimes two results for one step
            convo.append({"from": "tool", "value": _text(rng, words)})
        if rng.random() < 0.3:
            convo.append({"from": "human", "value": _text(rng, 12)})
    convo.append({"from": "gpt", "value": f"Done with task {index}."})
    return {"id": f"traj-{index}", "source": "generated", "conversations": convo}


def write_entries(path: Path, count: int, *, seed: int = 7, short_every: int = 5,
                  words: int = 400) -> list[dict[str, Any]]:
    """`count` entries; every `short_every`-th one small enough to be left alone."""
    rng = random.Random(seed)
    made = [entry(rng, i, turns=6 if i % short_every == short_every - 1 else rng.randint(30, 60),
                  words=words) for i in range(count)]
    path.write_text("".join(json.dumps(e) + "\n" for e in made), encoding="utf-8")
    return made
