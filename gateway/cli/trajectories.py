"""`threadline trajectories compress IN.jsonl OUT.jsonl`: training trajectories made to fit
`trajectories.target_max_tokens`, summarized by the `auxiliary.compression` model (the
main model when `auto`). A progress bar on a terminal; a short report at the end."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from agent.compression.trajectory import TrajectorySettings
from agent.compression.trajectory_batch import compress_file, metrics_paths
from agent.providers.factory import build_provider
from gateway.config import Config

SHOWN_PROBLEMS = 20


def settings_of(config: Config) -> TrajectorySettings:
    t = config.trajectories
    return TrajectorySettings(target_max_tokens=t.target_max_tokens,
                              summary_target_tokens=t.summary_target_tokens,
                              max_concurrent_requests=t.max_concurrent_requests,
                              per_entry_timeout_s=t.per_entry_timeout_s)


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def _readable(path: Path) -> bool:
    return path.is_file()


async def main(args: argparse.Namespace, config: Config) -> int:
    from gateway.wiring import main_settings, summary_settings

    source, target = Path(args.input), Path(args.output)
    total = count_lines(source) if _readable(source) else None
    if total is None:
        print(f"threadline: cannot read {source}", file=sys.stderr)
        return 1
    provider = build_provider(summary_settings(config) or main_settings(config))
    bar = tqdm(total=total, unit="entry", desc="trajectories",
               disable=not sys.stderr.isatty(), file=sys.stderr)
    try:
        report = await compress_file(source, target, provider, settings_of(config),
                                     bar.update)
    finally:
        bar.close()
        await provider.aclose()
    totals = report.final()
    print(f"{totals['entries']} entries: {totals['compressed']} compressed, "
          f"{totals['under_target']} already under target, {totals['failed']} failed "
          f"(written unchanged), {totals['malformed']} malformed (copied through), "
          f"{totals['still_over_limit']} still over the limit; tokens "
          f"{totals['tokens_before']:,} -> {totals['tokens_after']:,}")
    for problem in report.problems[:SHOWN_PROBLEMS]:
        print(f"  {problem}")
    if len(report.problems) > SHOWN_PROBLEMS:
        print(f"  ... and {len(report.problems) - SHOWN_PROBLEMS} more")
    lines, totals_path = metrics_paths(target)
    print(f"metrics: {lines} and {totals_path}")
    return 0
