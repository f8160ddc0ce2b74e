"""A Hugging Face Trainer on a tiny BERT built from a config, as a cell: ``hf_code`` adds
callbacks, ``check_trainer_resumed`` checks that a run resumed another from its checkpoint."""

from __future__ import annotations

from jupyter_trainer.api import runs as api

HF = """
import os, signal
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from transformers import TrainerCallback
from jupyter_trainer import runtime as jt

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
model = BertForSequenceClassification(config)

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(n)
        self.x = torch.randint(0, 64, (n, 8), generator=g)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i, 0] % 2}

class Crash(TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
        print("first step", state.global_step + 1, "attempt", jt.attempt, flush=True)
        Crash.on_step_begin = lambda *a, **k: None
    def on_step_end(self, args, state, control, **kw):
        if CRASH_AT and jt.attempt == 0 and jt.rank == 1 and state.global_step == CRASH_AT:
            os.kill(os.getpid(), signal.SIGKILL)

args = TrainingArguments(output_dir="out", max_steps=jt.params.get("max_steps", 8),
    per_device_train_batch_size=4, logging_steps=2, eval_strategy="steps", eval_steps=4,
    save_steps=4, learning_rate=1e-3, use_cpu=True, ddp_backend="gloo", report_to="none",
    seed=1, hub_token="hf_secret_value", dataloader_num_workers=0, disable_tqdm=True)
CRASH_AT = jt.params.get("crash_at", 0)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(64), eval_dataset=Tokens(16),
                  callbacks=[Crash()] + EXTRA)
trainer.train()
print("kept in", args.output_dir, flush=True)
if jt.params.get("export"):
    trainer.save_model("outputs/bert")
    jt.export_onnx(trainer.model, (torch.randint(0, 64, (2, 8)),), "bert")
"""


def hf_code(extra: str = "[]") -> str:
    return HF.replace("callbacks=[Crash()] + EXTRA", f"callbacks=[Crash()] + {extra}")


def check_trainer_resumed(old: api.Run, new: api.Run) -> None:
    """``new`` resumed ``old`` (4 steps of ``hf_code``) to step 8 from its ``checkpoint-4``."""
    assert new.spec.lineage == {"resumed_from": old.id, "checkpoint": "out/checkpoint-4"}
    log = new.logs(0)
    assert "resuming the Trainer from" in log and "first step 5 attempt 0" in log, log[-3000:]
    assert [s for s, _ in new.metrics(0)["loss"]] == [6, 8]
