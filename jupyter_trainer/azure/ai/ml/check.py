"""``jupyter-trainer azure check PATH``: every Azure ML SDK v2 call of a notebook, a script, a
job YAML or a folder of them, and what it will do here, before anything runs.

The code is read, never run. Each name imported from ``azure.ai.ml`` (and its modules) or
``azure.identity`` works when this package has it, works differently when ``NOTES`` says
so, and is refused when ``refused.py`` refuses it or this package lacks it; each call of a
refused ``ml_client`` operation (``ml_client.online_endpoints...``) is refused. Each
``command(...)`` call and each job YAML is then checked as ``jobs.create_or_update`` would
check it (``check_jobs.py``), without starting or defining anything: a compute that is no
target here, a code folder or an input path that is not there, a placeholder that names no
input, several instances on this one machine, an Azure storage path. Those will break.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

from . import refused
from .check_jobs import check_command_calls, check_yaml
from .exceptions import ValidationException
from .findings import BREAKS, DIFFERS, REFUSED, WORKS, Finding, summary

_SKIP_DIRS = {".git", ".ipynb_checkpoints", "__pycache__", ".venv", "venv", "node_modules"}
# v2 module -> this package's module
MODULES = {
    "azure.ai.ml": "jupyter_trainer.azure.ai.ml",
    "azure.ai.ml.entities": "jupyter_trainer.azure.ai.ml.entities",
    "azure.ai.ml.sweep": "jupyter_trainer.azure.ai.ml.sweep",
    "azure.ai.ml.constants": "jupyter_trainer.azure.ai.ml.constants",
    "azure.ai.ml.exceptions": "jupyter_trainer.azure.ai.ml.exceptions",
    "azure.identity": "jupyter_trainer.azure.identity",
}
MODULES.update({v: v for v in list(MODULES.values())})
NOTES = {
    "MLClient": "the run store ($JUPYTER_TRAINER_HOME, or config.json's jupyter_trainer_home); "
    "the subscription, resource group and credential are kept and not used",
    "DefaultAzureCredential": "accepted and unused: no Azure sign-in is needed",
    "InteractiveBrowserCredential": "accepted and unused: no browser opens",
    "AzureCliCredential": "accepted and unused",
    "ManagedIdentityCredential": "accepted and unused",
    "ClientSecretCredential": "accepted and unused; the secret is recorded nowhere",
    "Environment": "an image runs only on a Slurm (pyxis) or Kubernetes target; elsewhere the "
    "kernel's Python with the conda_file's packages",
    "Model": "registered from a job's output (azureml://jobs/NAME/outputs/OUT) only",
    "command": "compute is a target's name here (or local); the command runs on each process",
    "TruncationSelectionPolicy": "Optuna's percentile pruner",
    "BayesianSamplingAlgorithm": "Optuna's TPE sampler",
}


def check_path(path: Path) -> list[Finding]:
    """The findings of a notebook, a Python file, a job YAML, or each of them in a folder."""
    if path.is_dir():
        found: list[Finding] = []
        for file in sorted(path.rglob("*")):
            if _SKIP_DIRS & set(file.relative_to(path).parts) or not file.is_file():
                continue
            if file.suffix in (".py", ".ipynb", ".yml", ".yaml"):
                found += check_file(file, str(file.relative_to(path)))
        return found
    if not path.exists():
        raise ValidationException(
            f"{path} does not exist: give a notebook, a Python file, a job YAML or a folder"
        )
    return check_file(path, str(path))


def check_file(path: Path, shown: str) -> list[Finding]:
    if path.suffix in (".yml", ".yaml"):
        return check_yaml(path, shown)
    try:
        source = _source(path)
        tree = ast.parse(source)
    except (OSError, ValueError, SyntaxError) as exc:
        return [Finding(shown, 0, path.name, BREAKS, f"cannot be read as Python: {exc}")]
    findings = _imports(tree, shown) + _operations(tree, shown)
    if findings:  # only a file that uses v2 has v2 jobs to check
        findings += check_command_calls(tree, shown, path.parent)
    return sorted(findings, key=lambda f: (f.line, f.name))


def _source(path: Path) -> str:
    """A Python file's text, or a notebook's code cells (magics and shell lines blanked, so
    line numbers count the notebook's code lines in order)."""
    text = path.read_text(errors="replace")
    if path.suffix != ".ipynb":
        return text
    book = json.loads(text)
    lines: list[str] = []
    for cell in book.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if source.lstrip().startswith("%%"):
            lines += [""] * (source.count("\n") + 1)
            continue
        lines += [
            "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
        ]
    return "\n".join(lines)


def _imports(tree: ast.AST, shown: str) -> list[Finding]:
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                found += _name(node.module, alias.name, node.lineno, shown)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in refused.MODULES:
                    found.append(
                        Finding(
                            shown, node.lineno, alias.name, REFUSED, refused.MODULES[alias.name]
                        )
                    )
    return found


def _name(module: str, name: str, line: int, shown: str) -> list[Finding]:
    full = f"{module}.{name}"
    bare = full.replace("jupyter_trainer.", "", 1)
    for refused_module, fix in refused.MODULES.items():
        if (
            bare == refused_module
            or bare.startswith(refused_module + ".")
            or module == refused_module
        ):
            return [Finding(shown, line, bare, REFUSED, fix)]
    ours = MODULES.get(module)
    if ours is None:
        if module.startswith(("azure.ai.ml", "jupyter_trainer.azure.ai.ml")):
            return [Finding(shown, line, bare, REFUSED, f"{module} is not offered here")]
        return []
    if name in refused.ENTITIES:
        return [Finding(shown, line, name, REFUSED, refused.ENTITIES[name])]
    try:
        getattr(importlib.import_module(ours), name)
    except (AttributeError, ImportError):
        return [Finding(shown, line, name, REFUSED, f"{module}.{name} is not offered here")]
    if name in NOTES:
        return [Finding(shown, line, name, DIFFERS, NOTES[name])]
    return [Finding(shown, line, name, WORKS, "")]


def _operations(tree: ast.AST, shown: str) -> list[Finding]:
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in refused.OPERATIONS.keys() - {
            "workspaces"
        }:
            owner = node.value
            if isinstance(owner, ast.Name) and "client" in owner.id.lower():
                found.append(
                    Finding(
                        shown,
                        node.lineno,
                        f"MLClient.{node.attr}",
                        REFUSED,
                        refused.OPERATIONS[node.attr],
                    )
                )
    return found


__all__ = ["BREAKS", "DIFFERS", "REFUSED", "WORKS", "Finding", "check_path", "summary"]
