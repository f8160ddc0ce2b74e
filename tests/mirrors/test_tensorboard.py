"""`jupyter-trainer tensorboard` and `%train tensorboard`: real 2-rank runs exported as event
files and read back by TensorBoard's own reader, exported again, followed live, and served by
a real TensorBoard that leaves no process behind."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import live_state, wait_for
from IPython.utils.capture import capture_output
from support.jt_cli import CLI, cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import metadata as hparams_metadata

from jupyter_trainer.api import runs as api
from jupyter_trainer.mirrors.tensorboard.server import stop_shared
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import HOME_ENV

KNOWN = """\
from jupyter_trainer import runtime as jt
losses = [[2.5, 1.25, 0.625, 0.3125], [3.0, 1.5, 0.1, 1e-7]][jt.rank]
for i in range(4):
    jt.log(step=10 * i, loss=losses[i], lr=0.1 / (i + 1))
jt.log(step=40, loss=float("nan"))
jt.log(step=50, loss=float("inf"), note="text is not charted")
jt.log(acc=0.5)
jt.log(acc=0.75)
"""
PARAMS = {"lr": 0.1, "layers": [64, 10], "opt": "adam", "amp": False}

# Logs steps 0-2, waits for the file jt.params["gate"], then logs steps 3-5.
GATED = """\
import os, time
from jupyter_trainer import runtime as jt
for step in range(3):
    jt.log(step=step, loss=step + jt.rank / 4)
jt.flush()
while not os.path.exists(jt.params["gate"]):
    time.sleep(0.05)
for step in range(3, 6):
    jt.log(step=step, loss=step + jt.rank / 4)
"""


def read_back(folder: Path) -> dict[str, list[tuple[int, float, float]]]:
    """(step, value, wall time) of each scalar in ``folder``, by TensorBoard's own reader."""
    reader = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    reader.Reload()
    return {
        tag: [(e.step, e.value, e.wall_time) for e in reader.Scalars(tag)]
        for tag in reader.Tags()["scalars"]
    }


def f32(value: float) -> float:
    """What a TensorBoard scalar holds of ``value``: the nearest 32-bit float."""
    return float(np.float32(value))


def same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        g == w or (isinstance(g, float) and math.isnan(g) and math.isnan(w))
        for got_row, want_row in zip(got, want)
        for g, w in zip(got_row, want_row)
    )


def logged_times(run: api.Run, rank: int) -> dict[str, list[float]]:
    """The ``t`` of each metric's events on ``rank``, in order, from the run's event file."""
    times: dict[str, list[float]] = {}
    for event in run.store.iter_events(run.id, rank):
        if event["kind"] == "metric":
            for name, value in event["values"].items():
                if not isinstance(value, str) or value in ("nan", "inf", "-inf"):
                    times.setdefault(name, []).append(event["t"])
    return times


def session(folder: Path) -> dict:
    reader = EventAccumulator(str(folder))
    reader.Reload()
    content = reader.PluginTagToContent("hparams")
    found = {}
    if "_hparams_/session_start_info" in content:
        found["start"] = hparams_metadata.parse_session_start_info_plugin_data(
            content["_hparams_/session_start_info"]
        )
    if "_hparams_/session_end_info" in content:
        found["end"] = hparams_metadata.parse_session_end_info_plugin_data(
            content["_hparams_/session_end_info"]
        )
    return found


