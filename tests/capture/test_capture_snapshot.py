"""Writing snapshot folders: ignore rules, secrets, links, hashing, the generated entry."""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import jupyter_trainer
from jupyter_trainer.capture import (
    RESERVED_DIR,
    hash_snapshot,
    resolve_cell,
    write_cell_snapshot,
    write_script_snapshot,
)
from jupyter_trainer.core.errors import CaptureError

PACKAGE = Path(jupyter_trainer.__file__).parent
HOSTILE = '\'; rm -rf ~ "$(reboot)"\n'


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def snapshot_files(dest: Path) -> set[str]:
    return {p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()}


def source_files(dest: Path) -> set[str]:
    return {f for f in snapshot_files(dest) if not f.startswith(RESERVED_DIR + "/")}


def empty_context():
    return resolve_cell("pass", {})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_tree(
        tmp_path / "project",
        {
            "train.py": "print('train')\n",
            "pkg/model.py": "WIDTH = 3\n",
            "pkg/__pycache__/model.cpython-311.pyc": "junk",
            "notes.pyc": "junk",
            ".ipynb_checkpoints/x-checkpoint.ipynb": "{}",
            "data/big.bin": "0" * 100,
            "runs/ckpt.pt": "w",
            ".env": "TOKEN=secret",
            ".env.local": "TOKEN=secret",
            "certs/server.pem": "pem",
            "keys/id_rsa": "key",
            "aws_credentials.json": "{}",
            ".git/config": "[core]",
            ".netrc": "machine x",
            ".trainignore": "data/\n*.pt\n",
        },
    )


def test_trainignore_and_default_exclusions(project, tmp_path):
    code = write_cell_snapshot(tmp_path / "code", "print(1)", empty_context(), source_dir=project)
    assert source_files(tmp_path / "code") == {"train.py", "pkg/model.py", ".trainignore"}
    # secrets are listed so the user sees them; junk and .trainignore'd files are not
    assert code.excluded == (
        ".env",
        ".env.local",
        ".git/",
        ".netrc",
        "aws_credentials.json",
        "certs/server.pem",
        "keys/id_rsa",
    )
    assert code.source_dir == str(project.resolve())


def test_trainignore_can_re_include_a_secret(project, tmp_path):
    (project / ".trainignore").write_text("data/\n*.pt\n!.env\n")
    code = write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=project)
    assert (tmp_path / "code" / ".env").read_text() == "TOKEN=secret"
    assert ".env" not in code.excluded and ".env.local" in code.excluded


def test_reserved_folder_in_source_is_refused(project, tmp_path):
    (project / RESERVED_DIR).mkdir()
    with pytest.raises(CaptureError, match="'_jt'.*reserved"):
        write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=project)
    assert not (tmp_path / "code").exists()
    (project / ".trainignore").write_text("_jt/\n")  # ignored, so no clash
    write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=project)


@pytest.mark.parametrize("make", ["missing", "file"])
def test_bad_source_folder_is_named(tmp_path, make):
    bad = tmp_path / "src dir"
    if make == "file":
        bad.write_text("x")
    with pytest.raises(CaptureError, match="src dir"):
        write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=bad)
    assert not (tmp_path / "code").exists()


def test_hash_is_stable_and_changes_with_one_byte(project, tmp_path):
    ctx = resolve_cell("lr", {"lr": 0.1})
    first = write_cell_snapshot(tmp_path / "a", "print(lr)", ctx, source_dir=project)
    second = write_cell_snapshot(tmp_path / "b", "print(lr)", ctx, source_dir=project)
    assert first.hash == second.hash and first.hash.startswith("sha256:")
    assert len(first.hash) == len("sha256:") + 64
    assert hash_snapshot(tmp_path / "a") == first.hash
    (project / "pkg" / "model.py").write_text("WIDTH = 4\n")
    third = write_cell_snapshot(tmp_path / "c", "print(lr)", ctx, source_dir=project)
    assert third.hash != first.hash
    fourth = write_cell_snapshot(tmp_path / "d", "print(lr) ", ctx, source_dir=project)
    assert fourth.hash not in (first.hash, third.hash)


