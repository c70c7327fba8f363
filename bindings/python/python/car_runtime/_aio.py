"""asyncio support: awaiting coroutine tools and running the long calls in a
worker thread so that they never block the event loop.

A tool function may be ``async def`` (or return any awaitable). Where it is
awaited:

* under an ``*_async`` call, on the caller's event loop (the call runs in a
  worker thread and the loop stays free, so the coroutine is handed to it);
* under a synchronous call from plain code, with ``asyncio.run``;
* under a synchronous call made from inside a coroutine (that loop is blocked
  in the call and cannot run anything), on a private loop in a thread of its
  own.
"""

import asyncio
import contextvars
import functools
import inspect
import threading
from typing import Any, Callable, Optional, TypeVar

T = TypeVar("T")

_local = threading.local()


def caller_loop() -> Optional[asyncio.AbstractEventLoop]:
    """The event loop an ``*_async`` call was awaited on, in its worker thread."""
    return getattr(_local, "loop", None)


async def _await(a: Any) -> Any:
    return await a


def _private_loop(a: Any) -> Any:
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(_await(a))
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    t = threading.Thread(target=target, name="car-runtime-async-tool", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def resolve(value: Any, loop: Optional[asyncio.AbstractEventLoop]) -> Any:
    """The result of a tool's answer: itself, or what it awaits to."""
    if not inspect.isawaitable(value):
        return value
    try:
        running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if loop is not None and loop is not running and loop.is_running():
        return asyncio.run_coroutine_threadsafe(_await(value), loop).result()
    if running is None:
        return asyncio.run(_await(value))
    return _private_loop(value)


async def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Runs a blocking call in the loop's default executor with the caller's
    context variables; coroutine tools it calls run on this loop."""
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()

    def call() -> T:
        _local.loop = loop
        try:
            return ctx.run(functools.partial(fn, *args, **kwargs))
        finally:
            _local.loop = None

    return await loop.run_in_executor(None, call)