def files_of(folder: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_export_reads_back_exactly_and_again_writes_nothing(home, tmp_path):
    # no system figures: they come with time, and these counts are exact
    run = api.submit(KNOWN, procs=2, name="known", params=PARAMS, system_interval=0, wait=True)
    logdir = tmp_path / "tb logs"
    done = cli("tensorboard", run.id, "--logdir", str(logdir))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{run.id}: 24 values written to {logdir / run.id}\n"

    losses = [[2.5, 1.25, 0.625, 0.3125], [3.0, 1.5, 0.1, 1e-7]]
    for rank in (0, 1):
        got = read_back(logdir / run.id / f"rank-{rank}")
        assert sorted(got) == ["acc", "loss", "lr"]  # the text metric is not a scalar
        t = logged_times(run, rank)
        want = {
            "loss": list(
                zip(
                    [0, 10, 20, 30, 40, 50],
                    [f32(v) for v in losses[rank]] + [math.nan, math.inf],
                    t["loss"],
                )
            ),
            "lr": list(zip([0, 10, 20, 30], [f32(0.1 / (i + 1)) for i in range(4)], t["lr"])),
            "acc": list(zip([0, 1], [0.5, 0.75], t["acc"])),
        }  # no step logged: 0, 1
        for tag in want:
            assert same(got[tag], want[tag]), (rank, tag, got[tag], want[tag])
    found = session(logdir / run.id)
    hparams = found["start"].hparams
    assert hparams["lr"].number_value == 0.1 and hparams["opt"].string_value == "adam"
    assert hparams["layers"].string_value == "[64, 10]" and hparams["amp"].bool_value is False
    assert set(hparams) == set(PARAMS)
    assert found["end"].status == api_pb2.STATUS_SUCCESS
    assert found["end"].end_time_secs == pytest.approx(run.state["ended"])

    before = files_of(logdir)
    done = cli("tensorboard", run.id, "--logdir", str(logdir))
    assert (
        done.returncode == 0 and done.stdout == f"{run.id}: 0 values written to {logdir / run.id}\n"
    )
    assert files_of(logdir) == before  # not even rewritten

    rank0 = next((logdir / run.id / "rank-0").glob("events.out.tfevents.*"))
    with open(rank0, "ab") as fh:
        fh.write(b"half a record of an export killed while writing")
    assert cli("tensorboard", run.id, "--logdir", str(logdir)).returncode == 0
    assert rank0.read_bytes() == before[str(rank0.relative_to(logdir))][1]


def test_system_figures_are_exported_under_system(home, tmp_path):
    run = api.submit(
        "import time; time.sleep(2.5)", launcher="python", system_interval=0.5, wait=True
    )
    logdir = tmp_path / "logs"
    assert cli("tensorboard", run.id, "--logdir", str(logdir)).returncode == 0
    got = read_back(logdir / run.id / "rank-0")
    figures = run.system()
    assert {"system/rss_bytes", "system/cpu_percent"} <= set(got), sorted(got)
    assert sorted(got) == sorted(f"system/{name}" for name in figures)
    for name, points in figures.items():
        assert [(s, v) for s, v, _ in got[f"system/{name}"]] == [
            (i, f32(value)) for i, (_, value) in enumerate(points)
        ], name
    assert len(figures["rss_bytes"]) >= 3


@pytest.mark.parametrize(
    "logdir, says",
    [
        ("/proc/nope", "tensorboard --logdir /proc/nope: cannot write there"),  # cannot be made
        ("/sys", "tensorboard --logdir /sys: cannot write there"),  # a folder not even root writes
        ("", "tensorboard --logdir is empty"),
        ("notes.txt", "notes.txt: not a folder"),
    ],
)
def test_a_bad_logdir_is_one_line_and_writes_nothing(home, tmp_path, logdir, says):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\njt.log(loss=1.0)\n",
        launcher="python",
        name="logdir",
        wait=True,
    )
    (tmp_path / "notes.txt").write_text("not a folder")
    done = subprocess.run(
        [*CLI, "tensorboard", run.id, "--logdir", logdir],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("jupyter-trainer: error: ") and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "name a folder" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jt-home", "notes.txt"]
    assert not (home / "tensorboard").exists()


def test_a_live_run_keeps_appending(home, tmp_path):
    gate = tmp_path / "go"
    run = api.submit(GATED, procs=2, name="live", params={"gate": str(gate)}, system_interval=0)
    live_state(run, ranks=2, timeout=120)
    logdir = tmp_path / "logs"
    assert cli("tensorboard", run.id, "--logdir", str(logdir)).returncode == 0
    for rank in (0, 1):
        assert [(s, v) for s, v, _ in read_back(logdir / run.id / f"rank-{rank}")["loss"]] == [
            (s, s + rank / 4) for s in range(3)
        ]
    assert set(session(logdir / run.id)) == {"start"}  # not ended yet

    follow = subprocess.Popen(
        [*CLI, "tensorboard", run.id, "--logdir", str(logdir), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = follow.stdout.readline()
    assert first == f"{run.id}: 0 values written to {logdir / run.id}\n"  # nothing new yet
    gate.touch()
    out, err = follow.communicate(timeout=120)
    assert follow.returncode == 0, err
    assert run.wait().status == "completed"
    assert out == f"{run.id} ended: 6 more values written\n"
    for rank in (0, 1):
        assert [(s, v) for s, v, _ in read_back(logdir / run.id / f"rank-{rank}")["loss"]] == [
            (s, s + rank / 4) for s in range(6)
        ]
    assert session(logdir / run.id)["end"].status == api_pb2.STATUS_SUCCESS


def get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def scalars(base: str, run: str, tag: str) -> list:
    query = urllib.parse.urlencode({"run": run, "tag": tag})
    try:
        return get(f"{base}data/plugin/scalars/scalars?{query}")
    except urllib.error.HTTPError:
        return []  # not loaded yet


def argv_of(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return []


def tensorboard_pids(home: Path) -> dict[int, list[str]]:
    """Processes of this test's store that are TensorBoard or its data server (their
    programs, not a path that happens to hold the word, as the test's own folder does):
    their argv."""
    found = {}
    for pid in procs.pids_with_env(HOME_ENV, str(home)):
        argv = argv_of(pid)
        if {"tensorboard.main", "jupyter_trainer.mirrors.tensorboard.tied"} & set(argv) or any(
            Path(a).name == "tensorboard" or "tensorboard_data_server" in a for a in argv
        ):
            found[pid] = argv
    return found


def tree(root: int) -> dict[int, int | None]:
    """Every descendant of ``root`` now: pid -> start time (to tell it from a later process
    that gets the same pid)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text() if name.isdigit() else ""
        except OSError:
            continue
        if stat:
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(name))
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = procs.start_ticks(child)
            todo.append(child)
    return found


def still_alive(processes: dict[int, int | None]) -> list[str]:
    return [procs.describe(p) for p, ticks in processes.items() if procs.is_alive(p, ticks)]


def served_folder(processes: dict[int, int | None]) -> Path:
    """The folder TensorBoard was started on (its ``--logdir``)."""
    argv = next(a for a in map(argv_of, processes) if "--logdir" in a)
    return Path(argv[argv.index("--logdir") + 1])


@pytest.mark.parametrize(
    "stop, code",
    [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGHUP, 130), (signal.SIGKILL, -9)],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"],
)
def test_cli_serves_a_live_run_and_leaves_no_process(home, tmp_path, stop, code):
    """Whichever way the command ends, TensorBoard and its data server end with it; killed
    (no handler runs), TensorBoard notices its parent is gone and ends itself."""
    gate = tmp_path / "go"
    run = api.submit(GATED, procs=2, name="served", params={"gate": str(gate)})
    live_state(run, ranks=2, timeout=120)
    server = subprocess.Popen(
        [*CLI, "tensorboard", run.id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("TensorBoard at http://127.0.0.1:"), (line, server.stderr.read())
        base = line.split()[2]
        assert base.endswith("/") and "(1 run; Ctrl-C stops it)" in line
        assert {f"{run.id}/rank-0", f"{run.id}/rank-1"} <= set(get(f"{base}data/runs"))
        wait_for(
            lambda: len(scalars(base, f"{run.id}/rank-1", "loss")) == 3,
            timeout=60,
            what="the first three steps served",
        )
        gate.touch()
        assert run.wait().status == "completed"
        served = wait_for(
            lambda: (
                (found := scalars(base, f"{run.id}/rank-1", "loss")) and len(found) == 6 and found
            ),
            timeout=60,
            what="all six steps served",
        )
        assert [(step, value) for _, step, value in served] == [(s, s + 0.25) for s in range(6)]
        started = tree(server.pid)  # TensorBoard and its data server
        assert any("tensorboard_data_server" in " ".join(argv_of(p)) for p in started), [
            procs.describe(p) for p in started
        ]
        folder = served_folder(started)
        assert sorted(p.name for p in folder.iterdir()) == [run.id, "tensorboard.log"]
    finally:
        server.send_signal(stop)
        server.wait(timeout=120)  # stop's own bounds: export thread 30 s, TensorBoard 15 s
    assert server.returncode == code
    wait_for(lambda: not still_alive(started), timeout=15, what="no process of TensorBoard's tree")
    assert not tensorboard_pids(home)
    assert not folder.exists()
    assert (home / "tensorboard" / run.id / ".jt-export.json").is_file()  # the export stays


def test_magic_shows_tensorboard_adds_runs_and_stops_it(ip, home, capsys, monkeypatch):
    html = ip.display_formatter.formatters["text/html"]  # as in a notebook's kernel
    monkeypatch.setattr(html, "enabled", True)
    monkeypatch.setattr(
        ip.display_formatter, "active_types", [*ip.display_formatter.active_types, "text/html"]
    )
    first = api.submit(KNOWN, procs=2, name="first", params=PARAMS, wait=True)
    second = api.submit(KNOWN, procs=1, name="second", wait=True)
    try:
        shown_and_stopped(ip, home, capsys, first, second)
    finally:
        stop_shared()


def shown_and_stopped(ip, home: Path, capsys, first: api.Run, second: api.Run) -> None:
    with capture_output() as shown:
        assert ip.run_cell(f"%train tensorboard {first.id}", store_history=True).success
    line = next(l for l in shown.stdout.splitlines() if l.startswith("TensorBoard at "))
    base = line.split()[2]
    assert f"with {first.id} (`%train tensorboard --stop` ends it)" in line
    assert any(
        base in out.data.get("text/html", "") and "<iframe" in out.data["text/html"]
        for out in shown.outputs
    )
    assert f"{first.id}/rank-1" in get(f"{base}data/runs")
    with capture_output() as shown:
        assert ip.run_cell(f"%train tensorboard {second.id}", store_history=True).success
    assert f"TensorBoard at {base} with {first.id}, {second.id}" in shown.stdout
    wait_for(
        lambda: f"{second.id}/rank-0" in get(f"{base}data/runs"),
        timeout=30,
        what="the second run served by the same TensorBoard",
    )
    assert (home / "tensorboard" / second.id / ".jt-export.json").is_file()

    capsys.readouterr()
    assert ip.run_cell("%train tensorboard --stop", store_history=True).success
    assert "TensorBoard stopped" in capsys.readouterr().out
    assert wait_for(lambda: not tensorboard_pids(home), timeout=15, what="no TensorBoard left")
    assert ip.run_cell("%train tensorboard --stop", store_history=True).success
    assert "no TensorBoard was running here" in capsys.readouterr().out


def test_without_tensorboard_the_error_names_the_extra(home):
    code = (
        "import sys; sys.modules['tensorboard'] = None\n"
        "from jupyter_trainer.frontends.cli import main\n"
        "sys.exit(main(['tensorboard', 'some-run', '--logdir', 'logs']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == 2
    assert "pip install jupyter_trainer[tensorboard]" in done.stderr, done.stderr


def test_tensorboard_of_a_killed_kernel_ends_with_it(home):
    """``%train tensorboard`` in a real kernel, then ``kill -9`` of the kernel: TensorBoard and
    its data server end too (no atexit runs in a killed process)."""
    from jupyter_client.manager import start_new_kernel

    run = api.submit(KNOWN, procs=2, name="kernel-tb", wait=True)
    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        reply = kc.execute_interactive(
            f"%load_ext jupyter_trainer\n%train tensorboard {run.id}", timeout=120
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        kernel = km.provisioner.pid
        started = tree(kernel)
        assert any("tensorboard_data_server" in " ".join(argv_of(p)) for p in started), [
            procs.describe(p) for p in started
        ]
        folder = served_folder(started)
        os.kill(kernel, signal.SIGKILL)
        wait_for(lambda: not km.is_alive(), timeout=30, what="the kernel to be gone")
        wait_for(
            lambda: not still_alive(started), timeout=15, what="no process of TensorBoard's tree"
        )
        assert not tensorboard_pids(home) and not folder.exists()
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
