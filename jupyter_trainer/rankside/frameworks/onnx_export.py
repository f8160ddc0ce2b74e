"""``jt.export_onnx``: a trained model as ``outputs/NAME.onnx``, checked against onnxruntime.

Used by ``runtime`` inside the ranks, so, like it, this module is copied into every run's
snapshot and imports only the standard library at import time; torch, onnx, onnxscript and
onnxruntime are imported when a model is exported (``pip install jupyter_trainer[onnx]``).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import sys
import time
from typing import Any

from jupyter_trainer.rankside.host import atomic

EXTRA = "pip install jupyter_trainer[onnx]"
RTOL = 1e-3
ATOL = 1e-5
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


def check_name(name: str) -> str:
    """``name`` without a trailing ``.onnx``, if it is a plain file name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name.removesuffix(".onnx")):
        raise ValueError(
            f"export_onnx(name={name!r}): a file name of letters, digits, '.', '_' "
            "and '-' that starts with a letter or digit"
        )
    return name.removesuffix(".onnx")


def export_onnx(
    model: Any,
    example_inputs: Any,
    name: str,
    folder: str,
    *,
    dynamic_batch: bool = True,
    opset: int | None = None,
    check: bool = True,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> dict[str, Any]:
    """Export ``model`` with ``torch.onnx.export(..., dynamo=True)`` to ``folder/NAME.onnx``.

    ``example_inputs`` is one tensor or a tuple of the model's positional inputs. A
    ``DistributedDataParallel`` (or ``DataParallel``) model is exported as its ``module``; the
    model is put in eval mode for the export and every submodule's mode restored after. With
    ``dynamic_batch`` the first dimension of each input may vary in the exported model (where
    the model allows; the record shows the shapes as exported). The file is written under a
    temporary name and renamed, so a reader never sees half of it.

    With onnxruntime installed, the file is run on ``example_inputs`` on its CPU provider and
    every output compared with torch's: it passes where ``|ort - torch| <= atol + rtol *
    |torch|`` for every element (``numpy.isclose``; by default rtol 1e-3 and atol 1e-5, and
    NaN matches NaN). A mismatch is reported on stderr and recorded; the export still stands.

    Returns the record, also written beside the model as ``NAME.onnx.json``: ``path``, ``file``,
    ``bytes``, ``opset``, ``inputs``/``outputs`` (names and shapes), ``checked``,
    ``within_tolerance``, ``max_abs_diff``, ``rtol``, ``atol``, ``onnxruntime`` (its
    version) and ``not_checked`` (why not, when it was not).
    """
    name = check_name(name)
    torch = _require("torch")
    onnx = _require("onnx")
    _require("onnxscript")
    module = model
    if isinstance(module, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
        module = module.module
    inputs = (
        tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    )
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.onnx")
    staging = os.path.join(folder, f".{name}.onnx.{os.getpid()}.tmp")
    modes = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        with torch.no_grad():
            program = torch.onnx.export(
                module,
                inputs,
                dynamo=True,
                verbose=False,
                opset_version=opset,
                dynamic_shapes=_batch_shapes(torch, inputs) if dynamic_batch else None,
            )
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
            program.save(os.path.join(staging, f"{name}.onnx"))
            record = _describe(onnx, os.path.join(staging, f"{name}.onnx"))
            if check:
                record.update(
                    _check(torch, module, inputs, os.path.join(staging, f"{name}.onnx"), rtol, atol)
                )
            else:
                record.update(checked=False, not_checked="check=False was given")
            record.update(rtol=rtol, atol=atol)
        _move_into(staging, folder, f"{name}.onnx")
    finally:
        for m, training in modes:
            m.training = training
        shutil.rmtree(staging, ignore_errors=True)
    record = {
        "path": path,
        "file": f"{name}.onnx",
        "bytes": os.path.getsize(path),
        **record,
        "torch": torch.__version__,
        "exporter": "torch.onnx.export(dynamo=True)",
        "t": time.time(),
    }
    _write_json(path + ".json", record)
    _say(record)
    return record


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"jt.export_onnx needs {module}, which is not installed here: {EXTRA}", name=module
        ) from exc


def _batch_shapes(torch: Any, inputs: tuple) -> tuple:
    auto = torch.export.Dim.AUTO
    return tuple({0: auto} if isinstance(x, torch.Tensor) and x.dim() > 0 else None for x in inputs)


def _describe(onnx: Any, path: str) -> dict[str, Any]:
    proto = onnx.load(path, load_external_data=False)

    def shapes(values: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": v.name,
                "shape": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
            }
            for v in values
        ]

    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    return {
        "opset": opset,
        "inputs": shapes(proto.graph.input),
        "outputs": shapes(proto.graph.output),
    }


