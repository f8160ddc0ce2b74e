"""``environment``: a locked environment built on this node, then checked by the agent's
own pre-flight run with the environment's python."""

import json
import os
import re
import sys

from .frames import answer, first_frame
from .snapshot import unpack


def cmd_environment(workdir, args):
    """Unpack a tar of ``build.py`` and ``lock/`` (stdin) once under ``envs/locks/<name>/``;
    build.py builds (or finds) the environment under ``envs/venvs/`` on this python; then
    the pre-flight ``args["check"]`` runs with the environment's own python."""
    import subprocess

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,80}", args["name"]):
        return answer({"error": "refusing environment folder name %r" % args["name"]})
    root = os.path.join(workdir, "envs")
    unpack(os.path.join(root, "locks"), args["name"], sys.stdin.buffer)
    folder = os.path.join(root, "locks", args["name"])
    argv = [
        sys.executable,
        os.path.join(folder, "build.py"),
        os.path.join(folder, "lock"),
        os.path.join(root, "venvs"),
        "--base-python",
        sys.executable,
    ]
    argv += ["--uv", args["uv"]] if args.get("uv") else []
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        return answer(
            {
                "error": (done.stderr.strip() or "build.py exited with code %d" % done.returncode)[
                    -3000:
                ]
            }
        )
    record = json.loads(done.stdout)
    check = subprocess.run(
        [
            record["python"],
            sys.argv[0],  # this agent's zip application
            "--workdir",
            workdir,
            "preflight",
            json.dumps(args.get("check", {})),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    header = first_frame(check.stdout)
    if check.returncode or header is None:
        return answer(
            {
                "error": "the environment's python %s failed the pre-flight: %s"
                % (record["python"], check.stderr.decode(errors="replace").strip()[-2000:])
            }
        )
    answer({"environment": record, "check": header})
