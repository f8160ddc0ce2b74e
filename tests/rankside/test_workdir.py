"""Each node's private working directory (``<run>/work/node-<n>/``), ``./outputs`` and
``./logs``, the snapshot's integrity check and the scratch rule, on the local target, on
two ssh hosts (real sshd, tests/support/ssh_hosts.py) and on a real single-host Slurm.

The checkpoint test follows pytorch/examples' ``distributed/ddp-tutorial-series/
multigpu_torchrun.py``: it saves ``snapshot.pt`` in its working directory and resumes from
it when the file is there, so a later run of the same code must start fresh.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support.ssh_hosts import ALIASES

from jupyter_trainer.api import runs as api
from jupyter_trainer.capture.snapshot import hash_snapshot
from jupyter_trainer.core.errors import RunFailed
from jupyter_trainer.frontends.views.text import summary_text
from jupyter_trainer.targets.registry import add_target

# multigpu_torchrun.py's pattern, without the model: resume from ./snapshot.pt if present.
CHECKPOINT = """
import os
from pathlib import Path
from jupyter_trainer import runtime as jt
found = Path("snapshot.pt").read_text() if os.path.exists("snapshot.pt") else None
print("rank", jt.rank, "in", os.getcwd(), "found the checkpoint of", found, flush=True)
if jt.local_rank == 0:
    Path("snapshot.pt").write_text(jt.run_id)
