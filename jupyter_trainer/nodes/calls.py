"""One call of the node agent (rankside/agent/) on one host, through any ``NodeShell``
(transport.py): the pre-flight (which installs the agent), sending a snapshot, and building
a locked environment. Each answers the agent's JSON or raises a TargetError naming the host.
The ssh target makes these calls on every node; the Slurm target on its login node.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..core.errors import TargetError
from ..core.spec import EnvSpec
from ..rankside.host.home import default_home
from .agent_zip import agent_zip
from .commands import agent_command, agent_file, bootstrap_command, bootstrap_input, probe_command
from .frames import parse_answer
from .prepare import environment_payload
from .transport import NodeShell


def agent_source() -> bytes:
    """The agent as a node is sent it: its zip application (``agent_zip.py``)."""
    return agent_zip()


def preflight_command(python: str, workdir: str, args: Mapping[str, Any]) -> str:
    """The pre-flight's command line; it reads ``bootstrap_input(agent_source())`` first."""
    agent = agent_file(hashlib.sha256(agent_source()).hexdigest())
    return bootstrap_command(python, workdir, agent, "preflight", args)


def preflight(
    client: NodeShell,
    python: str,
    workdir: str,
    args: Mapping[str, Any],
    timeout: float,
    *,
    probe: bool = False,
) -> dict[str, Any]:
    """Install the agent if the host lacks it, then its ``preflight``. With ``probe`` (a
    dry run) the same questions, with nothing installed or made on the host."""
    command = probe_command if probe else preflight_command
    done = client.run(
        command(python, workdir, args),
        input=bootstrap_input(agent_source()),
        timeout=timeout,
        what="pre-flight",
    )
    check_interpreter(client.host, python, done.returncode)
    return parse_answer(client.host, done, "pre-flight")


def check_interpreter(host: str, python: str, returncode: int | None) -> None:
    """The node's shell could not run ``python`` (exit code 126 or 127)."""
    if returncode in (126, 127):
        raise TargetError(
            f"node {host}: the interpreter {python} was not found or "
            'cannot run there; set python = "/path/to/python" in the target '
            "(or per host)"
        )


def send_snapshot(
    client: NodeShell,
    python: str,
    agent: str,
    workdir: str,
    snapshot: str,
    payload: bytes,
    timeout: float,
) -> dict[str, Any]:
    done = client.run(
        agent_command(python, agent, workdir, "stage", {"snapshot": snapshot}),
        input=payload,
        timeout=timeout,
        what="sending the snapshot",
    )
    return parse_answer(client.host, done, "sending the snapshot")


def build_environment(
    client: NodeShell,
    python: str,
    agent: str,
    workdir: str,
    env: EnvSpec,
    check: Mapping[str, Any],
    *,
    uv: str | None,
    timeout: float,
) -> dict[str, Any]:
    """Build ``env``'s lock on the host (cached there under ``<workdir>/envs``) with
    ``python`` as the base, and pre-flight ``check`` with the environment's python:
    ``{"environment": build record, "check": pre-flight answer}``."""
    from ..environment.stages import lock_of

    # this user's lock, made again from the recorded version if it is not among this
    # user's (a colleague's run started again: the lock it names is the colleague's)
    found = lock_of(env, default_home())
    name, payload = environment_payload(found.path)
    remote = agent_command(
        python, agent, workdir, "environment", {"name": name, "uv": uv, "check": dict(check)}
    )
    done = client.run(
        remote, input=payload, timeout=timeout, what=f"building environment {env.name!r}"
    )
    answer = parse_answer(client.host, done, "building the environment")
    if answer.get("error"):
        raise TargetError(
            f"node {client.host}: environment {env.name!r} (version "
            f"{env.version}) could not be built there: {answer['error']}"
        )
    return answer