def test_files_are_read_only_and_counted(project, tmp_path):
    dest = tmp_path / "code"
    code = write_cell_snapshot(dest, "pass", empty_context(), source_dir=project)
    files = [p for p in dest.rglob("*") if p.is_file()]
    assert code.files == len(files)
    assert code.bytes == sum(p.stat().st_size for p in files)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o444 for p in files)


def test_existing_destination_is_never_overwritten(tmp_path):
    (tmp_path / "code").mkdir()
    with pytest.raises(CaptureError, match="already exists"):
        write_cell_snapshot(tmp_path / "code", "pass", empty_context())


def test_symlinks_inside_are_copied_outside_and_folders_are_left_out(tmp_path):
    outside = make_tree(tmp_path / "outside", {"secret.txt": "s"})
    src = make_tree(tmp_path / "src", {"real.txt": "r", "sub/data.txt": "d", ".env": "T=1"})
    (src / "inner_link.txt").symlink_to(src / "real.txt")
    (src / "outer_link.txt").symlink_to(outside / "secret.txt")
    (src / "env_link").symlink_to(src / ".env")
    (src / "dangling").symlink_to(src / "nope")
    (src / "linked_dir").symlink_to(src / "sub", target_is_directory=True)
    code = write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=src)
    copied = tmp_path / "code" / "inner_link.txt"
    assert copied.read_text() == "r" and not copied.is_symlink()
    assert source_files(tmp_path / "code") == {"real.txt", "sub/data.txt", "inner_link.txt"}
    assert code.excluded == (".env", "dangling", "env_link", "linked_dir", "outer_link.txt")


def test_snapshot_size_limit(project, tmp_path, monkeypatch):
    (project / "weights.npy").write_bytes(b"\0" * 50_000)
    monkeypatch.setenv("JUPYTER_TRAINER_MAX_SNAPSHOT_BYTES", "40000")
    with pytest.raises(
        CaptureError,
        match=r"over the 39\.1 KiB limit.*weights\.npy \(48\.8 KiB\)"
        r".*\.trainignore",
    ):
        write_cell_snapshot(tmp_path / "code", "pass", empty_context(), source_dir=project)
    assert not (tmp_path / "code").exists()


# -- the generated entry script -------------------------------------------------------------


def test_cell_script_is_valid_python_in_section_order(tmp_path):
    ns = {"__name__": "__main__"}
    exec(compile("def helper(v):\n    return v * scale\n", "<cell-2>", "exec"), ns)
    ns.update(scale=2, hidden=(64, 32), cmd=HOSTILE, json=json)
    cell = "# my cell\nprint(helper(hidden[0]), cmd, json.dumps(1))\n"
    ctx = resolve_cell(
        cell, ns, history=["def helper(v):\n    return v * scale\n"], overrides={"tag": HOSTILE}
    )
    code = write_cell_snapshot(tmp_path / "code", cell, ctx)
    assert (code.entry, code.origin, code.source_dir) == ("_jt/cell.py", "cell", None)
    text = (tmp_path / "code" / code.entry).read_text()
    compile(text, code.entry, "exec")
    order = [
        "from jupyter_trainer import runtime as _jt_runtime",
        "globals().update(_jt_runtime.params)",
        "globals().update(_jt_runtime.load_carried(__file__))",
        "import json",
        "def helper(v):",
        "# --- cell ---\n" + cell,
    ]
    positions = [text.index(piece) for piece in order]
    assert positions == sorted(positions) and text.startswith("#")
    assert HOSTILE.strip() not in text  # values travel as data, never as code
    blobs = pickle.loads((tmp_path / "code" / "_jt" / "carried.pkl").read_bytes())
    assert {k: pickle.loads(v) for k, v in blobs.items()} == {"hidden": (64, 32)}