os.makedirs("outputs", exist_ok=True)
Path(f"outputs/model-{jt.rank}.pt").write_text(jt.run_id)
Path(f"logs/train-{jt.rank}.txt").write_text(f"rank {jt.rank} log")
"""
SLEEPER = (
    "import time\nfrom pathlib import Path\nfrom jupyter_trainer import runtime as jt\n"
    "Path('scratch.tmp').write_text('x')\njt.log(step=0, up=1)\ntime.sleep(600)\n"
)
TAMPER = (
    "import os\nopen(os.path.join(os.environ['JT_RUN_DIR'], 'code', 'planted.txt'), 'w')"
    ".write('x')\nopen('scratch.tmp', 'w').write('kept for inspection')\n"
)


def started_fresh(run, rank: int, workdir: Path) -> bool:
    """The rank ran in ``workdir`` and found no checkpoint but its own run's (the other rank
    of its node may have written it first)."""
    found = re.search(r"rank \d+ in (.*) found the checkpoint of (\S+)", run.logs(rank))
    assert found, run.logs(rank)
    return found.group(1) == str(workdir) and found.group(2) in ("None", run.id)


def snapshot_files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def work(run) -> Path:
    return run.store.existing(run.id).root / "work"


# -- local ------------------------------------------------------------------------------------


def test_a_second_run_of_the_same_code_starts_fresh_locally(home):
    first = api.submit(CHECKPOINT, procs=2, launcher="torchrun", name="ckpt").wait(timeout=120)
    code = first.store.existing(first.id).code
    before = snapshot_files(code)
    second = api.submit(CHECKPOINT, procs=2, launcher="torchrun", name="ckpt").wait(timeout=120)
    assert second.spec.code.hash == first.spec.code.hash
    for run in (first, second):
        workdir = work(run) / "node-0"
        for rank in (0, 1):
            assert started_fresh(run, rank, workdir)
            assert (run.outputs / f"model-{rank}.pt").read_text() == run.id
            logs = run.store.existing(run.id).logs / "user"
            assert (logs / f"train-{rank}.txt").read_text() == f"rank {rank} log"
        assert run.state["snapshot"] == {"hash": run.spec.code.hash, "intact": True}
    assert snapshot_files(code) == before and "snapshot.pt" not in before
    assert hash_snapshot(code) == first.spec.code.hash


def test_ranks_of_a_node_share_one_copy_made_once(home):
    code = (
        "import os, time\nfrom jupyter_trainer import runtime as jt\n"
        "print('cwd', os.getcwd(), 'file', __file__, flush=True)\n"
    )
    run = api.submit(code, procs=2, launcher="mpirun", name="share").wait(timeout=120)
    workdir = work(run) / "node-0"
    for rank in (0, 1):
        assert f"cwd {workdir} file {workdir}/_jt/cell.py" in run.logs(rank)
    records = [
        json.loads((run.store.existing(run.id).ranks / f"rank-{r}.json").read_text())
        for r in (0, 1)
    ]
    made = [r["workdir"] for r in records if r["workdir"].get("created")]
    assert len(made) == 1 and all(r["workdir"]["path"] == str(workdir) for r in records)
    assert made[0]["files"] == run.spec.code.files
    assert set(made[0]["copied_by"]) <= {"reflink", "copy_file_range", "copy"}


def test_writes_next_to_the_script_stay_in_the_copy(home, tmp_path):
    """Appending to its own file (``__file__``) changes the node's copy, never the snapshot:
    the copy is not a hardlink, which root could write through."""
    source = tmp_path / "src"
    (source / "outputs").mkdir(parents=True)
    (source / "outputs" / "from-source.txt").write_text("not an output of the run")
    (source / "train.py").write_text(
        "import os\nfrom pathlib import Path\n"
        "with open(__file__, 'a') as f:\n    f.write('# CHANGED ' + 'BY THE RUN\\n')\n"
        "Path(__file__).with_name('side.txt').write_text('scratch')\n"
        "print('outputs is a link:', os.path.islink('outputs'), sorted(os.listdir('outputs')))\n"
        "Path('outputs/model.pt').write_bytes(b'weights')\n"
        "raise SystemExit(3)\n"
    )
    run = api.submit(script=source / "train.py", source=source, name="own-file")
    with pytest.raises(RunFailed):
        run.wait(timeout=120)
    code = run.store.existing(run.id).code
    assert "# CHANGED BY THE RUN" not in (code / "train.py").read_text()
    assert not (code / "side.txt").exists() and hash_snapshot(code) == run.spec.code.hash
    assert run.state["snapshot"]["intact"] is True
    assert "outputs is a link: True []" in run.logs(0)
    assert sorted(p.name for p in run.outputs.iterdir()) == ["model.pt"]
    # The run failed: its working directory is kept for inspection.
    copy = work(run) / "node-0"
    assert "# CHANGED BY THE RUN" in (copy / "train.py").read_text()
    assert (copy / "side.txt").read_text() == "scratch"
    assert run.state["workdirs"] == {"kept": True}


def test_a_script_writing_into_the_snapshot_is_reported(home):
    run = api.submit(TAMPER, name="tamper").wait(timeout=120)
    snapshot = run.state["snapshot"]
    assert snapshot["intact"] is False and snapshot["hash"] == run.spec.code.hash
    assert list(snapshot["changed"]) == ["code/"]
    assert snapshot["changed"]["code/"] == hash_snapshot(run.store.existing(run.id).code)
    follower = run.follower()
    follower.poll()
    assert "the run changed its code snapshot: code/" in summary_text(follower)
    assert not work(run).exists() and run.state["workdirs"]["kept"] is False


def test_scratch_is_removed_when_canceled_and_after_a_completed_run(home):
    run = api.submit(SLEEPER, name="scratch")
    wait_for(
        lambda: (work(run) / "node-0" / "scratch.tmp").exists(), timeout=60, what="the scratch file"
    )
    run.cancel(timeout=30)
    assert run.status == "canceled" and leftover(run.id) == []
    assert not work(run).exists()
    assert run.state["workdirs"] == {"kept": False, "removed": [str(work(run))]}
    done = api.submit("open('scratch.tmp', 'w').write('x')\n", name="scratch-done")
    done.wait(timeout=60)
    assert not work(done).exists() and (done.store.existing(done.id).code).is_dir()


# -- ssh ----------------------------------------------------------------------------------------


def test_second_run_on_ssh_hosts_does_not_see_the_first_ones_checkpoint(pair, home, tmp_path):
    """Each host has its own workdir, as nodes with their own disks do."""
    dirs = [tmp_path / "w1", tmp_path / "w2"]
    add_target(
        "apart",
        "ssh",
        home=home,
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo"},
        hosts=[{"host": a, "workdir": str(d)} for a, d in zip(ALIASES, dirs)],
    )
    runs = [
        api.submit(CHECKPOINT, target="apart", nodes=2, procs=1, name="ssh-ckpt").wait(timeout=180)
        for _ in range(2)
    ]
    first, second = runs
    assert second.state["launcher"]["staging"]["already_on"] == list(ALIASES)
    snap = first.state["launcher"]["staging"]["snapshot"]
    local = snapshot_files(first.store.existing(first.id).code)
    assert "snapshot.pt" not in local
    assert all(snapshot_files(d / "snapshots" / snap) == local for d in dirs)
    for run in runs:
        remotes = [d / "runs" / run.id for d in dirs]
        for rank in (0, 1):
            assert started_fresh(run, rank, remotes[rank] / "work" / f"node-{rank}")
            assert (run.outputs / f"model-{rank}.pt").read_text() == run.id
            assert (run.store.existing(run.id).logs / "user" / f"train-{rank}.txt").exists()
        snapshot = run.state["snapshot"]
        assert snapshot == {"hash": run.spec.code.hash, "intact": True}
        assert not any((r / "work").exists() for r in remotes)
        assert run.state["workdirs"]["removed"] == [
            f"{h}:{r}/work" for h, r in zip(ALIASES, remotes)
        ]
        collected = run.state["teardown"]["collected"]["nodes"]
        assert {f for n in collected.values() for f in n.get("logs", [])} == {
            "train-0.txt",
            "train-1.txt",
        }


def test_mpirun_across_two_ssh_nodes_gives_each_node_its_own_directory(pair, home, tmp_path):
    run = api.submit(
        "import os\nprint('cwd', os.getcwd(), flush=True)\n",
        target="pair",
        nodes=2,
        procs=2,
        launcher="mpirun",
        name="ssh-mpi-work",
    )
    run.wait(timeout=180)
    remote = tmp_path / "remote" / "runs" / run.id
    ranks = run.store.existing(run.id).ranks
    for rank in range(4):
        workdir = remote / "work" / f"node-{rank // 2}"
        assert f"cwd {workdir}" in run.logs(rank)
        record = json.loads((ranks / f"rank-{rank}.json").read_text())
        assert record["workdir"]["path"] == str(workdir)
    assert not (remote / "work").exists()


def test_a_node_writing_into_its_shared_snapshot_is_reported(pair, home, tmp_path):
    code = (
        "import os\nimport torch.distributed as dist\n"
        "print('planted before:', os.path.exists('planted.txt'), flush=True)\n"
        "dist.init_process_group('gloo')\ndist.barrier()\n"  # every node has its copy
        + TAMPER
        + "raise SystemExit(1)\n"
    )
    run = api.submit(code, target="pair", nodes=2, procs=1, name="ssh-tamper")
    with pytest.raises(RunFailed):
        run.wait(timeout=180)
    snap = run.state["launcher"]["staging"]["snapshot"]
    shared = Path(os.path.realpath(tmp_path / "remote" / "snapshots" / snap))
    assert (shared / "planted.txt").exists()  # what the run did, found and reported
    snapshot = run.state["snapshot"]
    assert snapshot["intact"] is False
    assert sorted(snapshot["changed"]) == [f"{h}:{shared}" for h in ALIASES]
    assert hash_snapshot(run.store.existing(run.id).code) == run.spec.code.hash
    remote = tmp_path / "remote" / "runs" / run.id
    for node in (0, 1):  # failed: both nodes keep their working directory
        assert (remote / "work" / f"node-{node}" / "scratch.tmp").exists()
    assert run.state["workdirs"] == {"kept": True}

    # The changed copy is never reused: the next run of the same code sets it aside and is
    # staged a whole one, so its working directory does not hold what the first run planted.
    rerun = api.submit(code, target="pair", nodes=2, procs=1, name="ssh-tamper")
    with pytest.raises(RunFailed):
        rerun.wait(timeout=180)
    assert rerun.spec.code.hash == run.spec.code.hash
    staging = rerun.state["launcher"]["staging"]
    assert staging["sent_to"] == list(ALIASES)
    aside = set(staging["changed_copies_set_aside"].values())
    assert len(aside) == 1 and (Path(aside.pop()) / "planted.txt").exists()
    for r in (run, rerun):
        for rank in (0, 1):
            assert "planted before: False" in r.logs(rank)


# -- slurm --------------------------------------------------------------------------------------


def test_outputs_and_logs_on_slurm(cluster, home):
    run = api.submit(CHECKPOINT, target="cluster", procs=2, launcher="mpirun", name="slurm-out")
    run.wait(timeout=120)
    for rank in (0, 1):
        assert started_fresh(run, rank, work(run) / "node-0")
        assert (run.outputs / f"model-{rank}.pt").read_text() == run.id
        assert (run.store.existing(run.id).logs / "user" / f"train-{rank}.txt").exists()
    assert run.state["snapshot"] == {"hash": run.spec.code.hash, "intact": True}
    assert not work(run).exists()


def test_outputs_and_logs_come_back_from_a_slurm_workdir(cluster, home, tmp_path):
    shared = tmp_path / "shared"
    (home / "targets.toml").write_text(
        '[targets.apart]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\n'
        f"workdir = {json.dumps(str(shared))}\n"
    )
    run = api.submit(CHECKPOINT, target="apart", procs=2, launcher="mpirun", name="slurm-apart")
    run.wait(timeout=120)
    remote = shared / "runs" / run.id
    for rank in (0, 1):
        assert started_fresh(run, rank, remote / "work" / "node-0")
        assert (run.outputs / f"model-{rank}.pt").read_text() == run.id
        assert (run.store.existing(run.id).logs / "user" / f"train-{rank}.txt").read_text() == (
            f"rank {rank} log"
        )
    snapshot = run.state["snapshot"]
    assert snapshot["intact"] is True and "unverified" not in snapshot
    assert [where.split(":", 1)[1] for where in snapshot.get("changed", {})] == []
    assert not (remote / "work").exists() and os.path.islink(remote / "code")
