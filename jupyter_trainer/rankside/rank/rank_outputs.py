"""What a rank keeps beyond its events: ``jt.save_checkpoint``, ``jt.load_checkpoint`` and
``jt.export_onnx`` (the runtime resolves those names here on first use). Standard library
only: copied into every snapshot."""

from __future__ import annotations

from typing import Any

from jupyter_trainer.rankside.rank import runtime


def save_checkpoint(obj: Any, step: int, *, keep: int = 3) -> str | None:
    """Save ``obj`` (a state dict, say) as the checkpoint of ``step`` in ``checkpoint_dir``.

    Rank 0 writes; the other ranks return None at once, so every rank may call it. The file is
    written under a temporary name, synced and then renamed, so a crash mid-write never leaves
    a checkpoint that ``load_checkpoint`` would read. With torch imported it is ``torch.save``d
    (``step-N.pt``), otherwise pickled (``step-N.pkl``). All but the newest ``keep`` are
    removed. Returns the file's path on rank 0.
    """
    import jupyter_trainer.rankside.rank.rank_files as rank_files

    step = rank_files.checkpoint_step(step, keep)
    if runtime.rank != 0:
        return None
    return rank_files.save_checkpoint(str(runtime.checkpoint_dir), obj, step, keep)


def load_checkpoint(*, map_location: Any = "cpu") -> Any:
    """The newest complete checkpoint of this run, ``Checkpoint(step, state, path)``, or None.

    After a restart it is the one the failed attempt saved last; in a resumed run, the one the
    earlier run saved. When torch.distributed is initialised with several ranks, rank 0 reads
    it and broadcasts it, so every rank starts from the same step even where only rank 0's
    node has the file.
    """
    import jupyter_trainer.rankside.rank.rank_files as rank_files

    return rank_files.read_latest_on_every_rank(
        str(runtime.checkpoint_dir), map_location, runtime.rank, runtime.world_size
    )


def export_onnx(
    model: Any, example_inputs: Any, name: str = "model", **options: Any
) -> dict[str, Any] | None:
    """Write ``outputs_dir/NAME.onnx`` on rank 0 and check it against onnxruntime; returns its
    record (None on the other ranks). Options and tolerances: ``rank_onnx.export_onnx``."""
    import jupyter_trainer.rankside.frameworks.onnx_export as rank_onnx

    name = rank_onnx.check_name(name)
    if runtime.rank != 0:
        return None
    return rank_onnx.export_onnx(model, example_inputs, name, str(runtime.outputs_dir), **options)
