"""What leaves this machine is the rank side, and the rank side is standard library only.

A run's ranks and nodes may have no jupyter_trainer, or another version of it. Every way
the package sends code elsewhere (the snapshot's runtime, the node agent, the pool bundle,
``python -c`` programs, the environment builder, the Kubernetes pod program, the Ray actor)
reads it through ``rankside.source()``; these tests check that each way sends exactly
those files, that nothing else in the package reads its own source to send it, and that
the rank side imports nothing a bare Python lacks.
"""

from __future__ import annotations

import ast
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from jupyter_trainer import rankside

PACKAGE = Path(rankside.__file__).resolve().parent.parent
RANKSIDE = Path(rankside.__file__).resolve().parent
# What a rank or node has by definition where a shipped file imports it inside a function:
# the run's torch (and what torch.onnx needs), Ray on a Ray node, uv where it builds, and
# nvidia-ml-py where the rank's environment has it (GPU figures fall back to nvidia-smi).
ON_THE_NODE = {"torch", "numpy", "onnx", "onnxruntime", "onnxscript", "ray", "uv", "pynvml"}


def rankside_files() -> list[str]:
    return sorted(p.relative_to(RANKSIDE).as_posix() for p in RANKSIDE.rglob("*.py"))


def test_the_rank_side_is_what_is_shipped():
    """Every file of rankside/ leaves this machine one way or another, and only those do,
    but for the programs' folder's ``__init__.py``, which only says what it holds."""
    assert rankside_files() == sorted({*rankside.shipped(), *rankside.STAYS})
    assert not set(rankside.STAYS) & set(rankside.shipped())


@pytest.mark.parametrize("name", rankside_files())
def test_a_shipped_file_imports_only_the_standard_library(name):
    path = RANKSIDE / name
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: another file of the rank side
                continue
            names = [node.module or ""]
        else:
            continue
        for full in names:
            top = full.split(".")[0]
            if top in sys.stdlib_module_names or full.startswith("jupyter_trainer.rankside"):
                continue
            if (
                full == "jupyter_trainer"
                and isinstance(node, ast.ImportFrom)
                and {a.name for a in node.names} <= {"rankside"}
            ):
                continue
            if top in ON_THE_NODE and id(node) not in top_level:
                continue
            bad.append(f"line {node.lineno}: {full}")
    assert not bad, f"rankside/{name} imports {bad}"


@pytest.mark.parametrize("name", rankside.AGENT)
def test_an_agent_module_imports_only_what_its_zip_holds(name):
    """The agent runs from its zip (package ``_jt_agent``), where only ``rankside.AGENT`` is:
    what an agent module imports of the rank side is imported relatively, and is there."""
    folder = PurePosixPath(name).parent
    bad = []
    for node in ast.walk(ast.parse((RANKSIDE / name).read_text())):
        if isinstance(node, ast.Import | ast.ImportFrom) and not getattr(node, "level", 0):
            full = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            bad += [f"line {node.lineno}: {m}" for m in full if m.startswith("jupyter_trainer")]
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = folder
        for _ in range(node.level - 1):
            base = base.parent
        modules = (
            [base.joinpath(*node.module.split("."))]
            if node.module
            else [base / alias.name for alias in node.names]
        )
        for module in modules:
            if not {f"{module}.py", f"{module}/__init__.py"} & set(rankside.AGENT):
                bad.append(f"line {node.lineno}: {module} (not in rankside.AGENT)")
    assert not bad, f"rankside/{name} imports {bad}"


def test_nothing_else_reads_the_package_source():
    """Outside rankside/, no module finds a file beside itself to send: ``__file__`` is used
    only to find the widget's built assets."""
    allowed = {"frontends/widgets/widget.py"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("rankside/") or rel in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__file__":
                found.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Attribute) and node.attr == "__file__":
                found.append(f"{rel}:{node.lineno}")
    assert not found


def test_the_snapshot_carries_the_rank_side_and_a_stand_in_package(tmp_path):
    from jupyter_trainer.capture.snapshot import RESERVED_DIR, write_script_snapshot

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    write_script_snapshot(tmp_path / "code", script)
    jt = tmp_path / "code" / RESERVED_DIR
    shipped = {p.relative_to(jt).as_posix(): p.read_bytes() for p in jt.rglob("*.py")}
    expected = {
        "boot.py": rankside.source(rankside.BOOT),
        "jupyter_trainer/__init__.py": rankside.SHIM_INIT.encode(),
        "jupyter_trainer/runtime.py": rankside.SHIM_RUNTIME.encode(),
        **{f"jupyter_trainer/rankside/{n}": rankside.source(n) for n in rankside.SNAPSHOT},
        **{n: rankside.source(n) for n in rankside.AZUREML_V1},
    }
    assert shipped == expected
    # The package's public name for the runtime is the same alias as the stand-in's.
    assert (PACKAGE / "runtime.py").read_text() == rankside.SHIM_RUNTIME


