"""Waiting on the event loop in tests without a time window (on the tests' path: test folders are not packages)."""

from __future__ import annotations

import asyncio


async def settle() -> None:
    """Let every task that can run, run: what is still waiting then waits on an event or a timer, not on its turn."""
    for _ in range(50):
        await asyncio.sleep(0)
