"""The Python clients' chat stream against a server that cuts it short or garbles it (a bare
HTTP server: no vcm behind it, so no Redis either): ``BAD_REPLY``, never a quiet end or a JSON
error. The stream against vcm itself is in test_chat.py."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from vcm.client import AsyncVcmClient, VcmClient
from vcm.errors import VcmError


@pytest.mark.parametrize(
    "body",
    [
        b'event: delta\ndata: {"content": "Hal"}\n\n',  # cut before its done frame
        b"event: delta\ndata: [1, 2]\n\nevent: done\ndata: {}\n\n",  # a frame that is not a JSON object
        b"event: delta\ndata: {not json\n\nevent: done\ndata: {}\n\n",
    ],
)
def test_a_chat_stream_cut_short_or_garbled_is_a_bad_reply(body: bytes) -> None:
    """A server (or a proxy before it) that ends the stream early or sends garbage: the clients
    raise BAD_REPLY rather than ending quietly or with a JSON error."""

    class Cut(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Cut)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with VcmClient(url, "token") as client, pytest.raises(VcmError) as cut:
            list(client.chat_stream("ann", "Hello?"))
        assert cut.value.code == "BAD_REPLY"

        async def run() -> None:
            async with AsyncVcmClient(url, "token") as aclient:
                [frame async for frame in aclient.chat_stream("ann", "Hello?")]

        with pytest.raises(VcmError) as acut:
            asyncio.run(run())
        assert acut.value.code == "BAD_REPLY"
    finally:
        server.shutdown()
        server.server_close()
