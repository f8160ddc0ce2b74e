"""The node agent's command lines, as pure functions (golden-tested with hostile values).

A remote command is an argv list joined with ``shlex.join``: the node's shell splits it
back into exactly that list, whatever quotes, ``$()`` or newlines it holds. Payloads go on
the command's standard input, never on its command line.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from ..core.errors import TargetError

AGENT_NAME = "jt-node"
_SNAPSHOT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


# Run with the node's python; installs the agent, a zip application (read from stdin, after
# a line with its length: what follows is the agent's own input) when it is missing, then
# runs it as ``python <file>`` would. Fixed text: nothing of the user's reaches it except as
# quoted argv.
BOOTSTRAP = (
    "import os,sys,runpy\n"
    "w=os.path.abspath(os.path.expanduser(sys.argv[1]));p=os.path.join(w,'bin',sys.argv[2])\n"
    "s=sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))\n"
    "if not os.path.exists(p):\n"
    " os.makedirs(os.path.dirname(p),exist_ok=True);t='%s.%d.tmp'%(p,os.getpid())\n"
    " f=open(t,'wb');f.write(s);f.close();os.replace(t,p)\n"
    "sys.argv=[p,'--workdir',w]+sys.argv[3:]\n"
    "runpy.run_path(p,run_name='__main__')\n"
)


# A dry run's pre-flight: the agent read from stdin as above and run from a private
# temporary file (python runs a zip application only from a file), which is removed
# however the agent ends; nothing is installed or made in the workdir.
PROBE = (
    "import os,sys,runpy,tempfile\n"
    "w=os.path.abspath(os.path.expanduser(sys.argv[1]))\n"
    "s=sys.stdin.buffer.read(int(sys.stdin.buffer.readline()))\n"
    "d,p=tempfile.mkstemp(prefix='jt-node-',suffix='.pyz')\n"
    "try:\n"
    " f=os.fdopen(d,'wb');f.write(s);f.close()\n"
    " sys.argv=[p,'--workdir',w]+sys.argv[2:]\n"
    " runpy.run_path(p,run_name='__main__')\n"
    "finally:\n"
    " os.unlink(p)\n"
)


def agent_file(digest: str) -> str:
    """The agent's file name on a node (a zip application), content-addressed so versions
    never mix."""
    return f"{AGENT_NAME}-{digest[:16]}.pyz"


def bootstrap_command(
    python: str, workdir: str, agent: str, sub: str, args: Mapping[str, Any]
) -> str:
    """The remote command that installs the agent if needed and runs ``sub`` (stdin:
    ``bootstrap_input``, then the call's own input)."""
    return shlex.join(
        [python, "-c", BOOTSTRAP, workdir, agent, sub, json.dumps(args, sort_keys=True)]
    )


def probe_command(python: str, workdir: str, args: Mapping[str, Any]) -> str:
    """The remote command of a dry run's pre-flight, which changes nothing on the node
    (stdin: ``bootstrap_input``)."""
    return shlex.join(
        [
            python,
            "-c",
            PROBE,
            workdir,
            "preflight",
            json.dumps({**args, "probe": True}, sort_keys=True),
        ]
    )


def bootstrap_input(source: bytes) -> bytes:
    """What a ``bootstrap_command`` reads first on its stdin: the agent's zip."""
    return b"%d\n" % len(source) + source


def agent_command(
    python: str, agent_path: str, workdir: str, sub: str, args: Mapping[str, Any] | None = None
) -> str:
    """The remote command running an installed agent; a payload, if any, goes on stdin."""
    return shlex.join(
        [
            python,
            agent_path,
            "--workdir",
            workdir,
            sub,
            json.dumps(dict(args or {}), sort_keys=True),
        ]
    )


def snapshot_dir_name(code_hash: str) -> str:
    """``sha256:ab12...`` -> ``sha256-ab12...``: a safe folder name under snapshots/."""
    name = code_hash.replace(":", "-")
    if not _SNAPSHOT.fullmatch(name):
        raise TargetError(f"snapshot hash {code_hash!r} is not a safe folder name")
    return name
