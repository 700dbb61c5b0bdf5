"""Waits that a stop (Ctrl-C, SIGTERM: the event ``run_sandbox`` is given) cuts short: raising
``Stopped`` rather than waiting a start-up budget out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class Stopped(Exception):
    """``stop`` was set (Ctrl-C, SIGTERM) while waiting."""



async def until(stop: asyncio.Event, awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` unless ``stop`` is set first (then raise Stopped)."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Stopped()
    return task.result()


async def poll(stop: asyncio.Event, predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await until(stop, asyncio.sleep(interval))
    return None
