"""A small JSON-RPC 2.0 over WebSocket client for the car-server tests and benchmark."""

import asyncio
import itertools
import json

import websockets


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data")


class Client:
    """Requests with futures; server requests answered by `handlers[method]`
    (an async function of params returning a result, or raising ToolError; a
    plain function is called inline and must not raise);
    notifications recorded in `notifications`."""

    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting = {}
        self.handlers = {}
        self.notifications = []
        self.raw = asyncio.Queue()
        self.server_requests = []
        self.closed = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, url, **kw):
        ws = await websockets.connect(url, max_size=None, **kw)
        return cls(ws)

    async def _read(self):
        try:
            async for text in self.ws:
                msg = json.loads(text)
                if isinstance(msg, list):
                    await self.raw.put(msg)
                    continue
                if "method" in msg and "id" in msg:
                    self.server_requests.append(msg)
                    handler = self.handlers.get(msg["method"])
                    if handler is not None and not asyncio.iscoroutinefunction(handler):
                        # A plain function answers inline, without a task.
                        await self.ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": handler(msg["params"])}))
                    else:
                        asyncio.create_task(self._serve(msg))
                elif "method" in msg:
                    self.notifications.append(msg)
                elif msg.get("id") in self.waiting:
                    fut = self.waiting.pop(msg["id"])
                    if not fut.done():
                        fut.set_result(msg)
                else:
                    await self.raw.put(msg)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    async def _serve(self, msg):
        handler = self.handlers.get(msg["method"])
        if handler is None:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no handler"}}
        else:
            try:
                result = await handler(msg["params"])
                reply = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
            except ToolError as e:
                err = {"code": -32000, "message": str(e)}
                if e.terminal:
                    err["data"] = {"terminal": True}
                if e.model_retry:
                    err.setdefault("data", {})["model_retry"] = True
                reply = {"jsonrpc": "2.0", "id": msg["id"], "error": err}
            except asyncio.CancelledError:
                return
        try:
            await self.ws.send(json.dumps(reply))
        except websockets.ConnectionClosed:
            pass

    async def request(self, method, params=None, timeout=20):
        """The whole response frame."""
        rid = next(self.ids)
        fut = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        frame = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            frame["params"] = params
        await self.ws.send(json.dumps(frame))
        return await asyncio.wait_for(fut, timeout)

    async def call(self, method, params=None, timeout=20):
        """The result, or raises RpcError."""
        resp = await self.request(method, params, timeout)
        if "error" in resp:
            raise RpcError(resp["error"])
        return resp["result"]

    async def send_raw(self, data):
        await self.ws.send(data)

    async def next_raw(self, timeout=5):
        return await asyncio.wait_for(self.raw.get(), timeout)

    async def close(self):
        await self.ws.close()
        await self.reader


class ToolError(Exception):
    def __init__(self, message, terminal=False, model_retry=False):
        super().__init__(message)
        self.terminal = terminal
        self.model_retry = model_retry