def test_each_way_of_shipping_sends_rank_side_files():
    from jupyter_trainer.nodes import calls
    from jupyter_trainer.nodes.agent_zip import MAIN, PACKAGE, agent_zip
    from jupyter_trainer.nodes.hotstart.bundle import FOLDER, node_bundle
    from jupyter_trainer.rankside.hotstart.node_launch import BUNDLE_PACKAGE
    from jupyter_trainer.targets.kubernetes.manifests import pod_program_source

    assert calls.agent_source() == agent_zip()
    with zipfile.ZipFile(io.BytesIO(agent_zip())) as archive:
        sent = {name: archive.read(name) for name in archive.namelist()}
    assert sent.pop("__main__.py") == MAIN.encode()  # one entry line into the package
    assert MAIN.splitlines()[2].startswith(f"from {PACKAGE}.agent")
    assert sent == {f"{PACKAGE}/{name}": rankside.source(name) for name in rankside.AGENT}
    assert pod_program_source() == rankside.text(rankside.KUBE_POD)
    _, files = node_bundle()
    package = {
        path.removeprefix(f"{FOLDER}/{BUNDLE_PACKAGE}/"): text
        for path, text in files.items()
        if path.startswith(f"{FOLDER}/{BUNDLE_PACKAGE}/")
    }
    assert package == {name: rankside.text(name) for name in rankside.POOL}
    programs = {
        path: text
        for path, text in files.items()
        if path not in {f"{FOLDER}/{BUNDLE_PACKAGE}/{n}" for n in rankside.POOL}
    }
    for text in programs.values():  # three entry lines into the bundle, nothing more
        assert text.splitlines()[1].startswith(f"from {BUNDLE_PACKAGE}.hotstart.")
    with pytest.raises(ValueError, match="not a file the rank side ships"):
        rankside.source("../core/errors.py")


def test_the_agent_zip_is_the_same_bytes_for_the_same_sources():
    """Its digest names the file installed on a node: building it again (another process, at
    another time) gives the same bytes, so a node never installs a second copy."""
    from jupyter_trainer.nodes import agent_zip

    first = agent_zip.agent_zip()
    agent_zip.agent_zip.cache_clear()
    assert agent_zip.agent_zip() == first
    code = "import sys\nfrom jupyter_trainer.nodes.agent_zip import agent_zip\n"
    code += "sys.stdout.buffer.write(agent_zip())\n"
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
    assert again.stdout == first
    with zipfile.ZipFile(io.BytesIO(first)) as archive:
        entries = archive.infolist()
    assert [e.filename for e in entries] == sorted(e.filename for e in entries)
    assert {e.date_time for e in entries} == {(1980, 1, 1, 0, 0, 0)}


def test_the_environment_payload_is_the_shipped_builder(tmp_path):
    import io
    import tarfile

    from jupyter_trainer.nodes.prepare import environment_payload

    lock = tmp_path / "lock-abc"
    lock.mkdir()
    (lock / "requirements.lock").write_text("six==1.16.0\n")
    _, payload = environment_payload(lock)
    with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
        assert tar.extractfile("build.py").read() == rankside.source(rankside.ENV_BUILD)


def test_shipped_files_run_where_jupyter_trainer_is_not_installed(tmp_path):
    """The snapshot's stand-in and the node agent import with ``python -S`` (no
    site-packages) from a folder holding only what is shipped: the agent's zip, as a node
    runs it."""
    from jupyter_trainer.capture.snapshot import RESERVED_DIR, write_script_snapshot
    from jupyter_trainer.nodes.calls import agent_source

    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    write_script_snapshot(tmp_path / "code", script)
    (tmp_path / "jt-node.pyz").write_bytes(agent_source())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import sys\n"
        "from jupyter_trainer import runtime as jt\n"
        "from jupyter_trainer.rankside.rank import launcher_env, workdir\n"
        "from jupyter_trainer.rankside.observe import death_watch\n"
        "assert jt.__name__ == 'jupyter_trainer.rankside.rank.runtime', jt.__name__\n"
        "print(sorted(m for m in sys.modules if m.startswith('jupyter_trainer')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path / "code" / RESERVED_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "jupyter_trainer.rankside.rank.runtime" in done.stdout
    agent = subprocess.run(
        [sys.executable, "-S", str(tmp_path / "jt-node.pyz"), "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in agent.stderr, agent.stderr
    assert (agent.returncode, agent.stderr.split(" {")[0]) == (2, "usage: jt-node.pyz --workdir W")
    listed = subprocess.run(
        [sys.executable, "-S", str(tmp_path / "jt-node.pyz"), "--workdir", str(tmp_path)]
        + ["leftovers", '{"run_id": "none"}'],
        cwd=tmp_path,
        env=env,
        capture_output=True,
    )
    assert listed.stdout == b'\x1eJT {"leftovers": [], "n": 0}\n', listed.stderr
