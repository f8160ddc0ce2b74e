"""The agent's commands, by the name a call gives (``--workdir W SUB ARGS``), and its entry
(the zip application's ``__main__.py`` calls ``main``)."""

import json
import os
import sys

from .ending import discard, stop
from .environment import cmd_environment
from .follow import Follower, finish, follow, stdin_offsets
from .frames import answer
from .preflight import cmd_preflight
from .processes import leftovers
from .snapshot import unpack
from .start import start

COMMANDS = {
    "preflight": cmd_preflight,
    "environment": cmd_environment,
    "stage": lambda workdir, args: answer(
        {
            "staged": unpack(  # snapshot tar on stdin
                os.path.join(workdir, "snapshots"), args["snapshot"], sys.stdin.buffer
            )
        }
    ),
    "start": lambda workdir, args: start(workdir, json.loads(sys.stdin.buffer.read())),
    "follow": lambda workdir, args: follow(args, stdin_offsets()),
    "finish": lambda workdir, args: finish(
        args, Follower(args["run_dir"], args["node"], stdin_offsets())
    ),
    "discard": lambda workdir, args: answer({"removed": discard(args["run_dir"])}),
    "stop": lambda workdir, args: answer(stop(args)),
    "leftovers": lambda workdir, args: answer(
        {"leftovers": leftovers(args["run_id"], args.get("run_dir"))}
    ),
}


def main(argv):
    if len(argv) != 4 or argv[0] != "--workdir" or argv[2] not in COMMANDS:
        sys.stderr.write("usage: jt-node.pyz --workdir W {%s} JSON\n" % "|".join(COMMANDS))
        return 2
    workdir = os.path.abspath(os.path.expanduser(argv[1]))
    COMMANDS[argv[2]](workdir, json.loads(argv[3]))
    return 0
