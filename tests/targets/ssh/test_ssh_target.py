"""The ssh target against real sshd on two "hosts" (127.0.0.2 and 127.0.0.3), reached by
alias through an ssh config in a temporary HOME. Both hosts share this machine's process
table, so ``leftover(run.id)`` (the conftest check) sees the processes of both.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest
from conftest import (
    HOSTILE,
    RANKS_WRITE,
    check_shared_modes,
    launched_by,
    leftover,
    live_state,
    wait_for,
)
from support.hf_trainer import check_trainer_resumed, hf_code
from support.ssh_hosts import ADDRESSES, ALIASES, add_pair_target
from support.workloads import DDP_LINEAR, SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed, TargetError
from jupyter_trainer.core.spec import CodeSpec, EnvSpec, LaunchSpec, RunSpec
from jupyter_trainer.targets import get_target
from jupyter_trainer.targets.registry import add_target


def test_two_node_torchrun_gloo_training_streams_live(pair, home, tmp_path, launch_mode):
    add_target(
        "pair",
        "ssh",
        home=home,
        replace=True,
        hosts=list(ALIASES),
        workdir=str(tmp_path / "remote"),
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo", "JT_TEST_VAR": HOSTILE},
    )
    run = api.submit(
        "import time\n" + DDP_LINEAR,
        namespace={"steps": 30, "pause": 0.1},
        target="pair",
        nodes=2,
        procs=2,
        name="ssh-ddp",
    )
    # Live: events of every rank reach the local store while the run is still going.
    live = live_state(run, 4, timeout=120)
    assert live["status"] == "running"
    run.wait(timeout=180)
    state = run.state
    assert state["status"] == "completed", state.get("error")
    assert launched_by(run) == launch_mode
    remote = str(tmp_path / "remote" / "runs" / run.id)
    for rank in range(4):
        log = run.logs(rank)
        assert (
            f"rank {rank} of 4 node n{rank // 2 + 1} sum 10.0 learned True dir {remote} "
            f"var {HOSTILE}"
        ) in log, log
        assert [s for s, _ in run.metrics(rank)["loss"]] == list(range(30))
    nodes = state["launcher"]["nodes"]
    assert [(n["host"], n["address"]) for n in nodes] == list(zip(ALIASES, ADDRESSES))
    assert all(n["pgid"] and n["launcher"] for n in nodes)
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []
    assert set(state["teardown"]["nodes"]) == set(ALIASES)
    assert (run.outputs / "model.pt").stat().st_size > 0
    assert {p.name for p in run.outputs.iterdir()} >= {f"from-rank-{r}.txt" for r in range(4)}
    launcher_log = (run.store.existing(run.id).logs / "launcher.log").read_text()
    assert "[jt] pre-flight of 2 node(s)" in launcher_log and "[n2] " in launcher_log
    assert not os.path.exists("/tmp/pwned")


def test_unchanged_snapshot_is_not_sent_again(pair, home, tmp_path):
    """Each host has its own workdir here, so staging really copies to both."""
    dirs = [tmp_path / "w1", tmp_path / "w2"]
    add_target(
        "apart",
        "ssh",
        home=home,
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo"},
        hosts=[{"host": a, "workdir": str(d)} for a, d in zip(ALIASES, dirs)],
    )
    code = "from jupyter_trainer import runtime as jt\nprint('hello from', jt.rank, flush=True)\n"
    first = api.submit(code, target="apart", nodes=2, procs=1, name="stage-1").wait(timeout=120)
    staging = first.state["launcher"]["staging"]
    assert staging["sent_to"] == list(ALIASES) and staging["bytes"] > 0
    snap = staging["snapshot"]
    copies = [d / "snapshots" / snap for d in dirs]
    before = [(c.stat().st_ino, c.stat().st_mtime_ns) for c in copies]
    assert all(
        (c / "_jt" / "cell.py").read_text()
        == (first.store.existing(first.id).code / "_jt" / "cell.py").read_text()
        for c in copies
    )
    second = api.submit(code, target="apart", nodes=2, procs=1, name="stage-2").wait(timeout=120)
    staging = second.state["launcher"]["staging"]
    assert staging["snapshot"] == snap
    assert staging["sent_to"] == [] and staging["already_on"] == list(ALIASES)
    assert [(c.stat().st_ino, c.stat().st_mtime_ns) for c in copies] == before
    assert "hello from 1" in second.logs(1)
    changed = api.submit(code + "#\n", target="apart", nodes=2, procs=1, name="stage-3")
    assert changed.wait(timeout=120).state["launcher"]["staging"]["sent_to"] == list(ALIASES)


def sessions_started(hosts) -> list[int]:
    """How many sessions each sshd has started so far (its VERBOSE log says each)."""
    return [
        (hosts.root / f"sshd-{a}.log").read_text().count("Starting session:") for a in ADDRESSES
    ]


def test_a_run_logs_in_once_per_node(pair, home, tmp_path):
    """Pre-flight, staging, start, follow, the end and the discard of the working
    directories all go through one session per node (nodes/session.py)."""
    dirs = [tmp_path / "s1", tmp_path / "s2"]
    add_target(
        "apart",
        "ssh",
        home=home,
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo"},
        hosts=[{"host": a, "workdir": str(d)} for a, d in zip(ALIASES, dirs)],
    )
    code = (
        "from jupyter_trainer import runtime as jt\nopen('scratch', 'w').write('x')\n"
        "jt.log(step=0, x=1)\nprint('rank', jt.rank, flush=True)\n"
    )
    before = sessions_started(pair)
    run = api.submit(code, target="apart", nodes=2, procs=1).wait(timeout=120)
    state = run.state
    assert state["launcher"]["staging"]["sent_to"] == list(ALIASES)  # staged in the session
    assert sorted(state["workdirs"]["removed"]) == [
        f"{a}:{d}/runs/{run.id}/work" for a, d in zip(ALIASES, dirs)
    ]
    assert not any((d / "runs" / run.id / "work").exists() for d in dirs)
    assert [run.logs(r) for r in (0, 1)] == ["rank 0\n", "rank 1\n"]
    assert [a - b for a, b in zip(sessions_started(pair), before)] == [1, 1]


def test_cancel_mid_run_leaves_nothing_on_either_host(pair, home, launch_mode):
    run = api.submit(SLEEPER, target="pair", nodes=2, procs=2, name="ssh-cancel")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    assert launched_by(run) == launch_mode
    assert run.status == "running" and len(leftover(run.id)) >= 4
    started = time.monotonic()
    run.cancel(timeout=60)
    assert time.monotonic() - started < 30
    state = run.state
    assert state["status"] == "canceled"
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []
    assert set(state["teardown"]["nodes"]) == set(ALIASES)
    assert sorted(state["rank_exit_codes"]) == ["0", "1", "2", "3"]


def test_a_rank_failing_on_node_1_fails_the_run_and_stops_node_0(pair, home, launch_mode):
    code = (
        "import os, time, torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
        "dist.init_process_group()\n"
        "if os.environ['JT_NODE_RANK'] == '1' and jt.local_rank == 0:\n"
        "    raise KeyError('missing column on ' + os.environ['JT_NODE'])\n"
        "time.sleep(600)\n"
    )
    run = api.submit(code, target="pair", nodes=2, procs=2, name="ssh-fail")
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=180)
    rank = info.value.failed_rank
    assert launched_by(run) == launch_mode and rank == 2
    assert "KeyError: 'missing column on n2'" in str(info.value)
    assert "missing column on n2" in run.logs(rank)
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_unreachable_host_fails_fast_naming_it(pair, home, user_home):
    with open(user_home / ".ssh" / "config", "a") as fh:
        fh.write("\nHost down\n  HostName 127.0.0.4\n  Port 9\n")
    add_target("broken", "ssh", home=home, hosts=["n1", "down"], connect_timeout=3)
    started = time.monotonic()
    run = api.submit("print(1)", target="broken", nodes=2, procs=1, name="ssh-down")
    with pytest.raises(RunFailed, match=r"node down: pre-flight failed: it refused the connection"):
        run.wait(timeout=60)
    assert time.monotonic() - started < 30
    state = run.state
    assert (state["status"] == "failed" and "launcher" not in state) or not state["launcher"].get(
        "nodes"
    )
    assert "running" not in state["stages"]  # stopped while preparing: nothing launched


def test_a_host_that_never_answers_fails_within_the_connect_timeout(pair, home, user_home):
    """A host that accepts the connection and then says nothing (a black hole)."""
    server = socket.socket()
    server.bind(("127.0.0.4", 0))
    server.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        with open(user_home / ".ssh" / "config", "a") as fh:
            fh.write(f"\nHost silent\n  HostName 127.0.0.4\n  Port {server.getsockname()[1]}\n")
        add_target("silent", "ssh", home=home, hosts=["silent"], connect_timeout=2)
        started = time.monotonic()
        run = api.submit("print(1)", target="silent", launcher="python", name="ssh-silent")
        with pytest.raises(RunFailed, match="node silent"):
            run.wait(timeout=60)
        assert time.monotonic() - started < 20
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def test_wrong_credentials_name_the_node(pair, home, user_home):
    pair.write_home(user_home, key=pair.wrong_key)
    run = api.submit("print(1)", target="pair", nodes=2, procs=1, name="ssh-auth")
    with pytest.raises(
        RunFailed, match=r"node n1: pre-flight failed: authentication failed"
    ) as info:
        run.wait(timeout=60)
    assert "node n2" in str(info.value)  # every node that failed is named


def test_missing_interpreter_on_one_node(pair, home, tmp_path):
    add_target(
        "nopy",
        "ssh",
        home=home,
        connect_timeout=5,
        workdir=str(tmp_path / "remote"),
        hosts=["n1", {"host": "n2", "python": "/nonexistent/bin/python3"}],
    )
    run = api.submit("print(1)", target="nopy", nodes=2, procs=1, name="ssh-nopy")
    with pytest.raises(
        RunFailed,
        match=r"node n2: the interpreter /nonexistent/bin/python3 "
        r"was not found",
    ):
        run.wait(timeout=60)


def test_gpu_count_is_checked_on_every_node(pair, home, tmp_path):
    for address, count in zip(ADDRESSES, (2, 1)):
        smi = pair.bin_dir(address) / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n" + "".join(f"echo 'GPU {i}: Fake (UUID: GPU-{i})'\n" for i in range(count))
        )
        smi.chmod(0o755)
    try:
        add_target(
            "gpus",
            "ssh",
            home=home,
            hosts=list(ALIASES),
            gpus_per_node=2,
            workdir=str(tmp_path / "remote"),
        )
        run = api.submit("print(1)", target="gpus", nodes=2, procs=2, name="ssh-gpus")
        with pytest.raises(RunFailed) as info:
            run.wait(timeout=60)
        assert "node n2 (" in str(info.value) and "1 GPU(s) found, gpus_per_node is 2" in str(
            info.value
        )
        assert "node n1" not in str(info.value)
    finally:
        for address in ADDRESSES:
            (pair.bin_dir(address) / "nvidia-smi").unlink()


def test_node_lost_mid_run_fails_within_bounded_time(pair, home, tmp_path):
    add_pair_target("pair", home, tmp_path, replace=True, connect_timeout=3, node_timeout=5)
    run = api.submit(SLEEPER, target="pair", nodes=2, procs=1, name="ssh-lost")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(2)),
        timeout=120,
        what="both ranks to log",
    )
    node = run.state["launcher"]["nodes"][1]
    started = time.monotonic()
    pair.kill_node(ADDRESSES[1])  # the host's sshd and every session ...
    os.killpg(node["pgid"], signal.SIGKILL)  # ... and what ran there: the node is gone
    with pytest.raises(RunFailed, match=r"node n2 \(127\.0\.0\.3\) was lost"):
        run.wait(timeout=90)
    assert time.monotonic() - started < 45
    teardown = run.state["teardown"]
    assert "error" in teardown["nodes"]["n2"]  # it could not be asked ...
    assert any(line.startswith("n2: not verified") for line in teardown["leftovers"])
    assert leftover(run.id) == []  # ... and node 0 ended its ranks


def test_network_blip_loses_no_events(pair, home):
    code = (
        "import time\nfrom jupyter_trainer import runtime as jt\n"
        "for step in range(60):\n    jt.log(step=step, x=step)\n    print('step', step, flush=True)\n"
        "    time.sleep(0.1)\n"
    )
    run = api.submit(code, target="pair", nodes=2, procs=1, name="ssh-blip")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(2)),
        timeout=120,
        what="both ranks to log",
    )
    cut = pair.drop_connections(ADDRESSES[0]) + pair.drop_connections(ADDRESSES[1])
    assert cut >= 2
    run.wait(timeout=120)
    for rank in range(2):
        assert [s for s, _ in run.metrics(rank)["x"]] == list(range(60))
        assert run.logs(rank).count("step 59\n") == 1
    launcher_log = (run.store.existing(run.id).logs / "launcher.log").read_text()
    assert "connection lost" in launcher_log and "resumed from offsets" in launcher_log


def test_target_checks_before_anything_is_created(pair, home):
    with pytest.raises(TargetError, match="has 2 host"):
        api.submit("print(1)", target="pair", nodes=3, procs=1)
    with pytest.raises(TargetError, match="--backend nccl needs GPUs"):
        api.submit("print(1)", target="pair", nodes=2, procs=1, backend="nccl")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    target = get_target("pair", home)
    assert target.describe()["hosts"] == list(ALIASES)
    spec = RunSpec(
        name="x",
        code=CodeSpec(entry="_jt/cell.py", hash="sha256:0"),
        launch=LaunchSpec(nodes=2, procs=1),
        env=EnvSpec(image="nvcr.io/x:1"),
    )
    with pytest.raises(TargetError, match="cannot run the container image"):
        target.check(spec)


def test_a_dead_supervisor_does_not_leave_the_run_on_the_nodes(pair, home, tmp_path):
    """Like a local run whose supervisor dies, the nodes end the run: nobody follows it any
    more, so after orphan_timeout each node's keeper stops its launcher."""
    add_target(
        "pair",
        "ssh",
        home=home,
        replace=True,
        hosts=list(ALIASES),
        workdir=str(tmp_path / "remote"),
        orphan_timeout=10,
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    run = api.submit(SLEEPER, target="pair", nodes=2, procs=1, name="ssh-orphan")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(2)),
        timeout=120,
        what="both ranks to log",
    )
    os.kill(run.state["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: leftover(run.id) == [], timeout=60, what="the nodes to end the run")
    assert run.status == "lost"
    folder = tmp_path / "remote" / "runs" / run.id
    exits = wait_for(
        lambda: len(found := sorted(folder.glob("node-*.exit"))) == 2 and found,
        timeout=10,
        what="both keepers to record the end",
    )
    assert any('"orphaned": true' in p.read_text() for p in exits)


def test_a_notebook_cell_runs_on_two_nodes(pair, home):
    """The whole path from a %%train cell in a real IPython shell to two ssh nodes."""
    from IPython.testing import globalipapp

    globalipapp.start_ipython()
    shell = globalipapp.get_ipython()
    shell.run_cell("%load_ext jupyter_trainer")
    shell.run_cell("steps = 5\npause = 0.0")
    result = shell.run_cell(
        "%%train --target pair --nodes 2 --procs 1 --name ssh-cell\n"
        "import time, torch, torch.distributed as dist\n"
        "from jupyter_trainer import runtime as jt\n"
        "dist.init_process_group()\n"
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n"
        "for step in range(steps):\n"
        "    jt.log(step=step, world=t.item())\n"
        "    time.sleep(pause)\n"
        "print('sum', t.item())\n"
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed" and run.spec.params == {"steps": 5, "pause": 0.0}
    assert [v for _, v in run.metrics(rank=1)["world"]] == [2.0] * 5
    assert "sum 2.0" in run.logs(0) and "sum 2.0" in run.logs(1)
    assert leftover(run.id) == []


def test_resume_on_the_ssh_target_starts_a_trainer_from_its_checkpoint(pair, home):
    """A transformers Trainer's checkpoint folder, written on the node, comes back with the
    run and is sent to node 0 of the resumed run, where the Trainer resumes from it."""

    params = {"max_steps": 4, "export": False}
    old = api.submit(hf_code(), target="pair", nodes=1, procs=1, params=params, wait=True)
    kept = old.path / "checkpoints" / "out" / "checkpoint-4"
    assert (kept / "trainer_state.json").is_file()  # collected from the node
    new = api.resume(old.id, params={"max_steps": 8}, target="pair", wait=True)
    check_trainer_resumed(old, new)
    assert leftover(new.id) == []


def test_a_check_on_two_ssh_nodes_measures_the_link_between_them(pair, home):
    from jupyter_trainer.api.check import check

    result = check("pair", nodes=2, procs=1, max_bytes=1 << 20, time_limit=60)
    assert result.ok, result.problems
    assert sorted(result.joined) == [0, 1]
    (link,) = result.links
    assert link["nodes"] == [0, 1]
    assert link["bandwidth_GBps"] > 0 and link["latency_us"] > 0
    assert result.slowest_link == link
    assert {result.ranks[r]["rendezvous"].split(":")[0] for r in (0, 1)} == {ADDRESSES[0]}
    assert leftover(result.run.id) == []


def test_what_the_nodes_write_in_a_shared_workspace_keeps_its_modes(
    pair, home, pg_url, monkeypatch
):
    """The ranks on two ssh nodes write files that reach the store through the supervisor:
    in a shared workspace, the group reads them and nobody else, whatever the user's umask."""
    monkeypatch.setenv("JUPYTER_TRAINER_INDEX", pg_url)
    old = os.umask(0o002)  # a user whose umask would let the group write
    try:
        run = api.submit(RANKS_WRITE, target="pair", nodes=2, procs=1, name="shared")
    finally:
        os.umask(old)
    run.wait(timeout=180)
    assert run.status == "completed", run.logs()
    assert sorted(p.name for p in (run.outputs / "deep").iterdir()) == [
        "rank-0.txt",
        "rank-1.txt",
    ]
    assert check_shared_modes(run.path) > 10
    assert "step-0" in {p.stem for p in (run.path / "checkpoints").iterdir()}
    assert leftover(run.id) == []
