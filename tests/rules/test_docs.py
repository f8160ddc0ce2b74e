"""Every code block of the README and docs/, run or checked against the code it shows.

- The Python blocks of the README, docs/notebook.md and docs/api.md run, in order, in one
  IPython shell per page (as a notebook would run them, ``%%train`` cells included), against
  a fresh run store; every run they start must complete.
- ``%%environment`` blocks are parsed as the magic parses them.
- A command shown (``%%train``, ``%train``, ``jupyter-trainer``, a repository script or
  benchmark): the script exists, and every ``--flag`` it shows is one its parser has; a
  ``--target NAME`` names a target defined on the same page (or ``local``).
- TOML blocks: each ``[targets.NAME]`` builds its target from a ``targets.toml`` as written.
- Anything else must be a picture of output or files (no command in it), or the test fails:
  a new kind of block needs a check here.
- Outside code blocks, every module a page names by its path (``targets/ssh/target.py``,
  ``labextension/src/runview.ts``) exists, from the repository's root or the package's, and
  docs/architecture.md names every folder of the package.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest
import tomllib
from conftest import REPO
from support.jt_cli import CLI

from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.frontends.commands.options import cell_parser
from jupyter_trainer.store import Store
from jupyter_trainer.targets.registry import get_target

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
EXECUTED = [
    "README.md",
    "docs/notebook.md",
    "docs/api.md",
    "docs/sweeps.md",
    "docs/models.md",
    "docs/system.md",
    "docs/data.md",
    "docs/frameworks.md",
]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```$", re.S | re.M)
COMMAND = re.compile(
    r"^\s*(%%train|%train|jupyter-trainer|(\.venv/bin/)?python (-m \S+ )?bench/|scripts/)"
)


def page_name(path: Path) -> str:
    return str(path.relative_to(REPO))


def code_blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line, language, text) of each fenced block of ``path``."""
    text = path.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)
    ]


def checked_blocks():
    for path in PAGES:
        for line, lang, text in code_blocks(path):
            if page_name(path) in EXECUTED and lang == "python":
                continue  # run by test_python_blocks_run_as_a_notebook_would
            yield pytest.param(path, lang, text, id=f"{page_name(path)}:{line}")


RUNNER = textwrap.dedent("""
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    for n, block in enumerate(json.load(sys.stdin)):
        if not shell.run_cell(block, store_history=True).success:
            sys.exit(f"block {n + 1} failed:\\n{block}")
""")


@pytest.mark.parametrize("page", EXECUTED)
def test_python_blocks_run_as_a_notebook_would(page, home, tmp_path):
    blocks = [text for _, lang, text in code_blocks(REPO / page) if lang == "python"]
    assert blocks, f"{page} has no Python block"
    done = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks),
        text=True,
        capture_output=True,
        cwd=tmp_path,
        timeout=600,
        env={**__import__("os").environ, "JUPYTER_TRAINER_MONITOR": "text"},
    )
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    runs = Store(home).list_runs()
    assert runs, f"{page} started no run"
    failed = {
        r["id"]: Store(home).read_state(r["id"])
        for r in runs
        if r["status"] not in ("completed", "canceled")
    }
    assert not failed, {
        run_id: (state.get("status"), state.get("error"), (state.get("traceback") or "")[-1500:])
        for run_id, state in failed.items()
    }
    trained = [r for r in runs if r["name"] in ("hello", "helpers")]
    for row in trained:
        assert (Store(home).paths(row["id"]).outputs / "model.pt").is_file(), row


