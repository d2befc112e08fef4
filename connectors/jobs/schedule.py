"""Run an indexing job on a schedule, with APScheduler (no hand-rolled cron parsing).

``every`` is a duration like ``90s``, ``10m``, ``2h``, ``1d``; ``cron`` a 5-field crontab
expression (``*/10 * * * *``). Runs never overlap: a run due while one is active is skipped
(and said so), then the schedule goes on. For cron or Airflow, run one pass per invocation
(``embedtext index ...`` without --every/--cron) instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_every(every: str) -> float:
    """Seconds in a duration like '90s', '10m', '1h30m'.

    >>> parse_every("10m"), parse_every("1h30m"), parse_every("45")
    (600.0, 5400.0, 45.0)
    """
    text = every.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        raise ValueError(f"--every {every!r}: use a duration like 90s, 10m, 2h or 1d")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError("--every must be positive")
    return seconds


def run_on_schedule(job: Callable[[], object], *, every: str | None = None, cron: str | None = None) -> None:
    """Run ``job`` now and then on the schedule, until interrupted (Ctrl-C / SIGTERM)."""
    from apscheduler.schedulers.blocking import BlockingScheduler
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    if (every is None) == (cron is None):
        raise ValueError("give exactly one of --every and --cron")
    trigger = IntervalTrigger(seconds=parse_every(every)) if every else CronTrigger.from_crontab(cron)
    scheduler = BlockingScheduler()
    scheduler.add_job(job, trigger, max_instances=1, coalesce=True, misfire_grace_time=None)
    job()
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass
