"""The entry script of a v2 command job inside each rank: it runs the job's ``command`` as
v2 ran it on each process, in the job's code folder, with the job's
``environment_variables`` set.

Its placeholders are filled first: ``${{inputs.NAME}}`` with the path of the data input
(``jt.data[NAME]``) or the literal value, ``${{outputs.NAME}}`` with the folder
``outputs/NAME`` of the run (made first, as v2 mounted it), ``${{search_space.NAME}}`` and a
swept input with the trial's value (``jt.params[NAME]``); an optional part ``$[[...]]`` is
kept when each input it names was given. A command that is one ``python SCRIPT.py ARGS`` (or
``python -m MODULE ARGS``) runs in this process, so the rank's hooks see the script; any
other command (``ls``, ``echo``, several lines) runs with ``bash -c``, each value quoted.

Copied into the job's snapshot next to ``_azureml_job.json`` (what the submitting side
wrote); standard library only, and the rank side's runtime (``jt``), which every rank has.
"""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import subprocess
import sys

JOB_FILE = "_azureml_job.json"
PLACEHOLDER = re.compile(r"\$\{\{\s*(inputs|outputs|search_space)\.([A-Za-z0-9_.-]+)\s*\}\}")
_OPTIONAL = re.compile(r"\$\[\[(.*?)\]\]", re.S)
_SHELL = set(";&|<>`$(){}*?~!#\n\\\"'")
_PYTHON = re.compile(r"python(\d+(\.\d+)?)?$")


def _values(job: dict, jt) -> dict:
    """Each placeholder's (kind, name) and its value on this rank."""
    found = {}
    for name, value in (job.get("literals") or {}).items():
        found[("inputs", name)] = str(value)
    for name in job.get("data") or []:
        found[("inputs", name)] = str(jt.data[name])
    for name in job.get("swept") or []:
        found[("inputs", name)] = found[("search_space", name)] = str(jt.params[name])
    for name, kind in (job.get("outputs") or {}).items():
        path = os.path.join(str(jt.outputs_dir), name)
        os.makedirs(path if kind != "uri_file" else os.path.dirname(path), exist_ok=True)
        found[("outputs", name)] = path
    return found


def _fill(text: str, values: dict, quote) -> str:
    def optional(match: re.Match) -> str:
        keys = [(m.group(1), m.group(2)) for m in PLACEHOLDER.finditer(match.group(1))]
        return match.group(1) if all(k in values for k in keys) else ""

    text = _OPTIONAL.sub(optional, text)
    return PLACEHOLDER.sub(lambda m: quote(values[(m.group(1), m.group(2))]), text)


def _in_process(command: str) -> list | None:
    """The words of a command that is one ``python SCRIPT.py ...``/``python -m M ...``."""
    plain = PLACEHOLDER.sub("x", _OPTIONAL.sub("x", command.strip()))
    if _SHELL & set(plain):
        return None
    words = shlex.split(command.strip())
    if len(words) < 2 or not _PYTHON.fullmatch(os.path.basename(words[0])):
        return None
    if (words[1] == "-m" and len(words) >= 3) or words[1].endswith(".py"):
        return words[1:]
    return None


def main() -> int:
    from jupyter_trainer.rankside.rank import runtime as jt

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, JOB_FILE), encoding="utf-8") as f:
        job = json.load(f)
    os.environ.update(job.get("environment_variables") or {})
    values = _values(job, jt)
    command = job["command"]
    words = _in_process(command)
    if words is not None:
        words = [_fill(w, values, str) for w in words]
        sys.stdout.flush()
        if words[0] == "-m":
            sys.argv = [words[1], *words[2:]]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(words[1], run_name="__main__", alter_sys=True)
        else:
            script = os.path.abspath(words[0])
            sys.argv = [words[0], *words[1:]]
            sys.path.insert(0, os.path.dirname(script))
            runpy.run_path(script, run_name="__main__")
        return 0
    filled = _fill(command, values, shlex.quote)
    return subprocess.run(["bash", "-c", filled], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
