"""Preemption on this machine: ``Run.preempt`` (``jupyter-trainer preempt``) tells every rank
(SIGUSR1, ``jt.preempted()``), the ranks checkpoint and return, the attempt ends as
``preempted`` and the next one resumes from the newest complete checkpoint
(``supervisor/preemption.py``, ``rankside/rank/preemption.py``), with real torchrun ranks on
Gloo. A run preempted once ends with the same weights as one never preempted; a checkpoint
being written when a rank was killed is never the one resumed from."""

from __future__ import annotations

import json

import torch
from conftest import leftover, wait_for
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.rank.dcp_complete import complete

TRAIN = """
import os, signal, time
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"model": model.state_dict(), "step": 0}
start = jt.checkpoint.load(state) or 0
print(f"attempt {jt.attempt} starts after step {start}", flush=True)
for step in range(start + 1, 31):
    torch.manual_seed(1000 * step + jt.rank)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
    jt.progress(step, 30)
    stop = torch.tensor(int(jt.preempted()))
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank stops at the same step
    if stop and jt.params.get("die") and jt.attempt == 0:  # the newest step, never whole:
        jt.checkpoint.save({"model": model.state_dict(), "step": step}, 1000)
        if jt.rank == 1:  # the node dies while this rank writes its part
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    if step % 2 == 0 or stop:
        jt.checkpoint.save({"model": model.state_dict(), "step": step}, step)
    if stop:
        break
    time.sleep(jt.params.get("pause", 0))
jt.checkpoint.wait()
if jt.rank == 0 and not stop:
    torch.save(model.module.state_dict(), jt.outputs_dir / "final.pt")
dist.destroy_process_group()
"""


def submit(name: str, **params):
    return api.submit(TRAIN, procs=2, name=name, params=params, hot=False)


def saved_steps(run) -> list[int]:
    return [step for step, _ in complete(str(run.path / "checkpoints" / "dcp"))]


def ended(run):
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "completed", (run.state.get("error"), run.logs(0)[-3000:])
    assert leftover(run.id) == []
    return json.loads((run.path / "state.json").read_text())


def test_a_preempted_run_resumes_and_ends_as_one_never_preempted(home):
    plain = submit("plain")
    ended(plain)
    run = submit("preempted", pause=0.2)
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 60, what="a checkpoint at step 4")
    done = cli("preempt", run.id, "--grace", "30")
    assert done.returncode == 0, done.stderr
    state = ended(run)
    [entry] = state["preemptions"]
    step = entry["step"]
    assert isinstance(step, int) and 4 <= step < 30 and not entry["killed"], entry
    assert entry["announced_ranks"] == [0, 1] and entry["resumed_attempt"] == 1, entry
    said = f"attempt 1 preempted at step {step}, resumed at step {step} on attempt 2"
    assert done.stdout.strip() == f"run {run.id}: {said}"
    assert f"attempt 1 starts after step {step}" in run.logs(0)
    assert said in cli("show", run.id).stdout
    final, expected = (torch.load(r.path / "outputs" / "final.pt") for r in (run, plain))
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[k], expected[k]) for k in final)


def test_a_checkpoint_half_written_when_a_rank_died_is_never_resumed_from(home):
    run = submit("died", pause=0.2, die=True)
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 60, what="a checkpoint at step 4")
    entry = run.preempt(grace=10)
    assert entry is not None
    state = ended(run)
    [entry] = state["preemptions"]
    folder = run.path / "checkpoints" / "dcp" / "step-1000"
    assert folder.is_dir() and not (folder / "done.1").exists()  # rank 1 died first
    assert entry["step"] < 30 and entry["resumed_step"] == entry["step"], entry
    assert f"attempt 1 starts after step {entry['step']}" in run.logs(0)
