"""Sweep spaces read from YAML files (--sweep-file): what a file may hold, and the clear
refusal of a bad, unreadable, huge or alias-bomb file, at once and in little memory."""

from __future__ import annotations

import resource
import subprocess
import time

import pytest
from support.jt_cli import CLI

from jupyter_trainer.api.sweeps.space import (
    Dimension,
    parse_space,
)
from jupyter_trainer.api.sweeps.space_file import load_space_file
from jupyter_trainer.core.errors import SpecError


def test_a_yaml_space_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "lr: loguniform(1e-4, 1e-1)\nhidden: choice(32, 64, 128)\nopt: adam\n"
        "layers: [64, 32]\ndecay: 1e-3\ncmd: \"choice('; rm -rf / #')\"\n"
    )
    data = load_space_file(path)
    assert data["layers"] == [64, 32] and data["opt"] == "adam"
    space = parse_space(data)
    assert space["lr"] == Dimension("loguniform", (1e-4, 0.1))
    assert space["hidden"] == Dimension("choice", (32, 64, 128))
    assert space["opt"].args == ("adam",) and space["layers"].args == ([64, 32],)
    assert space["decay"].args == (0.001,)  # YAML reads 1e-3 as a string; the space reads it
    assert space["cmd"].args == ("; rm -rf / #",)


@pytest.mark.parametrize(
    "content, fragments",
    [
        ("lr: [1, 2\n", ["is not valid YAML", "line 2", "lines like lr: loguniform"]),
        ("- lr\n- hidden\n", ["holds a list", "map each key to an expression"]),
        ("", ["is empty", "for example lr: loguniform"]),
        ("lr: uniform(0, 1)\nlr: 0.1\n", ["is not valid YAML", "the key 'lr' is given twice"]),
        ("!!python/object/apply:os.system ['true']\n", ["is not valid YAML"]),
    ],
)
def test_bad_yaml_files_are_named_with_the_fix(tmp_path, content, fragments):
    path = tmp_path / "space.yaml"
    path.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_space_file(path)
    message = str(caught.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_a_missing_or_unreadable_yaml_file(tmp_path):
    with pytest.raises(SpecError, match=r"space file .*nope.yaml does not exist; check the path"):
        load_space_file(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="cannot read the sweep space file"):
        load_space_file(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"opt: \xe9\n")
    with pytest.raises(SpecError, match="is not UTF-8 text"):
        load_space_file(tmp_path / "latin1.yaml")


def billion_laughs(levels: int = 9) -> str:
    """Nine lists of nine aliases of the list before: 9**9 strings once expanded."""
    lines = ["l0: &l0 [" + ", ".join(['"lol"'] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))


def test_a_billion_laughs_sweep_file_is_refused_at_once_in_little_memory(home, tmp_path):
    (tmp_path / "laughs.yaml").write_text(billion_laughs())
    (tmp_path / "train.py").write_text(
        "from jupyter_trainer import runtime as jt\njt.log(step=0, score=1.0)\n"
    )
    began = time.monotonic()
    try:  # in 512 MiB of address space, within 30 s
        done = subprocess.run(
            [
                *CLI,
                "sweep",
                str(tmp_path / "train.py"),
                "--sweep-file",
                str(tmp_path / "laughs.yaml"),
                "--metric",
                "score",
                "--launcher",
                "python",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("reading the sweep file did not end within 30 s")
    assert time.monotonic() - began < 15
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert (
        "laughs.yaml holds more than 100000 values once its aliases (*name) are expanded"
        in lines[0]
        and "write its values out" in lines[0]
    )
    assert not (home / "sweeps").exists()


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n", "uses more than 100 aliases (*name)"),
        ("a: &a [1, *a]\n", "has an alias (*name) inside the value it names"),
        ("a: " + "x" * (256 << 10) + "\n", "is larger than 256 KiB"),
        ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", "nests its values too deeply"),
    ],
)
def test_a_sweep_file_past_a_limit_is_refused_with_the_fix(tmp_path, content, fragment):
    path = tmp_path / "space.yaml"
    path.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_space_file(path)
    assert str(path) in str(caught.value) and fragment in str(caught.value)


def test_a_sweep_file_may_alias_a_few_values(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(
        "sizes: &sizes [64, 32]\nencoder: *sizes\ndecoder: *sizes\nlr: loguniform(1e-4, 1e-1)\n"
    )
    assert load_space_file(path) == {
        "sizes": [64, 32],
        "encoder": [64, 32],
        "decoder": [64, 32],
        "lr": "loguniform(1e-4, 1e-1)",
    }