def _tensors(value: Any, torch: Any) -> list[Any]:
    """The tensors of a model's output, in order (a tuple, list or dict of them, nested)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v, torch)]
    return []


def _check(
    torch: Any, module: Any, inputs: tuple, path: str, rtol: float, atol: float
) -> dict[str, Any]:
    """Run ``path`` in onnxruntime on ``inputs`` and compare with ``module``'s outputs."""
    try:
        np = importlib.import_module("numpy")
        ort = importlib.import_module("onnxruntime")
    except ImportError as exc:
        return {
            "checked": False,
            "onnxruntime": None,
            "not_checked": f"{exc.name or 'onnxruntime'} is not installed ({EXTRA})",
        }
    found: dict[str, Any] = {"checked": False, "onnxruntime": ort.__version__}
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        fed = [x for x in inputs if isinstance(x, torch.Tensor)]
        names = [i.name for i in session.get_inputs()]
        if len(names) != len(fed):
            found["not_checked"] = (
                f"the ONNX model takes {len(names)} inputs and the example gives {len(fed)} tensors"
            )
            return found
        got = session.run(None, {n: x.detach().cpu().numpy() for n, x in zip(names, fed)})
        want = [t.detach().cpu().numpy() for t in _tensors(module(*inputs), torch)]
    except Exception as exc:
        found["not_checked"] = f"onnxruntime could not run it: {type(exc).__name__}: {exc}"
        return found
    if len(got) != len(want):
        found["not_checked"] = f"onnxruntime gave {len(got)} outputs and torch {len(want)}"
        return found
    worst, ok = 0.0, True
    for a, b in zip(got, want):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            found["not_checked"] = f"onnxruntime gave an output of shape {a.shape}, torch {b.shape}"
            return found
        ok = ok and bool(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True).all())
        both = ~(np.isnan(a) & np.isnan(b))
        if both.any():
            worst = max(worst, float(np.nan_to_num(np.abs(a - b)[both], nan=np.inf).max()))
    found.update(
        checked=True, within_tolerance=ok, max_abs_diff=worst if worst != np.inf else "inf"
    )
    return found


def _move_into(staging: str, folder: str, main: str) -> None:
    """Rename the files written in ``staging`` into ``folder``, the model file last."""
    for entry in sorted(os.listdir(staging)):
        if entry != main:
            os.replace(os.path.join(staging, entry), os.path.join(folder, entry))
    os.replace(os.path.join(staging, main), os.path.join(folder, main))


def _write_json(path: str, record: dict[str, Any]) -> None:
    atomic.write_json_atomic(path, record, indent=1)


def _say(record: dict[str, Any]) -> None:
    head = f"[jt] exported {record['path']} ({record['bytes']} bytes, opset {record['opset']})"
    if not record["checked"]:
        print(f"{head}; not checked against onnxruntime: {record['not_checked']}", flush=True)
    elif record["within_tolerance"]:
        print(
            f"{head}; onnxruntime {record['onnxruntime']} matches torch (max abs diff "
            f"{record['max_abs_diff']:.3g}, rtol {record['rtol']:g}, atol {record['atol']:g})",
            flush=True,
        )
    else:
        print(
            f"{head}; onnxruntime {record['onnxruntime']} differs from torch by up to "
            f"{record['max_abs_diff']} (beyond rtol {record['rtol']:g}, atol {record['atol']:g})",
            file=sys.stderr,
            flush=True,
        )
