"""What Hugging Face code saves stays with the run and nowhere else (``rankside/frameworks/hf_hooks.py``,
``rankside/frameworks/accelerate_state.py``): Accelerate's ``save_state`` into a relative folder is kept
in the run's ``checkpoints/``, a restart's ``load_state`` finds it and ``resume`` carries it
into the new run, and a transformers
``Trainer`` leaves no ``output_dir`` behind in the working folder."""

from __future__ import annotations

from conftest import leftover
from support.hf_trainer import hf_code

from jupyter_trainer.api import runs as api

ACCELERATE = """
import os, signal
import torch
from accelerate import Accelerator
from jupyter_trainer import runtime as jt

class Progress:
    def __init__(self):
        self.step = 0
    def state_dict(self):
        return {"step": self.step}
    def load_state_dict(self, state):
        self.step = state["step"]

accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
progress = Progress()
accelerator.register_for_checkpointing(progress)
accelerator.load_state()  # the newest state of this run: none on a first start
print("first step", progress.step + 1, "attempt", jt.attempt, flush=True)
x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
while progress.step < 8:
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    progress.step += 1
    accelerator.log({"loss": loss.item()}, step=progress.step)
    if progress.step % 4 == 0:
        accelerator.save_state(f"state/step_{progress.step}")
    if jt.attempt == 0 and jt.rank == 1 and progress.step == 6:
        os.kill(os.getpid(), signal.SIGKILL)
accelerator.wait_for_everyone()
accelerator.load_state("state/step_8")
print("in the working folder", sorted(os.listdir(".")), flush=True)
"""


def test_a_restarted_accelerate_loop_resumes_from_its_saved_state_kept_in_the_run(home):
    run = api.submit(ACCELERATE, procs=2, max_restarts=1, name="acc")
    run.wait(timeout=300)
    assert run.status == "completed", run.logs(1)[-3000:]
    first, _ = run.state["attempts"]
    assert first["failed_rank"] == 1 and "SIGKILL" in first["error"], first
    kept = run.path / "checkpoints" / "state"
    log = run.logs(0)
    assert "first step 1 attempt 0" in log
    assert f"resuming Accelerate from {kept / 'step_4'}" in log, log[-3000:]
    assert "first step 5 attempt 1" in log
    assert "'state'" not in log  # nothing saved into the working folder
    assert sorted(p.name for p in kept.iterdir()) == ["step_4", "step_8"]
    assert (kept / "step_8" / "custom_checkpoint_0.pkl").is_file()
    assert [s for s, _ in run.metrics(0)["loss"]][-4:] == [5, 6, 7, 8]
    assert leftover(run.id) == []

    again = api.resume(run.id, wait=True)  # the newest state comes along, at the same place
    assert again.status == "completed", again.logs(0)[-3000:]
    assert again.spec.lineage == {"resumed_from": run.id, "checkpoint": "state/step_8"}
    moved = again.path / "checkpoints" / "state" / "step_8"
    assert f"resuming Accelerate from {moved}" in again.logs(0), again.logs(0)[-3000:]
    assert "first step 9 attempt 0" in again.logs(0)
    assert leftover(again.id) == []


def test_a_trainer_leaves_no_output_dir_in_the_working_folder(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = hf_code() + '\nprint("out in the working folder:", os.path.exists("out"), flush=True)\n'
    run = api.submit(code, procs=1, launcher="python", params={"max_steps": 2}, wait=True)
    assert run.status == "completed", run.logs(0)[-3000:]
    assert "out in the working folder: False" in run.logs(0)
    assert not (tmp_path / "out").exists()
    assert (run.path / "checkpoints" / "out").is_dir()


# Accelerate's complete_nlp_example.py and transformers' run_*_no_trainer.py resume only from
# the state their --resume_from_checkpoint names, and the step from that folder's name
ARG_RESUME = """
import argparse, os, signal
import torch
from accelerate import Accelerator
from jupyter_trainer import runtime as jt

parser = argparse.ArgumentParser()
parser.add_argument("--checkpointing_steps", type=int)
parser.add_argument("--resume_from_checkpoint", type=str, default=None)
args = parser.parse_args()
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
start = 0
if args.resume_from_checkpoint:
    accelerator.load_state(args.resume_from_checkpoint)
    start = int(os.path.basename(args.resume_from_checkpoint).replace("step_", ""))
print("first step", start + 1, "attempt", jt.attempt, flush=True)
x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
for step in range(start + 1, 9):
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    accelerator.log({"loss": loss.item()}, step=step)
    if step % args.checkpointing_steps == 0:
        accelerator.save_state(f"step_{step}")
    if jt.attempt == 0 and jt.rank == 1 and step == 6:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_script_that_resumes_from_the_state_its_argument_names_goes_on_after_a_restart(
    home, tmp_path
):
    script = tmp_path / "nlp_example.py"
    script.write_text(ARG_RESUME)
    run = api.submit(
        script=str(script),
        procs=2,
        max_restarts=1,
        name="acc-args",
        args=["--checkpointing_steps", "4", "--resume_from_checkpoint", "${{checkpoint.latest}}"],
    )
    run.wait(timeout=300)
    assert run.status == "completed", run.logs(1)[-3000:]
    log = run.logs(0)
    assert "first step 1 attempt 0" in log and "first step 5 attempt 1" in log, log[-3000:]
    assert [s for s, _ in run.metrics(0)["loss"]][-4:] == [5, 6, 7, 8]
    assert leftover(run.id) == []
