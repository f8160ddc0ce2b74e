"""TensorBoard tied to the process that starts it: ``python -m jupyter_trainer.mirrors.tensorboard.tied
PARENT_PID FOLDER TENSORBOARD_ARGS...`` runs TensorBoard in this process, and ends it, with
the data server it starts, as soon as PARENT_PID is no longer its parent.

The CLI and a notebook's kernel stop their TensorBoard themselves when they can (Ctrl-C,
SIGTERM, SIGHUP, ``%train tensorboard --stop``, the kernel's exit). A SIGKILL gives them no
chance, and TensorBoard runs in a session of its own, so nothing else would end it. Here a
thread notices that the parent is gone (this process is then reparented, so ``getppid()``
changes), removes FOLDER (the links TensorBoard serves) and SIGKILLs this process group:
TensorBoard and its data server, which runs in the same group. Checked every ``CHECK_S``.
The kernel's ``PR_SET_PDEATHSIG`` is not used: it fires when the *thread* that started the
child ends, and a kernel may start TensorBoard from a thread that ends long before it does.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time

CHECK_S = 0.2


def _watch(parent: int, folder: str) -> None:
    while os.getppid() == parent:
        time.sleep(CHECK_S)
    shutil.rmtree(folder, ignore_errors=True)
    if os.getpgrp() == os.getpid():  # started in a session of its own, as server.py does
        os.killpg(0, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    parent, folder = int(argv[0]), argv[1]
    if os.getppid() != parent:  # gone before this process got here
        shutil.rmtree(folder, ignore_errors=True)
        return 1
    threading.Thread(
        target=_watch, args=(parent, folder), name="jt-parent-watch", daemon=True
    ).start()
    from tensorboard.main import run_main

    sys.argv = ["tensorboard", *argv[2:]]
    run_main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
