"""The jobs half of ``azure check``: each ``command(...)`` call of a notebook or script, and
each job YAML, checked as ``jobs.create_or_update`` checks it (``submission.validate``), with
nothing started or defined.

A ``command(...)`` call is rebuilt from its arguments where they are literals, or names
assigned literals (``compute=cpu_compute_target``), or ``Input``/``Output``/distribution/
``Environment`` calls made of those; what the code computes is left out of the check. Paths
are read from the notebook's folder, as the notebook's kernel reads them.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

from ....azureml.errors import NotSupported
from ....core.errors import TrainerError
from .findings import BREAKS, DIFFERS, REFUSED, WORKS, Finding

_UNKNOWN = object()
_CLASSES = {
    "BanditPolicy": ("sweep.policies", "BanditPolicy"),
    "MedianStoppingPolicy": ("sweep.policies", "MedianStoppingPolicy"),
    "TruncationSelectionPolicy": ("sweep.policies", "TruncationSelectionPolicy"),
    "Input": ("inputs", "Input"),
    "Output": ("inputs", "Output"),
    "PyTorchDistribution": ("entities.distribution", "PyTorchDistribution"),
    "MpiDistribution": ("entities.distribution", "MpiDistribution"),
    "Environment": ("entities.environment", "Environment"),
    "Model": ("entities.model", "Model"),
}


def _judge(call: Any, shown: str, line: int, name: str) -> list[Finding]:
    """Run ``call``; its refusal, its error or its notes as findings."""
    with warnings.catch_warnings(record=True) as notes:
        warnings.simplefilter("always")
        try:
            call()
        except NotSupported as exc:
            return [Finding(shown, line, name, REFUSED, str(exc))]
        except (TrainerError, OSError, ValueError, TypeError) as exc:
            return [Finding(shown, line, name, BREAKS, str(exc))]
    texts = [str(n.message) for n in notes if not issubclass(n.category, DeprecationWarning)]
    if texts:
        return [Finding(shown, line, name, DIFFERS, "; ".join(texts))]
    return [Finding(shown, line, name, WORKS, "")]


def check_yaml(path: Path, shown: str) -> list[Finding]:
    from .client import MLClient
    from .submission import validate
    from .yaml_job import load_job, read_job_file

    try:
        data = read_job_file(path)
    except TrainerError as exc:
        return [Finding(shown, 1, path.name, BREAKS, str(exc))]
    if "$schema" not in data and "command" not in data and "trial" not in data:
        if not any(k in data for k in ("jobs", "task", "type")):
            return []  # not a job file (a conda file, an MLTable, ...)

    def check() -> None:
        validate(load_job(path), MLClient.from_config(path=path.parent))

    return _judge(check, shown, 1, f"job ({data.get('type') or 'command'})")


class _Scope:
    """The literal values a file assigns to names at its top level, read on use."""

    def __init__(self, tree: ast.AST) -> None:
        self.assigned: dict[str, ast.AST] = {}
        for node in getattr(tree, "body", []):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.assigned[target.id] = node.value

    def value(self, node: ast.AST, depth: int = 0) -> Any:
        if depth > 8:
            return _UNKNOWN
        if isinstance(node, ast.Name) and node.id in self.assigned:
            return self.value(self.assigned[node.id], depth + 1)
        if isinstance(node, ast.Dict):
            out = {}
            for key, item in zip(node.keys, node.values, strict=True):
                k = self.value(key, depth + 1) if key is not None else _UNKNOWN
                v = self.value(item, depth + 1)
                if k is _UNKNOWN or v is _UNKNOWN:
                    return _UNKNOWN
                out[k] = v
            return out
        if isinstance(node, ast.Call):
            return self.instance(node, depth)
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return _UNKNOWN

    def instance(self, node: ast.Call, depth: int) -> Any:
        import importlib

        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name not in _CLASSES or node.args:
            return _UNKNOWN
        kwargs = {k.arg: self.value(k.value, depth + 1) for k in node.keywords if k.arg}
        if any(v is _UNKNOWN for v in kwargs.values()):
            return _UNKNOWN
        module, cls = _CLASSES[name]
        found = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
        try:
            return found(**kwargs)
        except TrainerError:
            return _UNKNOWN


def check_command_calls(tree: ast.AST, shown: str, base: Path) -> list[Finding]:
    from .client import MLClient
    from .command_job import CommandJob
    from .submission import validate

    scope = _Scope(tree)
    found: list[Finding] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name == "Model":
            model = scope.instance(node, 0)
            if model is not _UNKNOWN and getattr(model, "path", None):
                from .entities.model import job_output

                found += _judge(lambda m=model: job_output(m.path), shown, node.lineno, "Model")
            continue
        if name == "sweep" and isinstance(func, ast.Attribute) and not node.args:
            options = {k.arg: scope.value(k.value) for k in node.keywords if k.arg}
            found += _judge(lambda o=options: _sweep_options(o), shown, node.lineno, ".sweep(...)")
            continue
        if name != "command" or node.args:
            continue
        kwargs = {k.arg: scope.value(k.value) for k in node.keywords if k.arg}
        known = {k: v for k, v in kwargs.items() if v is not _UNKNOWN}
        if not isinstance(known.get("command"), str):
            continue
        if "inputs" not in known or ("outputs" not in known and "outputs" in kwargs):
            known["command"] = "python -c pass"  # its placeholders name what is unknown here

        def check(known: dict[str, Any] = known) -> None:
            job = CommandJob(**known)
            job._base = base
            validate(job, MLClient.from_config(path=base))

        found += _judge(check, shown, node.lineno, "command(...)")
    return found


def _sweep_options(options: dict[str, Any]) -> None:
    """What a ``.sweep(...)`` call's literal arguments say about its sampler, goal and
    policy (its limits may be set later, with ``set_limits``)."""
    from .exceptions import ValidationException
    from .sweep.policies import policy_of, sampling_of

    sampling = options.get("sampling_algorithm", "random")
    if sampling is not _UNKNOWN:
        sampling_of(sampling)
    goal = options.get("goal")
    if isinstance(goal, str) and goal.lower() not in ("maximize", "minimize"):
        raise ValidationException(f"the sweep's goal is {goal!r}: use 'maximize' or 'minimize'")
    policy = options.get("early_termination_policy")
    if policy is not None and policy is not _UNKNOWN:
        policy_of(policy)
