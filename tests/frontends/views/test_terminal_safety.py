"""Names a run chose (its output files, its metrics) reach a terminal only as printable text:
a colleague's run cannot clear your screen, set your terminal's title or forge lines."""

from __future__ import annotations

import subprocess

from support import jt_cli

from jupyter_trainer.api import runs as api

# Outputs named with a clear-screen sequence, an OSC title and a newline, a FIFO and a link
# out of the run's outputs, and a metric named with the same sequences.
HOSTILE = r"""
import os
from jupyter_trainer import runtime as jt
os.makedirs("outputs/model", exist_ok=True)
for folder in ("outputs", "outputs/model"):
    with open(folder + "/\x1b[2J\x1b]0;pwned\x07w\nforged line.txt", "w") as f:
        f.write("x")
os.mkfifo("outputs/a-fifo")
os.symlink("/etc/passwd", "outputs/a-link")
jt.log(**{"\x1b]0;title\x07loss\nforged": 0.5, "acc": 1.0})
"""


def cli(*args: str) -> subprocess.CompletedProcess:
    done = jt_cli.cli(*args, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def assert_printable(text: str) -> None:
    """No control character at all but the line ends, and no name split over lines."""
    assert not any(c != "\n" and not c.isprintable() for c in text), repr(text)
    assert not any(line.startswith("forged") for line in text.splitlines()), repr(text)


def test_show_wait_register_and_models_print_names_printably(home, tmp_path):
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    waited = cli("submit", str(script), "--procs", "1", "--no-hot", "--wait")
    assert_printable(waited.stdout + waited.stderr)
    assert "\\x1b]0;title\\x07loss\\nforged" in waited.stderr, waited.stderr
    run = api.runs()[0]
    assert run.status == "completed", run.state.get("error")

    shown = cli("show", run.id).stdout
    assert_printable(shown)
    assert "\\x1b[2J\\x1b]0;pwned\\x07w\\nforged line.txt" in shown, shown
    listed = cli("files", run.id).stdout
    assert "a-fifo" not in listed and "a-link" not in listed, listed
    assert "a-fifo" not in shown and "a-link" not in shown, shown  # as `files` lists them

    registered = cli("register", run.id, "net", "model", "--tag", "k=\x1b[2Jv")
    assert_printable(registered.stdout + registered.stderr)
    for args in (("models",), ("models", "list"), ("models", "show", "net")):
        printed = cli(*args).stdout
        assert_printable(printed)
    assert "\\x1b[2J\\x1b]0;pwned\\x07w\\nforged line.txt" in printed, printed
    assert "\\x1b]0;title\\x07loss\\nforged=0.5" in printed, printed
    copied = cli("models", "download", "net", str(tmp_path / "got")).stdout
    assert_printable(copied)
