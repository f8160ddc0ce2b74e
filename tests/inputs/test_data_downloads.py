"""URL inputs within their limits, against real HTTP servers on 127.0.0.1: an endless
response is cut at the size limit, a size announced over it is refused before the download,
a trickling or silent server is cut at the deadline, a killed submit leaves no partial file,
a dry run downloads nothing, a presigned-style URL (no HEAD) is still cached by its ETag,
and an fsspec folder over the limit is refused. Nothing of a stopped download stays in the
cache, and no run is created.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import wait_for
from support.http_servers import Server, Site
from support.jt_cli import CLI

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.inputs.inputs import resolve_inputs
from jupyter_trainer.store import Store

MAX_ENV = "JUPYTER_TRAINER_MAX_DOWNLOAD_BYTES"
TIME_ENV = "JUPYTER_TRAINER_DOWNLOAD_TIMEOUT"
READ_SHA = (
    "import hashlib\nfrom jupyter_trainer import runtime as jt\n"
    "print('sha', hashlib.sha256(jt.data['w'].read_bytes()).hexdigest(), flush=True)\n"
)


@pytest.fixture
def site():
    served = Site()
    server = Server(served)
    served.server = server
    yield served
    server.close()


def url_cache(home: Path) -> list[str]:
    """What the download cache holds: entries and partial downloads alike."""
    folder = home / "cache" / "data-url"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_an_endless_response_is_cut_at_the_size_limit_and_removed(home, site, monkeypatch):
    monkeypatch.setenv(MAX_ENV, "2M")
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        api.submit("print(1)", launcher="python", data={"w": site.server.url("/endless")})
    message = str(info.value)
    assert "sent more than the download limit of 2.0 MiB (it did not say its size)" in message
    assert f"({site.server.url('/endless')})" in message and message.endswith(f"{MAX_ENV}=6M")
    assert time.monotonic() - started < 20
    assert url_cache(home) == [] and Store(home).list_runs() == []


def test_a_size_over_the_limit_is_refused_before_the_download(home, site, monkeypatch):
    site.files["big.bin"] = os.urandom(3 << 20)
    monkeypatch.setenv(MAX_ENV, "1MiB")
    with pytest.raises(
        SpecError,
        match=r"is 3\.0 MiB, over the download limit of 1\.0 MiB; "
        rf"raise it with {MAX_ENV}=6M",
    ):
        api.submit("print(1)", launcher="python", data={"w": site.server.url("/file/big.bin")})
    assert site.gets() == []  # only asked (HEAD): not a byte downloaded
    assert url_cache(home) == [] and Store(home).list_runs() == []
    monkeypatch.setenv(MAX_ENV, "lots")
    with pytest.raises(SpecError, match=f"{MAX_ENV}='lots' is not a size"):
        api.submit("print(1)", launcher="python", data={"w": site.server.url("/file/big.bin")})


@pytest.mark.parametrize("route", ["trickle", "silent", "stall"])
def test_a_slow_server_is_cut_at_the_deadline_with_progress_said(
    home, site, monkeypatch, capsys, route
):
    """The deadline holds whether bytes trickle in (each read returns), none come at all,
    or they stop coming 3.5 s into a 4 s limit: then a read that began before the end
    would block past it, to about 7.5 s (its socket timeout is what was left when it
    connected), so the watchdog shuts the connection down at the limit. The server gives up
    after 30 s. The limit counts from the first request the server saw, not from the start of
    ``submit``, whose own work a loaded machine can slow by seconds."""
    monkeypatch.setenv(TIME_ENV, "4")
    site.trickle_for = 3.5
    url = site.server.url(f"/{route}")
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        api.submit("print(1)", launcher="python", data={"w": url})
    ended = time.monotonic()
    first = min(r.at for r in site.requests if r.path == f"/{route}")
    assert ended - started >= 4 and ended - first < 6, (ended - started, ended - first)
    assert f"the data input w ({url}) did not download within the limit of 4 s" in str(info.value)
    assert f"raise the limit with {TIME_ENV}=" in str(info.value)
    said = capsys.readouterr().err
    assert f"[jt] data w from {url}: downloading 10.0 MiB\n" in said
    if route != "silent":
        assert re.search(
            rf"\[jt\] data w from {re.escape(url)}: \d+ bytes of 10\.0 MiB, "
            r"\d+ bytes/s\n",
            said,
        ), said
    assert url_cache(home) == [] and Store(home).list_runs() == []


def test_a_killed_submit_leaves_no_partial_download(home, site, tmp_path):
    """Ctrl-C, SIGTERM and SIGHUP of `jupyter-trainer submit` while it downloads: the
    partial file goes; the signals still end the process as they would have."""
    site.stall_for = 60
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    url = site.server.url("/trickle")
    for signum, code in (
        (signal.SIGINT, 130),
        (signal.SIGTERM, -signal.SIGTERM),
        (signal.SIGHUP, -signal.SIGHUP),
    ):
        err = tmp_path / f"stderr-{signum}"
        with open(err, "wb") as sink:
            proc = subprocess.Popen(
                [
                    *CLI,
                    "submit",
                    str(script),
                    "--launcher",
                    "python",
                    "--data",
                    f"w={url}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        try:
            wait_for(
                lambda: list((home / "cache" / "data-url").glob(".*/*")),
                timeout=60,
                what="a partial download",
            )
            proc.send_signal(signum)
            assert proc.wait(30) == code, err.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert url_cache(home) == [], (signum, url_cache(home))
        assert f"data w from {url}: downloading 10.0 MiB" in err.read_text()
    assert Store(home).list_runs() == []


def test_a_dry_run_downloads_nothing(home, site):
    site.files["w.bin"] = b"weights" * 1000
    url = site.server.url("/file/w.bin")
    shown = api.submit("print(1)", launcher="python", data={"w": url}, dry_run=True)
    assert f"# data w: {url} (6.8 KiB) is not downloaded by a dry run" in shown.header
    assert site.gets() == [] and [r.method for r in site.requests] == ["HEAD"]
    assert url_cache(home) == [] and Store(home).list_runs() == []
    run = api.submit(READ_SHA, launcher="python", data={"w": url}, wait=True)  # downloads
    assert len(site.gets()) == 1
    again = api.submit("print(1)", launcher="python", data={"w": url}, dry_run=True)
    assert f"# data w: {url} is in the download cache, up to date" in again.header
    assert len(site.gets()) == 1 and len(Store(home).list_runs()) == 1
    assert run.spec.data[0].size == 7000


def test_a_url_without_head_is_cached_by_a_range_request_and_downloaded_when_it_changes(home, site):
    """A presigned URL is signed for GET: HEAD is refused, a one-byte Range GET is not."""
    site.files["w.bin"] = b"version 1"
    url = site.server.url("/signed/w.bin?X-Amz-Signature=0123456789abcdef&X-Amz-Expires=60")
    first = api.submit(READ_SHA, launcher="python", data={"w": url}, wait=True)
    second = api.submit(READ_SHA, launcher="python", data={"w": url}, wait=True)
    assert first.spec.data[0].hash == second.spec.data[0].hash
    full = [r for r in site.gets() if r.range is None]
    assert len(full) == 1  # the second run found it in the cache
    site.files["w.bin"] = b"version 2, longer"
    third = api.submit(READ_SHA, launcher="python", data={"w": url}, wait=True)
    assert third.spec.data[0].hash != first.spec.data[0].hash
    assert third.spec.data[0].size == len(b"version 2, longer")


def test_an_fsspec_folder_over_the_size_limit_is_refused_and_leaves_nothing(home, monkeypatch):
    """fsspec's in-memory filesystem (fsspec comes with torch): a folder is listed first."""
    import fsspec

    fs = fsspec.filesystem("memory")
    for k in range(3):
        fs.pipe(f"/jt-sets/train/part-{k}.bin", os.urandom(1 << 20))
    monkeypatch.setenv(MAX_ENV, "2M")
    try:
        with pytest.raises(SpecError, match=r"is 3\.0 MiB, over the download limit of 2\.0 MiB"):
            resolve_inputs({"train": "memory://jt-sets/train"}, home=home)
        assert url_cache(home) == []
        monkeypatch.setenv(MAX_ENV, "4M")
        [item] = resolve_inputs({"train": "memory://jt-sets/train"}, home=home)
        assert (item.kind, item.files, item.size) == ("dir", 3, 3 << 20)
        assert sorted(p.name for p in Path(item.path).iterdir()) == [
            "part-0.bin",
            "part-1.bin",
            "part-2.bin",
        ]
    finally:
        fs.rm("/jt-sets", recursive=True)
