"""Fan-out over hosts: one place that runs a function per host in parallel, with deadlines and typed outcomes."""

from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Outcome:
    key: Any            # what the function ran for (a host, a node)
    ok: bool
    value: Any = None
    error: str = ""
    duration_s: float = 0.0
    exc: BaseException | None = None


def fan_out(items, fn: Callable, *, deadline_s: float, max_workers: int = 32) -> list:
    """Run ``fn(item)`` for every item in parallel; one Outcome per item, in the items' order.

    An exception becomes a failed Outcome with its message; an item still running when the deadline passes
    becomes a failed Outcome saying so (its thread is left to finish on its own).
    """
    items = list(items)
    if not items:
        return []
    pool = cf.ThreadPoolExecutor(max_workers=min(max_workers, len(items)), thread_name_prefix="fanout")
    t0 = time.monotonic()
    started = {}

    def timed(item):
        started[id(item)] = time.monotonic()
        return fn(item)

    futures = [pool.submit(timed, item) for item in items]
    outcomes = []
    try:
        for item, fut in zip(items, futures):
            remaining = max(0.0, deadline_s - (time.monotonic() - t0))
            try:
                value = fut.result(timeout=remaining)
                outcomes.append(Outcome(item, True, value, "", time.monotonic() - started.get(id(item), t0)))
            except cf.TimeoutError:
                outcomes.append(Outcome(item, False, None, f"no answer within {deadline_s:g} s", deadline_s))
            except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
                outcomes.append(Outcome(item, False, None, str(exc) or type(exc).__name__,
                                        time.monotonic() - started.get(id(item), t0), exc))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return outcomes
