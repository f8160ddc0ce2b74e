"""A data input's HTTP server may redirect only to another http(s) URL: a redirect to
``ftp://`` (or any other scheme) is refused with a message, and nothing is fetched there."""

from __future__ import annotations

import socket
import subprocess

from support.http_servers import Server, Site
from support.jt_cli import CLI

from jupyter_trainer.store import Store


def test_a_redirect_to_ftp_is_refused_and_not_followed(home, tmp_path):
    site = Site()
    server = Server(site)
    listener = socket.socket()  # where the ftp:// redirect points; it must see no one
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    try:
        url = server.url(f"/redirect?to=ftp://127.0.0.1:{port}/w.bin")
        done = subprocess.run(
            [*CLI, "submit", str(script)] + ["--launcher", "python", "--data", f"w={url}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "redirected it (HTTP 302) to ftp:// on 127.0.0.1" in done.stderr, done.stderr
        try:
            listener.accept()[0].close()
            reached = True
        except TimeoutError:
            reached = False
        assert not reached, "the ftp:// redirect was followed"
        assert Store(home).list_runs() == []
    finally:
        listener.close()
        server.close()
