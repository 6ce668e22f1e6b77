"""Run an ASGI app with uvicorn in a background thread on 127.0.0.1: real sockets, real HTTP, in-process."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


class ThreadedServer:
    """`start()` binds (port 0: a free one), serves, and returns once uvicorn accepts connections."""

    def __init__(self, app: Any, port: int = 0, startup_timeout_s: float = 60.0) -> None:
        self.app, self.requested_port, self.startup_timeout_s = app, port, startup_timeout_s
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ThreadedServer:
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and without it every
        # response written in two parts (headers, body) waits ~40 ms for the client's delayed ACK (Nagle)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.requested_port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=1, backlog=4096)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s  # startup may include loading a model
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start within {self.startup_timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


@contextmanager
def running(app: Any, port: int = 0) -> Iterator[str]:
    """Serve `app` for the duration of the block; yields its base URL (ending in /v1)."""
    server = ThreadedServer(app, port).start()
    try:
        yield server.base_url
    finally:
        server.stop()
