"""Data inputs (``--data NAME=PATH``) against real components: runs on this machine (used in
place), two ssh "hosts" with their own workdirs (staged with rsync over the run's ssh
connections; a second run sends nothing, a changed file only that file), the tar fallback
through a real shell, a URL from an ``http.server`` on 127.0.0.1, and bad inputs that start
nothing.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.http_servers import CountingHandler, http_folder  # noqa: F401 (http_folder: a fixture)
from support.jt_cli import CLI
from support.ssh_hosts import ALIASES

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.frontends.views.text import TextMonitor
from jupyter_trainer.inputs.inputs import check_unchanged, resolve_inputs
from jupyter_trainer.nodes.stage_inputs import NodeCache, probe, stage
from jupyter_trainer.nodes.transport import LocalShell
from jupyter_trainer.store import Store
from jupyter_trainer.targets.registry import add_target

# Each rank prints every file of its input with the file's SHA-256, and where it found it.
READ = """
import hashlib, os
from jupyter_trainer import runtime as jt
root = jt.data["train"]
for folder, _, files in sorted(os.walk(root)):
    for name in sorted(files):
        path = os.path.join(folder, name)
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        print("file", jt.rank, os.path.relpath(path, root), digest, flush=True)
print("root", jt.rank, root, flush=True)
"""


def make_folder(root: Path, files: int, size: int) -> dict[str, str]:
    """``files`` random files of ``size`` bytes (one in a subfolder); their hashes."""
    root.mkdir(parents=True)
    (root / "sub").mkdir()
    hashes = {}
    for k in range(files):
        rel = f"sub/part-{k}.bin" if k == 0 else f"part-{k}.bin"
        data = os.urandom(size)
        (root / rel).write_bytes(data)
        hashes[rel] = hashlib.sha256(data).hexdigest()
    return hashes


def seen(run, rank: int = 0) -> dict[str, str]:
    return {
        line.split()[2]: line.split()[3]
        for line in run.logs(rank).splitlines()
        if line.startswith(f"file {rank} ")
    }


def root_of(run, rank: int = 0) -> str:
    return next(
        line.split(" ", 2)[2]
        for line in run.logs(rank).splitlines()
        if line.startswith(f"root {rank} ")
    )


def test_local_run_reads_the_input_in_place_and_records_it(home, tmp_path):
    data = tmp_path / "digits"
    hashes = make_folder(data, 3, 1000)
    run = api.submit(READ, launcher="python", data={"train": str(data)}, wait=True)
    assert seen(run) == hashes
    assert root_of(run) == str(data)  # used in place: nothing copied
    [record] = run.spec.data
    assert (record.name, record.source, record.kind) == ("train", str(data), "dir")
    assert record.size == 3000 and record.files == 3 and len(record.hash) == 32
    assert not (home / "data").exists()
    # The same folder hashes the same; a changed file changes the hash.
    assert resolve_inputs({"train": data}, home=home)[0].hash == record.hash
    (data / "part-1.bin").write_bytes(b"changed")
    assert resolve_inputs({"train": data}, home=home)[0].hash != record.hash


def test_a_single_file_input_is_a_path_to_the_file(home, tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("a,b\n1,2\n")
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "print('read', jt.data['table'].read_text().replace(chr(10), '|'), flush=True)\n"
    )
    run = api.submit(code, launcher="python", data=[f"table={path}"], wait=True)
    assert "read a,b|1,2|" in run.logs(0)
    assert run.spec.data[0].kind == "file" and run.spec.data[0].size == 8


@pytest.mark.parametrize(
    "data, message",
    [
        (["train=/nonexistent/folder"], "does not exist"),
        (["train"], "write --data NAME=PATH"),
        (["1bad=/tmp"], "invalid data input name"),
        (["train=/tmp", "train=/var"], "given twice"),
        (["train=nosuchscheme://bucket/x"], "nosuchscheme"),
    ],
)
def test_bad_inputs_start_nothing(home, data, message):
    with pytest.raises(SpecError, match=message):
        api.submit("print(1)", launcher="python", data=data)
    assert Store(home).list_runs() == []


def test_an_unreadable_file_starts_nothing(home, tmp_path):
    """The CLI, run as a user who cannot read one file of the folder (root without its
    override of file permissions, by setpriv)."""
    data = tmp_path / "shared"
    make_folder(data, 2, 10)
    (data / "part-1.bin").chmod(0)
    script = tmp_path / "train.py"
    script.write_text("print('started')\n")
    drop = (
        [
            "setpriv",
            "--inh-caps=-dac_override,-dac_read_search",
            "--bounding-set=-dac_override,-dac_read_search",
        ]
        if os.geteuid() == 0
        else []
    )
    done = subprocess.run(
        [
            *drop,
            *CLI,
            "submit",
            str(script),
            "--launcher",
            "python",
            "--data",
            f"train={data}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"cannot read {data / 'part-1.bin'} (Permission denied)" in done.stderr, done.stderr
    assert Store(home).list_runs() == []


def test_tar_fallback_sends_only_changed_files(home, tmp_path):
    """A node without rsync, through a real shell: the second copy links the unchanged files."""
    data = tmp_path / "set"
    make_folder(data, 4, 5000)
    root = tmp_path / "node" / "data"

    def stage_once() -> dict:
        [item] = resolve_inputs({"train": data}, home=home)
        cache = NodeCache(LocalShell(), str(root), sys.executable)
        probe(cache, [item])
        cache.has_rsync = False
        return item, stage(cache, item, check_unchanged(item, home), lambda *a: None)

    item, first = stage_once()
    assert (first["state"], first["tool"], first["files"]) == ("sent", "tar", 4)
    again_item, again = stage_once()
    assert again["state"] == "cached" and again_item.hash == item.hash
    (data / "part-2.bin").write_bytes(b"new content")
    changed_item, changed = stage_once()
    assert (changed["state"], changed["files"], changed["transferred"]) == ("sent", 1, 11)
    new, old = root / changed_item.hash / "set", root / item.hash / "set"
    assert (new / "part-2.bin").read_bytes() == b"new content"
    assert (new / "part-3.bin").stat().st_ino == (old / "part-3.bin").stat().st_ino
    assert (root / "names" / "train").read_text() == changed_item.hash
    assert not [p for p in root.iterdir() if p.name.startswith(".partial")]


def test_two_ssh_nodes_stage_once_then_only_what_changed(pair, home, tmp_path):
    """Each host has its own workdir, so each really gets its copy, over rsync."""
    dirs = [tmp_path / "w1", tmp_path / "w2"]
    add_target(
        "apart",
        "ssh",
        home=home,
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo"},
        hosts=[{"host": a, "workdir": str(d)} for a, d in zip(ALIASES, dirs)],
    )
    data = tmp_path / "dataset"
    hashes = make_folder(data, 5, 10 << 20)  # 50 MB

    def submit(name: str):
        return api.submit(
            READ,
            target="apart",
            nodes=2,
            procs=1,
            launcher="torchrun",
            data={"train": str(data)},
            name=name,
        ).wait(timeout=300)

    first = submit("data-1")
    staged = first.state["launcher"]["staging"]["data"]["train"]
    assert set(staged) == set(ALIASES)
    for node in ALIASES:
        assert staged[node]["state"] == "sent" and staged[node]["tool"] == "rsync"
        assert staged[node]["files"] == 5 and staged[node]["transferred"] == 50 << 20
    digest = first.spec.data[0].hash
    for rank, workdir in enumerate(dirs):
        assert seen(first, rank) == hashes
        assert root_of(first, rank) == str(workdir / "data" / digest / "dataset")
    assert first.state["staging"]["done"] is True

    said = io.StringIO()
    TextMonitor(first, out=said).follow(timeout=30)
    for node in ALIASES:
        assert f"data train to {node}: 5 file(s), 50.0 MiB sent in" in said.getvalue()
    assert "data: train = " in TextMonitor(first).summary()
    feed = RunFeed(first)
    feed.poll()
    assert {row["node"]: row["state"] for row in feed.state_payload()["staging"]} == dict.fromkeys(
        ALIASES, "sent"
    )

    second = submit("data-2")
    said = io.StringIO()
    TextMonitor(second, out=said).follow(timeout=30)
    assert said.getvalue().count("in the node's cache already, nothing sent") == 2
    staged = second.state["launcher"]["staging"]["data"]["train"]
    assert {node: rec["state"] for node, rec in staged.items()} == dict.fromkeys(ALIASES, "cached")
    assert all(rec["bytes"] == 0 and rec["files"] == 0 for rec in staged.values())
    assert seen(second, 1) == hashes

    (data / "part-3.bin").write_bytes(os.urandom(1 << 20))
    hashes["part-3.bin"] = hashlib.sha256((data / "part-3.bin").read_bytes()).hexdigest()
    third = submit("data-3")
    staged = third.state["launcher"]["staging"]["data"]["train"]
    for node in ALIASES:
        assert staged[node]["state"] == "sent" and staged[node]["files"] == 1
        assert staged[node]["transferred"] == 1 << 20
        assert staged[node]["sent"] < 2 << 20  # the other 49 MB stayed on the node
    assert seen(third, 0) == hashes and seen(third, 1) == hashes
    new, old = third.spec.data[0].hash, digest
    unchanged = [dirs[0] / "data" / h / "dataset" / "part-4.bin" for h in (new, old)]
    assert unchanged[0].stat().st_ino == unchanged[1].stat().st_ino  # a hard link


def test_a_url_input_is_downloaded_once(home, http_folder):
    served, base = http_folder
    payload = os.urandom(300_000)
    (served / "weights.bin").write_bytes(payload)
    code = (
        "import hashlib\nfrom jupyter_trainer import runtime as jt\n"
        "print('sha', hashlib.sha256(jt.data['w'].read_bytes()).hexdigest(), flush=True)\n"
    )
    url = f"{base}/weights.bin"
    runs = [api.submit(code, launcher="python", data={"w": url}, wait=True) for _ in range(2)]
    for run in runs:
        assert f"sha {hashlib.sha256(payload).hexdigest()}" in run.logs(0)
        assert run.spec.data[0].source == url and run.spec.data[0].size == len(payload)
    assert CountingHandler.gets == ["/weights.bin"]  # the second run found it in the cache
    (served / "weights.bin").write_bytes(b"v2")
    os.utime(served / "weights.bin", (1, 1))
    third = api.submit(code, launcher="python", data={"w": url}, wait=True)
    assert f"sha {hashlib.sha256(b'v2').hexdigest()}" in third.logs(0)
    assert len(CountingHandler.gets) == 2


def test_a_missing_url_starts_nothing(home, http_folder):
    _, base = http_folder
    with pytest.raises(SpecError, match="HTTP 404"):
        api.submit("print(1)", launcher="python", data={"w": f"{base}/missing.bin"})
    assert Store(home).list_runs() == []


def test_a_rerun_takes_the_data_as_it_is_now(home, tmp_path):
    data = tmp_path / "set"
    make_folder(data, 2, 100)
    first = api.submit(READ, launcher="python", data={"train": str(data)}, wait=True)
    (data / "part-1.bin").write_bytes(b"v2")
    again = api.rerun(first.id, wait=True)
    assert again.spec.data[0].source == str(data)
    assert again.spec.data[0].hash != first.spec.data[0].hash
    assert seen(again)["part-1.bin"] == hashlib.sha256(b"v2").hexdigest()


def test_data_changed_between_submit_and_staging_is_not_cached_under_its_old_hash(home, tmp_path):
    data = tmp_path / "set"
    make_folder(data, 2, 100)
    [item] = resolve_inputs({"train": data}, home=home)
    (data / "part-1.bin").write_bytes(b"changed after submit")
    with pytest.raises(SpecError, match="changed after the run was submitted"):
        check_unchanged(item, home)


def test_the_hash_cache_is_private(home, tmp_path):
    """data-hashes.db lists the path and hash of every file given as data: only its owner
    may read it (one made earlier is tightened)."""
    data = tmp_path / "set"
    make_folder(data, 1, 10)
    db = home / "cache" / "data-hashes.db"
    db.parent.mkdir(parents=True)
    db.touch(mode=0o644)
    db.chmod(0o644)
    resolve_inputs({"train": data}, home=home)
    for path in [db, *db.parent.glob("data-hashes.db-*")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_dangling_link_is_named_as_what_it_is(home, tmp_path):
    data = tmp_path / "set"
    make_folder(data, 1, 10)
    (data / "labels.csv").symlink_to(tmp_path / "moved-away.csv")
    with pytest.raises(SpecError) as info:
        resolve_inputs({"train": data}, home=home)
    assert str(info.value) == (
        f"{data / 'labels.csv'} is a symbolic link to "
        f"{tmp_path / 'moved-away.csv'}, which does not exist: fix the "
        "link, remove it, or leave it out of the data input"
    )
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(
        SpecError,
        match=re.escape(
            f"{link} is a symbolic link to {tmp_path / 'gone'}, which does not exist; fix the link"
        ),
    ):
        api.submit("print(1)", launcher="python", data={"train": str(link)})
    assert Store(home).list_runs() == []
