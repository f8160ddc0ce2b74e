"""Headless Chromium as the browser tests start it keeps loading pages while the suite's other
tests add and remove network interfaces.

Chromium fails every request still waiting for a connection with ``net::ERR_NETWORK_CHANGED``
when an address or link changes. Here 30 fetch loops ran against a local server while a bridge,
a network namespace and a veth pair came and went three times: Chromium started directly
failed 138 and 235 of about 700 requests in two tries, and none through the launcher.
"""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from support.browser_page import CHROMIUM, CHROMIUM_ARGS, OFFLINE_NETLINK, chromium_launcher

PROBE = """
import socket
for family, kind, proto, name in [
    (socket.AF_NETLINK, socket.SOCK_RAW, 0, "route"),
    (socket.AF_NETLINK, socket.SOCK_RAW, 15, "uevent"),
    (socket.AF_INET, socket.SOCK_STREAM, 0, "tcp"),
]:
    try:
        socket.socket(family, kind, proto).close()
        print(name, "ok")
    except OSError as exc:
        print(name, exc.errno)
"""


def probe(*launcher: str) -> dict[str, str]:
    out = subprocess.run(
        [*launcher, sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return dict(line.split() for line in out.stdout.splitlines())


def test_the_launcher_denies_only_netlink_route_sockets():
    assert probe() == {"route": "ok", "uevent": "ok", "tcp": "ok"}
    assert probe(sys.executable, str(OFFLINE_NETLINK)) == {
        "route": "13",  # EACCES
        "uevent": "ok",
        "tcp": "ok",
    }


class Slow(http.server.BaseHTTPRequestHandler):
    """Answers each request after 50 ms, on a connection of its own."""

    def do_GET(self) -> None:
        time.sleep(0.05)
        body = b"<html><body>ok</body></html>" if self.path == "/" else b"x" * 1000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def churn_interfaces(name: str, times: int) -> None:
    """What the SSH hosts and Kubernetes pods of other tests do to this machine's network."""
    bridge, ns = f"{name}b", f"{name}n"
    for i in range(times):
        try:
            ip("link", "add", bridge, "type", "bridge")
            ip("addr", "add", f"10.251.{i}.1/24", "dev", bridge)
            ip("link", "set", bridge, "up")
            ip("netns", "add", ns)
            ip("link", "add", f"{name}v", "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", f"{name}v", "master", bridge, "up")
            ip("-n", ns, "link", "set", "eth0", "up")
            time.sleep(1)
        finally:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
        time.sleep(0.5)


FETCH_LOOPS = """() => { window.jt = {ok: 0, failed: [], stop: false};
    for (let k = 0; k < 30; k++) (async () => { while (!window.jt.stop) {
        try { await (await fetch('/x?' + Math.random())).text(); window.jt.ok++; }
        catch (e) { window.jt.failed.push(String(e)); } } })(); }"""


def test_a_page_keeps_loading_while_interfaces_come_and_go(tmp_path):
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.fail("changing network interfaces needs root and iproute2")
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=chromium_launcher(tmp_path), headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
                page.evaluate(FETCH_LOOPS)
                churn_interfaces(f"jtnc{os.getpid() % 100000}", 3)
                seen = page.evaluate("window.jt.stop = true, window.jt")
                assert seen["ok"] > 30 and seen["failed"] == [], seen
                assert page.evaluate("navigator.onLine")
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
    assert CHROMIUM in (tmp_path / "chromium").read_text()
