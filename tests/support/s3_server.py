"""A real S3 server on loopback for the object-storage tests: moto's server mode
(``ThreadedMotoServer``), started once per session and stopped at its end, and a small HTTP
proxy in front of it that a test turns faulty: slow (every request waits), full (every
upload answered ``507 InsufficientStorage`` as a bucket over its quota would), refusing an
access key (``403 InvalidAccessKeyId``), or holding uploads whose path holds a word until
the test lets them go (so that an uploader can be killed in the middle of a file).

``s3`` gives a test its own bucket and sets the standard variables (``AWS_ENDPOINT_URL``,
keys, region) for this process and the processes it starts: the code under test finds the
server the way it would find any S3.
"""

from __future__ import annotations

import http.client
import http.server
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

import pytest

KEY, SECRET = "jt-test-key", "jt-test-secret"


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 on 127.0.0.1 (a free port): its endpoint URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@dataclass
class Faults:
    """What the proxy does wrong; changed by the test while it runs."""

    delay: float = 0.0  # seconds every request waits
    full: bool = False  # every PUT and POST answered 507
    deny_key: str | None = None  # requests signed with this key answered 403
    hold: str | None = None  # PUTs whose path holds this wait for ``release``
    release: threading.Event = field(default_factory=threading.Event)
    held: threading.Event = field(default_factory=threading.Event)  # one is waiting now
    puts: list[str] = field(default_factory=list)


def _error(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
        f"<Message>{message}</Message><RequestId>{uuid.uuid4().hex}</RequestId></Error>"
    ).encode()


class _Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    faults: Faults

    def log_message(self, *args):
        pass

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        faults = self.faults
        if faults.delay:
            time.sleep(faults.delay)
        writes = self.command in ("PUT", "POST")
        if writes:
            faults.puts.append(self.path)
        auth = self.headers.get("Authorization") or ""
        if faults.deny_key and f"Credential={faults.deny_key}/" in auth:
            return self._answer(
                403, _error("InvalidAccessKeyId", "The AWS Access Key Id does not exist.")
            )
        if writes and faults.full:
            return self._answer(
                507, _error("InsufficientStorage", "The bucket is over its storage quota.")
            )
        if writes and faults.hold and faults.hold in self.path:
            faults.held.set()
            faults.release.wait(60)
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status, resp.reason)
            head = self.command == "HEAD"  # its Content-Length is the object's size
            for key, value in resp.getheaders():
                skip = ("transfer-encoding", "connection") + (() if head else ("content-length",))
                if key.lower() not in skip:
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            conn.close()

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


@dataclass
class Bucket:
    url: str  # s3://bucket/runs
    bucket: str
    endpoint: str  # what the code under test talks to (the proxy)
    faults: Faults
    client: object  # boto3's S3 client, straight to moto

    def objects(self) -> list[str]:
        found = self.client.list_objects_v2(Bucket=self.bucket).get("Contents", [])  # type: ignore[attr-defined]
        return sorted(o["Key"] for o in found)


@pytest.fixture
def s3(s3_server, monkeypatch):
    """A fresh bucket behind a faulty proxy; the AWS variables point at the proxy."""
    import boto3

    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    faults = Faults()
    host, port = s3_server.removeprefix("http://").split(":")
    handler = type("Proxy", (_Proxy,), {"upstream": (host, int(port)), "faults": faults})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    proxy.daemon_threads = True
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{proxy.server_address[1]}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    bucket = f"jt-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_server,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    try:
        yield Bucket(f"s3://{bucket}/runs", bucket, endpoint, faults, client)
    finally:
        faults.release.set()
        proxy.shutdown()
        proxy.server_close()
        thread.join(10)
