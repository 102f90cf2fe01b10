"""Fan-out over hosts: one place that runs a function per host in parallel, with deadlines and typed outcomes."""

from __future__ import annotations

import threading
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
    timed_out: bool = False     # still running at the deadline (error: "no answer within ...")
    cancelled: bool = False     # still running when ``stop`` said so (error: CANCELLED)


CANCELLED = "cancelled: the run was interrupted"


def fan_out(items, fn: Callable, *, deadline_s: float, max_workers: int = 32,
            stop: Callable[[], bool] | None = None, stop_grace_s: float = 3.0) -> list:
    """Run ``fn(item)`` for every item in parallel; one Outcome per item, in the items' order.

    An exception becomes a failed Outcome with its message; an item still running when the deadline passes
    becomes a failed Outcome saying so. Workers are daemon threads: an item that outlives its deadline, or a
    SIGINT/SIGTERM in the calling thread (which propagates at once), never keeps the driver from exiting.

    ``stop`` is polled twice a second (for a signal held while cleanup runs): once it is true, items still
    running get ``stop_grace_s`` more, then become failed Outcomes whose error is ``CANCELLED``.
    """
    items = list(items)
    if not items:
        return []
    t0 = time.monotonic()
    slots = threading.BoundedSemaphore(max(1, min(max_workers, len(items))))
    results: dict = {}
    done = threading.Condition()
    expired = threading.Event()     # past the deadline: items still queued do not start
    fatal: list = []                # a KeyboardInterrupt-like exception from an item: re-raised here

    def work(i, item):
        with slots:
            if expired.is_set():
                return
            started = time.monotonic()
            try:
                out = Outcome(item, True, fn(item), "", time.monotonic() - started)
            except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
                out = Outcome(item, False, None, str(exc) or type(exc).__name__, time.monotonic() - started, exc)
            except BaseException as exc:  # noqa: BLE001 - an interrupt: the caller re-raises it
                fatal.append(exc)
                out = Outcome(item, False, None, type(exc).__name__, time.monotonic() - started, exc)
        with done:
            results[i] = out
            done.notify_all()

    for i, item in enumerate(items):
        threading.Thread(target=work, args=(i, item), daemon=True, name=f"fanout-{i}").start()
    cancel_at = None
    try:
        with done:
            while len(results) < len(items) and not fatal:
                if cancel_at is None and stop is not None and stop():
                    cancel_at = time.monotonic() + stop_grace_s
                left = deadline_s - (time.monotonic() - t0)
                if cancel_at is not None:
                    left = min(left, cancel_at - time.monotonic())
                if left <= 0:
                    break
                done.wait(min(left, 0.5))       # short waits: a signal handler in this thread runs promptly
            snapshot = dict(results)
    finally:
        expired.set()
    if fatal:
        raise fatal[0]
    cancelled = cancel_at is not None
    if cancelled:
        missing, took = CANCELLED, time.monotonic() - t0
    else:
        missing, took = f"no answer within {deadline_s:g} s", deadline_s
    return [snapshot.get(i) or Outcome(item, False, None, missing, took, timed_out=not cancelled, cancelled=cancelled)
            for i, item in enumerate(items)]
