"""Content generators for sbs_transcript.py: vocabulary, prose, code, logs, tool calls
and their results. Pure standard library and deterministic: every random stream comes from a
``random.Random`` passed in (split out of the workplace's transcript.py; output unchanged)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

# --------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------

WORDS = (
    "the a to of and in is for that it with on as this be by are from at or "
    "an not we can will if all which has have but when you they more was one "
    "config value request response session cache token model context window "
    "summary message handler server client query index table column record "
    "update delete insert select migrate deploy build test suite fixture "
    "module function class method return error warning timeout retry backoff "
    "thread lock queue worker task job schedule event stream buffer parse "
    "encode decode serialize payload header status code line file path "
    "directory branch commit merge rebase diff patch review release version "
    "dependency package install upgrade pin lockfile wheel import export "
    "compress prune truncate estimate threshold budget ratio tail head "
    "boundary align group pair orphan sanitize redact secret credential "
    "user assistant tool system prompt instruction reply answer question "
    "because however therefore instead while after before during until "
    "should must could would might probably clearly roughly exactly "
    "performance latency throughput memory allocation leak profile benchmark"
).split()

IDENTS = (
    "user account order invoice payment session token cache store repo "
    "client server worker queue event config parser reader writer loader "
    "handler router service manager builder factory registry adapter "
    "compressor estimator budget window summary message transcript"
).split()

DIRS = ["src", "src/app", "src/app/models", "src/app/api", "src/core", "lib",
         "agent", "gateway", "tools", "tests", "tests/unit", "tests/integration",
         "scripts", "docs", "config", "web/src/components", "web/src/pages"]
EXTS = [".py", ".py", ".py", ".ts", ".tsx", ".md", ".yaml", ".json", ".toml", ".sh"]

COMMANDS = [
    "git status", "git diff --stat", "git log --oneline -n 20", "ls -la",
    "pytest -q", "pytest tests/unit -x -q", "python -m pip list",
    "npm test", "npm run build", "ruff check .", "mypy src", "make lint",
    "docker ps", "cat pyproject.toml", "grep -rn TODO src | head -50",
    "du -sh .", "python scripts/migrate.py --dry-run", "uv sync",
    "cargo build --release", "go test ./...", "df -h", "ps aux | head -30",
]

URLS = [
    "https://docs.python.org/3/library/sqlite3.html",
    "https://peps.python.org/pep-0008/",
    "https://example.com/blog/context-windows",
    "https://example.org/guide/async-patterns",
    "https://developer.example.net/api/reference/messages",
    "https://news.example.com/2026/01/release-notes",
]

# Tool mix: (name, weight, result median chars, result sigma)
TOOL_MIX = [
    ("terminal", 26, 1800, 1.2),
    ("read_file", 22, 4500, 1.0),
    ("search_files", 10, 1500, 0.9),
    ("patch", 8, 400, 0.6),
    ("write_file", 5, 90, 0.3),
    ("web_search", 5, 2500, 0.5),
    ("web_extract", 4, 9000, 0.8),
    ("browser_snapshot", 3, 6000, 0.7),
    ("execute_code", 6, 900, 1.0),
    ("todo", 4, 300, 0.4),
    ("memory", 2, 150, 0.3),
    ("delegate_task", 2, 2500, 0.6),
    ("mcp_github_list_issues", 3, 1200, 1.0),
]
TOOL_NAMES = [t[0] for t in TOOL_MIX]
TOOL_WEIGHTS = [t[1] for t in TOOL_MIX]
TOOL_RESULT = {t[0]: (t[2], t[3]) for t in TOOL_MIX}

MIN_SCALED = 12


# --------------------------------------------------------------------------
# Small deterministic text helpers
# --------------------------------------------------------------------------

def lognormal(rng: random.Random, median: float, sigma: float,
               lo: float, hi: float) -> float:
    return max(lo, min(hi, math.exp(math.log(median) + sigma * rng.gauss(0.0, 1.0))))


def prose(rng: random.Random, n: int) -> str:
    """About ``n`` characters of sentence-like text (exactly n when n > 0)."""
    if n <= 0:
        return ""
    out: list[str] = []
    size = 0
    sentence_len = 0
    words = WORDS
    while size < n:
        w = words[rng.randrange(len(words))]
        if sentence_len == 0:
            w = w.capitalize()
        sentence_len += 1
        if sentence_len >= 8 and rng.random() < 0.18:
            w += "."
            sentence_len = 0
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def ident(rng: random.Random) -> str:
    return f"{IDENTS[rng.randrange(len(IDENTS))]}_{IDENTS[rng.randrange(len(IDENTS))]}"


def code_lines(rng: random.Random, n: int, numbered: bool = False) -> str:
    """About ``n`` characters of Python-looking source, optionally ``N|`` numbered."""
    lines: list[str] = []
    size = 0
    lineno = 1
    indent = 0
    while size < n:
        r = rng.random()
        if r < 0.08:
            text = f"def {ident(rng)}(self, {ident(rng)}: int = {rng.randrange(100)}) -> dict:"
            indent = 4
        elif r < 0.12:
            text = f"class {ident(rng).title().replace('_', '')}:"
            indent = 4
        elif r < 0.20:
            text = " " * indent + f"# {prose(rng, rng.randrange(20, 70))}"
        elif r < 0.26:
            text = ""
        elif r < 0.34:
            text = " " * indent + f"if {ident(rng)} is None:"
        elif r < 0.40:
            text = " " * (indent + 4) + f"raise ValueError(\"{prose(rng, rng.randrange(15, 40))}\")"
        else:
            text = " " * indent + (
                f"{ident(rng)} = {ident(rng)}.{ident(rng)}({ident(rng)}, "
                f"timeout={rng.randrange(1, 120)})"
            )
        if numbered:
            text = f"{lineno:6d}|{text}"
        lines.append(text)
        size += len(text) + 1
        lineno += 1
    return "\n".join(lines)[:n]


def log_lines(rng: random.Random, n: int) -> str:
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")
    lines: list[str] = []
    size = 0
    sec = rng.randrange(0, 3600)
    while size < n:
        sec += rng.randrange(0, 4)
        lvl = levels[rng.randrange(len(levels))]
        text = (f"2026-01-{1 + sec // 86400 % 28:02d} {sec // 3600 % 24:02d}:"
                f"{sec // 60 % 60:02d}:{sec % 60:02d} {lvl} {ident(rng)}: "
                f"{prose(rng, rng.randrange(25, 110))}")
        lines.append(text)
        size += len(text) + 1
    return "\n".join(lines)[:n]


def fake_secret(rng: random.Random, prefix: str, n: int = 36) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return prefix + "".join(alphabet[rng.randrange(len(alphabet))] for _ in range(n))


def rand_path(rng: random.Random) -> str:
    d = DIRS[rng.randrange(len(DIRS))]
    return f"{d}/{ident(rng)}{EXTS[rng.randrange(len(EXTS))]}"


# --------------------------------------------------------------------------
# Skeleton
# --------------------------------------------------------------------------

def new_call(rng: random.Random, path_pool: list[str], reads: dict[str, int],
              commands: dict[str, int], counter: list[int]) -> dict[str, Any]:
    """Skeleton for one tool call (its arguments and the matching result)."""
    name = rng.choices(TOOL_NAMES, weights=TOOL_WEIGHTS, k=1)[0]
    counter[0] += 1
    call: dict[str, Any] = {
        "name": name,
        "num": counter[0],
        "call_id": f"call_{counter[0]:06d}",
        "args_size": 0.0,  # only for content-bearing arguments
        "ref": None,        # index of an earlier call whose result is repeated
    }
    if name == "read_file":
        if reads and rng.random() < 0.15:
            path = sorted(reads)[rng.randrange(len(reads))]
            call["ref"] = reads[path]
        else:
            path = path_pool[rng.randrange(len(path_pool))]
        call["path"] = path
        if call["ref"] is None:
            reads[path] = counter[0]
    elif name == "terminal":
        cmd = COMMANDS[rng.randrange(len(COMMANDS))]
        call["command"] = cmd
        if cmd in commands and cmd.startswith(("git status", "ls", "cat ", "df")) and rng.random() < 0.5:
            call["ref"] = commands[cmd]
        else:
            commands[cmd] = counter[0]
    elif name in ("write_file", "patch"):
        call["path"] = path_pool[rng.randrange(len(path_pool))]
        call["args_size"] = lognormal(rng, 2500 if name == "write_file" else 900, 0.9, 200, 40000)
    elif name == "execute_code":
        call["args_size"] = lognormal(rng, 800, 0.7, 80, 12000)
    elif name == "delegate_task":
        call["args_size"] = lognormal(rng, 350, 0.5, 60, 3000)
    med, sig = TOOL_RESULT[name]
    call["result_size"] = lognormal(rng, med, sig, 20, 150000)
    return call



# --------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------

def render_args(call: dict[str, Any], rng: random.Random) -> str:
    name = call["name"]
    n = int(call.get("args_size") or 0)
    if name == "terminal":
        args: dict[str, Any] = {"command": call["command"], "timeout": 120}
    elif name == "read_file":
        args = {"path": call["path"], "offset": 1, "limit": 400}
    elif name == "write_file":
        args = {"path": call["path"], "content": code_lines(rng, n)}
    elif name == "patch":
        old = code_lines(rng, max(20, n // 2))
        args = {"path": call["path"], "mode": "replace", "old_string": old,
                "new_string": old.replace("timeout=", "timeout_s=")[: max(20, n // 2)]}
    elif name == "search_files":
        args = {"pattern": ident(rng), "path": DIRS[rng.randrange(len(DIRS))],
                "target": "content"}
    elif name == "web_search":
        args = {"query": prose(rng, rng.randrange(20, 70)).lower()}
    elif name == "web_extract":
        args = {"urls": [URLS[rng.randrange(len(URLS))]]}
    elif name == "browser_snapshot":
        args = {"url": URLS[rng.randrange(len(URLS))]}
    elif name == "execute_code":
        args = {"code": code_lines(rng, n)}
    elif name == "todo":
        args = {"todos": [{"id": str(i), "content": prose(rng, 40), "status": "pending"}
                          for i in range(rng.randrange(1, 5))]}
    elif name == "memory":
        args = {"action": "add", "target": "memory", "content": prose(rng, 80)}
    elif name == "delegate_task":
        args = {"goal": prose(rng, n), "toolsets": ["terminal", "file"]}
    else:
        args = {"owner": "example-org", "repo": "example-repo", "state": "open",
                "per_page": 30}
    return json.dumps(args, ensure_ascii=False)


def render_result(call: dict[str, Any], size: int, rng: random.Random) -> str:
    name = call["name"]
    if name == "terminal":
        body = log_lines(rng, max(0, size - 60))
        if rng.random() < 0.02:
            body += f"\nexport DEMO_API_KEY={fake_secret(rng, 'sk-FAKE')}"
        code = 0 if rng.random() < 0.85 else rng.choice([1, 2, 127])
        return json.dumps({"output": body, "exit_code": code, "error": None})
    if name == "read_file":
        body = code_lines(rng, max(0, size - 80), numbered=True)
        return json.dumps({"content": body, "path": call.get("path"),
                           "total_lines": body.count("\n") + 1})
    if name == "search_files":
        matches = []
        used = 40
        while used < size:
            m = {"path": rand_path(rng), "line": rng.randrange(1, 900),
                 "content": code_lines(rng, rng.randrange(30, 120))}
            used += len(json.dumps(m)) + 2
            matches.append(m)
        return json.dumps({"total_count": len(matches), "matches": matches})
    if name == "web_search":
        results = []
        used = 30
        while used < size:
            r = {"title": prose(rng, rng.randrange(20, 60)),
                 "url": URLS[rng.randrange(len(URLS))] + f"#{rng.randrange(999)}",
                 "description": prose(rng, rng.randrange(80, 260))}
            used += len(json.dumps(r)) + 2
            results.append(r)
        return json.dumps({"success": True, "data": {"web": results}})
    if name == "web_extract":
        parts = []
        used = 0
        while used < size:
            chunk = f"## {prose(rng, 30)}\n\n{prose(rng, rng.randrange(200, 900))}\n"
            parts.append(chunk)
            used += len(chunk) + 1
        return "\n".join(parts)[:size]
    if name == "browser_snapshot":
        lines = []
        used = 0
        i = 0
        while used < size:
            i += 1
            role = ("link", "button", "heading", "text", "textbox", "listitem")[rng.randrange(6)]
            t = f"- {role} \"{prose(rng, rng.randrange(8, 60))}\" [ref=e{i}]"
            lines.append(t)
            used += len(t) + 1
        return "\n".join(lines)[:size]
    if name == "execute_code":
        return json.dumps({"status": "success", "output": log_lines(rng, max(0, size - 40)),
                           "duration_seconds": round(rng.random() * 9, 2)})
    if name == "patch":
        diff = "\n".join(
            f"{'+' if rng.random() < 0.5 else '-'}{code_lines(rng, rng.randrange(20, 80))}"
            for _ in range(max(1, size // 70))
        )
        return json.dumps({"success": True, "diff": diff[: max(0, size - 30)]})
    if name == "write_file":
        return json.dumps({"bytes_written": rng.randrange(100, 60000), "path": call.get("path")})
    if name == "todo":
        return json.dumps({"todos": [{"id": str(i), "status": "pending",
                                      "content": prose(rng, 50)}
                                     for i in range(max(1, size // 90))]})
    if name == "memory":
        return json.dumps({"success": True, "message": prose(rng, max(10, size - 40))})
    if name == "delegate_task":
        return json.dumps({"status": "completed",
                           "summary": prose(rng, max(10, size - 60)),
                           "tool_calls": rng.randrange(1, 30)})
    issues = []
    used = 20
    while used < size:
        it = {"number": rng.randrange(1, 99999), "title": prose(rng, rng.randrange(20, 70)),
              "state": "open", "body": prose(rng, rng.randrange(50, 400))}
        used += len(json.dumps(it)) + 2
        issues.append(it)
    return json.dumps({"items": issues})