@cache
def help_text(command: tuple[str, ...]) -> str:
    """What ``--help`` says for a command: the CLI's subcommand, the magic, or a script."""
    if command[0] in ("%%train", "%train") and (
        len(command) == 1 or command[1].startswith("-") or command[1].endswith(".py")
    ):
        return cell_parser().format_help()
    if command[0] == "%train" and command[1] == "attach":
        from jupyter_trainer.frontends.magics.train import _management_parser

        return _management_parser().format_help()
    if command[0] in ("%train", "jupyter-trainer"):
        argv = [*CLI, *command[1:], "--help"]
    else:
        argv = [sys.executable, command[-1], "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr[-2000:]}"
    return done.stdout


def check_command(line: str, targets: set[str]) -> None:
    words = shlex.split(line.split("#", 1)[0].replace("[", " ").replace("]", " ").replace("|", " "))
    if not words:
        return
    if words[0].startswith("scripts/"):
        assert (REPO / words[0]).is_file(), f"{words[0]} does not exist"
        return
    if "bench/" in line:
        script = next(w for w in words if w.startswith("bench/"))
        assert (REPO / script).is_file(), f"{script} does not exist"
        command = (script,)
    else:
        command = tuple(words[:2]) if words[0] in ("%train", "jupyter-trainer") else (words[0],)
        if (
            len(words) > 2
            and words[0] in ("%train", "jupyter-trainer")
            and words[2].islower()
            and words[2].isalpha()
            and words[2] in help_text(command)
        ):
            command = tuple(words[:3])  # a subcommand's own action: target add, env build
    known = help_text(command)
    for flag in {w.split("=", 1)[0] for w in words if w.startswith("--") and len(w) > 2}:
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", known), (
            f"{line!r}: {flag} is not an option of {' '.join(command)}"
        )
    if "--target" in words and words[0] == "%%train":
        name = words[words.index("--target") + 1]
        assert name in targets | {"local", "NAME"} or name.isupper(), (
            f"{line!r}: no target {name!r} on this page"
        )


def page_targets(path: Path) -> set[str]:
    names = set()
    for _, lang, text in code_blocks(path):
        if lang == "toml":
            names |= set(tomllib.loads(text).get("targets", {}))
        names |= set(re.findall(r"target add (\w+)", text))
    return names


@pytest.mark.parametrize("path, lang, text", list(checked_blocks()))
def test_code_block_shows_what_the_code_does(path, lang, text, home):
    lines = [l for l in text.splitlines() if l.strip()]
    if lang == "python" and lines and lines[0].startswith("%%environment"):
        name = lines[0].split()[1]
        EnvDefinition.from_yaml(name, "\n".join(text.splitlines()[1:]))
        return
    if lang == "toml":
        (home / "targets.toml").parent.mkdir(parents=True, exist_ok=True)
        (home / "targets.toml").write_text(text)
        names = set(tomllib.loads(text).get("targets", {}))
        assert names, "a TOML block that defines no target"
        for name in names:
            get_target(name, home)
        return
    commands = [l for l in lines if COMMAND.match(l)]
    if lang in ("python", "bash"):
        assert commands, f"a {lang} block with nothing this test can run or check:\n{text}"
    for line in commands:
        check_command(line.strip(), page_targets(path))
    if lang == "bash":
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


MODULE_PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)*/[\w.-]+\.(?:py|ts))`")
PACKAGE = REPO / "jupyter_trainer"


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line, text) of ``path`` outside its fenced code blocks."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
    return list(enumerate(text.splitlines(), 1))


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_module_paths_a_page_names_exist(path):
    missing = [
        f"line {number}: {name}"
        for number, line in prose_lines(path)
        for name in MODULE_PATH.findall(line)
        # a file of a run's snapshot, not of this repository
        if not name.startswith(("_jt/", "code/"))
        and not any((base / name).is_file() for base in (REPO, PACKAGE))
    ]
    assert not missing, f"{page_name(path)} names modules that do not exist: {missing}"


def test_the_architecture_page_names_every_folder():
    page = REPO / "docs" / "architecture.md"
    spans = [span for _, line in prose_lines(page) for span in re.findall(r"`([^`]+)`", line)]
    named = set(re.findall(r"[\w/]*?(\w+)/", " ".join(spans)))
    named |= set(re.findall(r"^(\w+)/ ", page.read_text(), re.M))  # the tree's lines
    folders = {
        p.parent.name
        for p in PACKAGE.rglob("__init__.py")
        if p.parent != PACKAGE and "labextension" not in p.parts
    }
    assert folders <= named, f"docs/architecture.md does not name {sorted(folders - named)}"


def test_the_azureml_guide_names_every_refused_and_different_v1_name():
    from jupyter_trainer.azureml import names

    page = (REPO / "docs" / "azureml.md").read_text()
    missing = sorted(name for name in {*names.DIFFERS, *names.REFUSED} if f"`{name}`" not in page)
    assert not missing, f"docs/azureml.md does not name these v1 names in backticks: {missing}"
