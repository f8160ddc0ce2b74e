"""Credentials in data URLs: used for the download, kept owner-only for a rerun, and never
in a spec, ``show``, the REST API, a model's lineage, the download cache, a log or a
message. Against real HTTP servers on loopback that check Basic authentication or a query
token, and a real jupyter_server for the REST API.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from support.http_servers import Server, Site
from support.jt_cli import CLI, cli
from support.server_rest import jp_server_config  # noqa: F401 (the server's configuration)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.core.urls import redact
from jupyter_trainer.inputs.inputs import resolve_inputs
from jupyter_trainer.store import Store

pytest_plugins = ["pytest_jupyter.jupyter_server"]

PASSWORD = "pw-S3CRET-basic"
TOKEN = "tok-S3CRET-query"
READ = (
    "import hashlib\nfrom jupyter_trainer import runtime as jt\n"
    "for name in sorted(jt.data):\n"
    "    print('sha', name, hashlib.sha256(jt.data[name].read_bytes()).hexdigest())\n"
    "(jt.outputs_dir / 'model.txt').write_text('weights')\n"
)


@pytest.fixture
def sites():
    """One server that wants user ``reader`` with PASSWORD, one that wants ?token=TOKEN."""
    basic, query = Site(basic=("reader", PASSWORD)), Site(token=TOKEN)
    servers = Server(basic), Server(query)
    for site, server in zip((basic, query), servers):
        site.server = server
        site.files["w.bin"] = b"weights " + server.base.encode()
    yield basic, query
    for server in servers:
        server.close()


def files_holding(root: Path, *needles: str) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(n.encode() in data for n in needles):
                found.append(str(path.relative_to(root)))
    return sorted(found)


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://reader:pw@host:8443/d/w.bin", "https://reader:***@host:8443/d/w.bin"),
        ("https://ghp_abc123@github.com/o/r/raw/w.bin", "https://***@github.com/o/r/raw/w.bin"),
        (
            "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F1"
            "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            "&X-Amz-Security-Token=IQo&X-Amz-Signature=9f8e",
            "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
            "&X-Amz-Date=20250101T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            "&X-Amz-Security-Token=***&X-Amz-Signature=***",
        ),
        (
            "https://a.blob.core.windows.net/c/d.zip?sv=2022-11-02&se=2025-01-01T00%3A00Z&sp=r&sig=Ab%2B",
            "https://a.blob.core.windows.net/c/d.zip?sv=2022-11-02&se=2025-01-01T00%3A00Z&sp=r&sig=***",
        ),
        (
            "https://storage.googleapis.com/b/o?X-Goog-Credential=sa%40p&X-Goog-Signature=beef",
            "https://storage.googleapis.com/b/o?X-Goog-Credential=***&X-Goog-Signature=***",
        ),
        (
            "https://h/d?api_key=k1&version=3#access_token=t2",
            "https://h/d?api_key=***&version=3#access_token=***",
        ),
        ("ftp://me:p%40ss@h/d", "ftp://me:***@h/d"),
        (
            "abfs://container@account.dfs.core.windows.net/d",
            "abfs://container@account.dfs.core.windows.net/d",
        ),
        ("s3://bucket/train/", "s3://bucket/train/"),
        ("/data/train", "/data/train"),
    ],
)
def test_redact_hides_secrets_and_keeps_the_rest(url, shown):
    assert redact(url) == shown
    assert redact(shown) == shown


async def test_url_credentials_are_used_and_kept_out_of_every_record(home, sites, jp_fetch):
    basic, query = sites
    with_password = basic.server.url("/file/w.bin", f"reader:{PASSWORD}")
    with_token = query.server.url(f"/file/w.bin?token={TOKEN}&v=2")
    run = api.submit(
        READ,
        launcher="python",
        name="secret-data",
        wait=True,
        data={"a": with_password, "b": with_token},
    )
    assert run.logs(0).count("sha ") == 2
    assert [d.source for d in run.spec.data] == [
        basic.server.url("/file/w.bin", "reader:***"),
        query.server.url("/file/w.bin?token=***&v=2"),
    ]
    assert all(r.auth and r.auth.startswith("Basic ") for r in basic.requests)
    model = run.register_model("secret-model", "model.txt")
    assert [d["source"] for d in model.lineage["data"]] == [d.source for d in run.spec.data]

    shown = cli("show", run.id, timeout=60)
    assert shown.returncode == 0 and "token=***&v=2" in shown.stdout, shown.stderr
    response = await jp_fetch("jupyter-trainer/api", "runs", run.id)
    body = response.body.decode()
    assert "reader:***@" in body
    for said in (shown.stdout, shown.stderr, body):
        assert PASSWORD not in said and TOKEN not in said

    kept = home / "secrets" / "data-urls.db"
    assert files_holding(home, PASSWORD, TOKEN) == ["secrets/data-urls.db"]
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    # the downloads may be private data too
    assert stat.S_IMODE((home / "cache" / "data-url").stat().st_mode) == 0o700
    entries = [
        json.loads(p.read_text()) for p in (home / "cache" / "data-url").glob("*/source.json")
    ]
    assert sorted(e["url"] for e in entries) == sorted(d.source for d in run.spec.data)

    # A rerun fetches again with the kept credentials (the servers refuse anything else).
    asked = len(basic.requests), len(query.requests)
    again = api.rerun(run.id, wait=True)
    assert again.logs(0).count("sha ") == 2
    assert (len(basic.requests), len(query.requests)) > asked
    assert files_holding(home, PASSWORD, TOKEN) == ["secrets/data-urls.db"]


def test_a_rerun_whose_credentials_are_gone_says_to_give_the_url_again(home, sites):
    _, query = sites
    run = api.submit(
        "print(1)",
        launcher="python",
        wait=True,
        data={"w": query.server.url(f"/file/w.bin?token={TOKEN}")},
    )
    (home / "secrets" / "data-urls.db").unlink()
    with pytest.raises(SpecError) as info:
        api.rerun(run.id)
    shown = query.server.url("/file/w.bin?token=***")
    assert str(info.value).startswith(
        f"the data input w ({shown}) was given with credentials, and they are not kept any more"
    )
    assert "submit the run again with --data w=URL" in str(info.value)
    assert TOKEN not in str(info.value) and len(Store(home).list_runs()) == 1


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("case", ["closed port", "wrong password"])
def test_a_password_url_that_fails_says_why_without_the_password(home, sites, tmp_path, case):
    basic, _ = sites
    if case == "closed port":
        url = f"http://reader:{PASSWORD}@127.0.0.1:{_closed_port()}/file/w.bin"
        reason = "Connection refused; check the URL and the network"
    else:
        url = basic.server.url("/file/w.bin", "reader:not-the-S3CRET")
        reason = (
            "HTTP 401 Unauthorized; the server refused its credentials: check them, or "
            "sign the URL again if it is a presigned one that has expired"
        )
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    done = subprocess.run(
        [
            *CLI,
            "submit",
            str(script),
            "--launcher",
            "python",
            "--data",
            f"w={url}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"({redact(url)})" in done.stderr and reason in done.stderr, done.stderr
    assert "S3CRET" not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert "Name or service not known" not in done.stderr
    assert Store(home).list_runs() == [] and not (home / "secrets").exists()


def test_credentials_follow_a_redirect_to_the_same_origin_only(home, sites):
    """To the same host and port the Authorization header goes again; to another host (a
    CDN, a presigned target) it does not, as requests and curl behave."""
    basic, _ = sites
    other = Site()
    other.files["w.bin"] = b"elsewhere"
    elsewhere = Server(other, host="127.0.0.2")
    try:
        same = basic.server.url("/redirect?to=/file/w.bin", f"reader:{PASSWORD}")
        [item] = _resolve({"w": same}, home)
        assert Path(item.path).read_bytes() == basic.files["w.bin"]
        away = basic.server.url(
            f"/redirect?to={elsewhere.url('/file/w.bin')}", f"reader:{PASSWORD}"
        )
        [item] = _resolve({"w": away}, home)
        assert Path(item.path).read_bytes() == b"elsewhere"
        assert other.requests and all(r.auth is None for r in other.requests)
    finally:
        elsewhere.close()


def test_netrc_gives_credentials_to_a_url_without_them(home, sites, tmp_path, monkeypatch):
    basic, _ = sites
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login reader password {PASSWORD}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    [item] = _resolve({"w": basic.server.url("/file/w.bin")}, home)
    assert Path(item.path).read_bytes() == basic.files["w.bin"]
    assert not (home / "secrets").exists()  # nothing in the URL: nothing to keep


def test_a_dry_run_keeps_no_credentials(home, sites):
    _, query = sites
    shown = api.submit(
        "print(1)",
        launcher="python",
        dry_run=True,
        data={"w": query.server.url(f"/file/w.bin?token={TOKEN}")},
    )
    assert "token=***" in shown.header and TOKEN not in shown.header
    assert not (home / "secrets").exists() and query.gets() == []


def _resolve(data, home):
    return resolve_inputs(data, home=home)


def test_a_run_recorded_with_a_secret_in_its_spec_is_shown_redacted(home, tmp_path):
    """An earlier version wrote the URL as given into spec.json: every reader redacts it."""
    data = tmp_path / "set"
    data.mkdir()
    (data / "a.txt").write_text("a")
    run = api.submit("print(1)", launcher="python", data={"w": str(data)}, wait=True)
    spec_file = home / "runs" / run.id / "spec.json"
    spec_file.chmod(0o644)
    recorded = json.loads(spec_file.read_text())
    recorded["data"][0]["source"] = "https://h.example/d.tar?token=OLD-S3CRET&v=1"
    spec_file.write_text(json.dumps(recorded))
    assert Store(home).read_spec(run.id).data[0].source == "https://h.example/d.tar?token=***&v=1"
    shown = cli("show", run.id, timeout=60)
    assert "d.tar?token=***&v=1" in shown.stdout and "OLD-S3CRET" not in shown.stdout
