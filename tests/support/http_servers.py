"""Real HTTP servers on loopback for the URL-input tests: files with ETags, Basic
authentication or a query token, a presigned-style URL that refuses HEAD, redirects, an
endless response, a server that trickles one byte at a time and one that goes silent.

Every request is recorded (method, path, the Authorization header), so a test can say
what was asked for and with which credentials. ``http_folder`` serves a plain folder and
counts its GETs.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

import pytest


@dataclass
class Request:
    method: str
    path: str
    auth: str | None
    range: str | None
    at: float = field(default_factory=time.monotonic)  # when the server read it


@dataclass
class Site:
    """What the server serves and asks for; changed by the test while it runs."""

    files: dict[str, bytes] = field(default_factory=dict)
    basic: tuple[str, str] | None = None  # required user and password
    token: str | None = None  # required ?token=
    trickle_every: float = 0.2  # /trickle: one byte this often
    stall_for: float = 30.0  # /trickle, /silent, /stall give up after this long
    trickle_for: float = 2.5  # /stall: trickles this long, then sends nothing
    endless_limit: int = 256 << 20  # /endless stops here (a client that never stops)
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def gets(self, prefix: str = "/") -> list[Request]:
        return [r for r in self.requests if r.method == "GET" and r.path.startswith(prefix)]


class Handler(http.server.BaseHTTPRequestHandler):
    site: Site
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._answer(head=True)

    def do_GET(self):
        self._answer(head=False)

    # -- routes ----------------------------------------------------------------------
    def _answer(self, head: bool) -> None:
        site = self.site
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        site.requests.append(
            Request(
                self.command,
                parts.path,
                self.headers.get("Authorization"),
                self.headers.get("Range"),
            )
        )
        if not self._allowed(query):
            return self._empty(401, {"WWW-Authenticate": 'Basic realm="data"'})
        route, _, rest = parts.path.lstrip("/").partition("/")
        if route == "file":
            return self._file(rest, head)
        if route == "signed":  # signed for GET only, as a presigned S3 URL is
            return self._empty(403) if head else self._file(rest, head)
        if route == "redirect":
            return self._empty(302, {"Location": query["to"][0]})
        if route == "endless":
            return self._endless(head)
        if route in ("trickle", "silent", "stall"):
            return self._slow(head, route)
        return self._empty(404)

    def _allowed(self, query: dict[str, list[str]]) -> bool:
        site = self.site
        if site.token is not None and query.get("token") != [site.token]:
            return False
        if site.basic is not None:
            expected = base64.b64encode(":".join(site.basic).encode()).decode()
            return self.headers.get("Authorization") == f"Basic {expected}"
        return True

    def _empty(self, code: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _file(self, name: str, head: bool) -> None:
        body = self.site.files.get(name)
        if body is None:
            return self._empty(404)
        tag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        wanted = self.headers.get("Range")
        if wanted == "bytes=0-0" and body:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes 0-0/{len(body)}")
            part = body[:1]
        else:
            self.send_response(200)
            part = body
        self.send_header("Content-Length", str(len(part)))
        self.send_header("ETag", tag)
        self.end_headers()
        if not head:
            self.wfile.write(part)

    def _endless(self, head: bool) -> None:
        """No Content-Length, and data until the client hangs up."""
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if head:
            return
        block, sent = b"x" * (1 << 16), 0
        try:
            while sent < self.site.endless_limit and not self.site.stop.is_set():
                self.wfile.write(block)
                sent += len(block)
        except OSError:
            pass

    def _slow(self, head: bool, route: str) -> None:
        """10 MB announced; one byte every ``trickle_every`` s (``trickle``), nothing
        (``silent``), or bytes for ``trickle_for`` s and then nothing (``stall``), until
        ``stall_for`` s have passed."""
        self.send_response(200)
        self.send_header("Content-Length", str(10 << 20))
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if head:
            return
        self.wfile.flush()
        started = time.monotonic()
        until = started + self.site.stall_for
        try:
            while time.monotonic() < until and not self.site.stop.is_set():
                if route == "trickle" or (
                    route == "stall" and time.monotonic() - started < self.site.trickle_for
                ):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                self.site.stop.wait(self.site.trickle_every)
        except OSError:
            pass


class Server:
    """A threading HTTP server for ``site`` on ``host`` (an address of loopback)."""

    def __init__(self, site: Site, host: str = "127.0.0.1") -> None:
        handler = type("SiteHandler", (Handler,), {"site": site})
        self.site = site
        self.httpd = http.server.ThreadingHTTPServer((host, 0), handler)
        self.httpd.daemon_threads = True
        self.base = f"http://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, userinfo: str = "") -> str:
        scheme, rest = self.base.split("://")
        return f"{scheme}://{userinfo + '@' if userinfo else ''}{rest}{path}"

    def close(self) -> None:
        self.site.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder and records the path of every GET."""

    gets: list[str] = []

    def do_GET(self):
        type(self).gets.append(self.path)
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def http_folder(tmp_path):
    """(the served folder, its base URL) of a plain folder server on loopback."""
    served = tmp_path / "served"
    served.mkdir()
    handler = lambda *a, **k: CountingHandler(*a, directory=str(served), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    CountingHandler.gets = []
    yield served, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(10)
