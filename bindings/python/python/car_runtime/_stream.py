"""Detached (streaming / long-running) Python tools.

An action with ``invocation_mode`` ``"streaming"`` or ``"long_running"``
calls its tool function once (the call JSON carries ``"detached": true``)
and the action succeeds at once with ``{tool_handle, status: "running"}``.
What the function returns is then read on a thread of its own:

* a generator or any iterator: each item is a chunk, and a generator's
  ``return value`` is the result of the final ``done`` chunk;
* an async generator or async iterator: each item is a chunk (on the
  caller's event loop under an ``*_async`` call, else on a loop of its own);
* anything else: the whole result (one ``done`` chunk).

An item is a chunk dict (``{"kind": "text", "text": ...}``, ``data``,
``progress``, ``done``, ``error``), a string (a ``text`` chunk) or any other
JSON value (a ``data`` chunk). An exception ends the stream with an
``error`` chunk naming it. ``tool_cancel(handle)`` closes the generator at
its next ``yield`` (``GeneratorExit`` inside it, so ``finally`` blocks run)
and the handle reads ``cancelled``.
"""

import asyncio
from typing import Any, Callable, Dict, Optional

from ._aio import resolve

TERMINAL = ("done", "error")


def _chunk(item: Any) -> Dict[str, Any]:
    if isinstance(item, dict) and isinstance(item.get("kind"), str):
        return item
    if isinstance(item, str):
        return {"kind": "text", "text": item}
    return {"kind": "data", "data": item}


def _take(item: Any, push: Callable[[Dict[str, Any]], bool]) -> bool:
    """Hands one item on as a chunk; whether the stream goes on."""
    chunk = _chunk(item)
    return push(chunk) and chunk["kind"] not in TERMINAL


def _failure(e: BaseException) -> Dict[str, Any]:
    return {"kind": "error", "message": f"{type(e).__name__}: {e}"}


def _is_stream(value: Any) -> bool:
    if isinstance(value, (str, bytes, bytearray, dict, list, tuple)) or value is None:
        return False
    return hasattr(value, "__next__") or hasattr(value, "__anext__")


def _sync(it: Any, push: Callable[[Dict[str, Any]], bool], cancelled: Callable[[], bool]) -> None:
    try:
        while True:
            if cancelled():
                return
            try:
                item = next(it)
            except StopIteration as stop:
                done: Dict[str, Any] = {"kind": "done"}
                if stop.value is not None:
                    done["result"] = stop.value
                push(done)
                return
            except Exception as e:
                push(_failure(e))
                return
            if not _take(item, push):
                return
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


async def _async(it: Any, push: Callable[[Dict[str, Any]], bool], cancelled: Callable[[], bool]) -> None:
    try:
        while True:
            if cancelled():
                return
            try:
                item = await it.__anext__()
            except StopAsyncIteration:
                push({"kind": "done"})
                return
            except Exception as e:
                push(_failure(e))
                return
            if not _take(item, push):
                return
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            await aclose()


def run_stream(
    value: Any,
    loop: Optional[asyncio.AbstractEventLoop],
    push: Callable[[Dict[str, Any]], bool],
    cancelled: Callable[[], bool],
) -> None:
    """Reads what a detached tool returned, handing each chunk to ``push``
    (False: nobody reads any more) until a terminal chunk, the end, or
    ``cancelled()``."""
    try:
        value = resolve(value, loop)
    except Exception as e:
        push(_failure(e))
        return
    if not _is_stream(value):
        push({"kind": "done", "result": value} if value is not None else {"kind": "done"})
        return
    if hasattr(value, "__anext__"):
        coro = _async(value, push, cancelled)
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(coro, loop).result()
        else:
            asyncio.run(coro)
        return
    _sync(value, push, cancelled)