def test_no_carried_file_without_carried_objects(tmp_path):
    write_cell_snapshot(tmp_path / "code", "print(lr)", resolve_cell("lr", {"lr": 1}))
    text = (tmp_path / "code" / "_jt" / "cell.py").read_text()
    assert "load_carried" not in text
    assert not (tmp_path / "code" / "_jt" / "carried.pkl").exists()


def test_future_imports_are_hoisted(tmp_path):
    cell = "from __future__ import annotations\ndef f(x: Undefined) -> None:\n    pass\n"
    write_cell_snapshot(tmp_path / "code", cell, empty_context())
    text = (tmp_path / "code" / "_jt" / "cell.py").read_text()
    compile(text, "cell.py", "exec")
    assert text.index("from __future__ import annotations") < text.index("from jupyter_trainer")


def test_runtime_files_are_copied(tmp_path):
    write_cell_snapshot(tmp_path / "code", "pass", empty_context())
    jt = tmp_path / "code" / "_jt"
    from jupyter_trainer import rankside

    assert (jt / "jupyter_trainer" / "__init__.py").read_text() == rankside.SHIM_INIT
    assert (jt / "boot.py").read_bytes() == rankside.source(rankside.BOOT)
    assert (jt / "jupyter_trainer" / "runtime.py").read_text() == rankside.SHIM_RUNTIME
    for name in rankside.SNAPSHOT:
        copied = jt / "jupyter_trainer" / "rankside" / name
        assert copied.read_bytes() == rankside.source(name), name


def test_cell_snapshot_runs_end_to_end(tmp_path):
    if not (PACKAGE / "runtime.py").is_file():
        pytest.skip("jupyter_trainer/rankside/rank/runtime.py not written yet")
    ns = {"__name__": "__main__"}
    exec(compile("def helper(v):\n    return v * scale\n", "<cell-2>", "exec"), ns)
    ns.update(scale=3, hidden=(64, 32), cmd=HOSTILE)
    cell = "print(repr((helper(hidden[1]), cmd, tag)))"
    ctx = resolve_cell(
        cell, ns, history=["def helper(v):\n    return v * scale\n"], overrides={"tag": HOSTILE}
    )
    code = write_cell_snapshot(tmp_path / "run" / "code", cell, ctx)
    (tmp_path / "run" / "spec.json").write_text(json.dumps({"params": ctx.params}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JT_", "RANK", "WORLD_"))}
    env["JT_RUN_DIR"] = str(tmp_path / "run")
    out = subprocess.run(
        [sys.executable, code.entry],
        cwd=tmp_path / "run" / "code",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == repr((96, HOSTILE, HOSTILE))


# -- script snapshots -----------------------------------------------------------------------


def test_script_without_source_is_copied_to_the_root(tmp_path):
    script = make_tree(tmp_path, {"my train.py": "print('hi')\n"}) / "my train.py"
    code = write_script_snapshot(tmp_path / "code", script, ["--lr", HOSTILE])
    assert (code.entry, code.origin, code.args) == ("my train.py", "script", ("--lr", HOSTILE))
    assert source_files(tmp_path / "code") == {"my train.py"}
    assert code.source_dir is None


def test_script_inside_source(project, tmp_path):
    code = write_script_snapshot(
        tmp_path / "code", project / "pkg" / "model.py", source_dir=project
    )
    assert code.entry == "pkg/model.py" and "train.py" in source_files(tmp_path / "code")


def test_script_outside_source_or_ignored_is_refused(project, tmp_path):
    other = make_tree(tmp_path / "elsewhere", {"t.py": ""}) / "t.py"
    with pytest.raises(CaptureError, match="not inside the source folder"):
        write_script_snapshot(tmp_path / "code", other, source_dir=project)
    (project / "data" / "run.py").write_text("")
    with pytest.raises(CaptureError, match="'data/run.py' is left out"):
        write_script_snapshot(tmp_path / "code", project / "data" / "run.py", source_dir=project)
    with pytest.raises(CaptureError, match="does not exist"):
        write_script_snapshot(tmp_path / "code", project / "nope.py")
    assert not (tmp_path / "code").exists()
