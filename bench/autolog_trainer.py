"""What capturing a transformers ``Trainer`` costs per training step, against the same
``Trainer`` left alone.

    .venv/bin/python bench/autolog_trainer.py [--rounds N] [--steps N] [--json PATH]

Each round starts two runs of the same script (``launcher="python"``, one rank), in a fresh
random order: one with autolog on (the default), one with ``autolog=False``, the anchor. The
script trains a tiny BERT built from its config for ``--steps`` steps with ``logging_steps=1``
(the worst case: the Trainer logs at every step, so the capture reports at every step too) and
prints the median wall time of a step, from one ``on_step_end`` to the next. The ratio on / off
is what the capture adds to a step of the user's training, on the same machine in the same
session.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import jupyter_trainer as jt  # noqa: E402

SCRIPT = """
import statistics, sys, time
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers import TrainerCallback

steps = int(sys.argv[1])
torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
x = torch.randint(0, 64, (steps * 8, 16), generator=torch.Generator().manual_seed(0))
data = [{"input_ids": row, "labels": row[0] % 2} for row in x]

class Clock(TrainerCallback):
    times = []
    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter_ns())

args = TrainingArguments(output_dir="bench", max_steps=steps, per_device_train_batch_size=8,
                         logging_steps=1, save_strategy="no", use_cpu=True, report_to="none",
                         disable_tqdm=True, learning_rate=1e-3)
Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=data,
        callbacks=[Clock()]).train()
gaps = [b - a for a, b in zip(Clock.times[10:], Clock.times[11:])]  # past the warm-up
print("step_ns", statistics.median(gaps))
"""


def one(home: Path, script: Path, steps: int, autolog: bool) -> float:
    run = jt.submit(
        script=str(script), args=[str(steps)], launcher="python", autolog=autolog, home=home
    )
    run.wait(timeout=900)
    found = re.search(r"step_ns ([\d.]+)", run.logs(0))
    if not found:
        raise SystemExit(f"run {run.id} printed no timing:\n{run.logs(0)[-2000:]}")
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="jt-bench-trainer-"))
    script = home / "trainer_steps.py"
    script.write_text(SCRIPT)
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(opts.rounds):
        order = [True, False]
        random.shuffle(order)
        for autolog in order:
            times[autolog].append(one(home, script, opts.steps, autolog))
        print(f"round {round_ + 1}: on {times[True][-1]:,.0f} ns, off {times[False][-1]:,.0f} ns")
    on, off = statistics.median(times[True]), statistics.median(times[False])
    result = {
        "steps": opts.steps,
        "rounds": opts.rounds,
        "step_ns_autolog_on": on,
        "step_ns_autolog_off": off,
        "ratio": on / off,
        "runs_on": times[True],
        "runs_off": times[False],
    }
    print(json.dumps(result, indent=2))
    if opts.json:
        opts.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
