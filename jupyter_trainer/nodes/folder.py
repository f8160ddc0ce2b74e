"""A run's working folder on one node, and the node it is on."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import TargetError
from ..core.spec import EnvSpec
from ..launchers.table import Command
from . import calls
from .commands import agent_command, bootstrap_input, snapshot_dir_name
from .frames import FrameReader, parse_answer
from .mirror import LocalFiles, NodeFollower, merge_outputs
from .prepare import judge
from .session import AgentSession, request
from .transport import NodeShell


@dataclass(frozen=True)
class Node:
    """One node of a run, resolved: who it is, where its files are, how the others reach it."""

    index: int
    host: str  # the ssh destination (an alias is fine)
    address: str  # an address the other nodes can reach
    workdir: str  # absolute, on the node
    python: str
    hop: Mapping[str, Sequence[str]] = field(default_factory=dict)  # ssh -G options, for hops

    @property
    def run_root(self) -> str:
        return posixpath.join(self.workdir, "runs")

    def run_dir(self, run_id: str) -> str:
        return posixpath.join(self.workdir, "runs", run_id)


class RemoteFolder:
    """One run's working folder on one node (``<workdir>/runs/<id>``), reached through a
    ``NodeShell``, and everything done to it, in this order:

    ``preflight`` (installs the agent; its answer is kept in ``info`` and judged by
    ``problem``), ``build_environment`` (a locked environment under ``<workdir>/envs``),
    ``stage`` (the snapshot sent unless an intact copy is there; a changed one was set aside
    by the pre-flight), ``start`` (the run folder, and the launcher if there is one),
    ``follow``/``pump`` (live copies of its logs, events and rank records into ``files``),
    ``request_finish``/``await_finish`` or ``end`` (stop what runs, the last bytes and
    ``outputs/``, in one answer), ``collect`` (those outputs merged here),
    ``snapshot_hash`` and ``discard`` (its working directories, after a run that ended well).
    """

    def __init__(
        self,
        shell: NodeShell,
        python: str,
        workdir: str,
        files: LocalFiles,
        *,
        index: int = 0,
        timeout: int = 10,
        lost_after: float = 30,
        env_timeout: int = 1800,
        uv: str | None = None,
    ) -> None:
        self.shell = shell
        self.python = python  # the agent's interpreter on the node
        self.workdir = workdir  # as configured; ``info["workdir"]`` is it resolved
        self.files = files
        self.index = index
        self.timeout = timeout
        self.lost_after = lost_after
        self.env_timeout = env_timeout
        self.uv = uv
        self.run_id = ""
        self.snapshot = ""
        self.info: dict[str, Any] = {}
        self.built: dict[str, Any] | None = None  # the agent's environment build record
        self.follower: NodeFollower | None = None
        self.session: AgentSession | None = None  # from open_session until follow
        self.finished: tuple[dict[str, Any], bytes] | None = None
        self.finished_in_session = False  # the follow session ended the run and stays open

    @property
    def label(self) -> str:
        return self.shell.host

    @property
    def run_dir(self) -> str:
        return posixpath.join(self.info["workdir"], "runs", self.run_id)

    def agent(self, sub: str, args: Mapping[str, Any] | None = None) -> str:
        """The command line of one agent call on this node."""
        return agent_command(self.python, self.info["agent"], self.info["workdir"], sub, args)

    def _call(
        self,
        sub: str,
        args: Mapping[str, Any] | None,
        what: str,
        timeout: float,
        data: bytes | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        done = self.shell.run(self.agent(sub, args), input=data, timeout=timeout, what=what)
        return parse_answer(self.label, done, what), done.stdout

    # -- before the launch -------------------------------------------------------------
    def open_session(self, run_id: str, code_hash: str, args: Mapping[str, Any]) -> None:
        """Start the pre-flight on a connection that ``stage``, ``start`` and ``follow`` then
        reuse (see nodes/session.py). From the main thread; ``preflight`` reads its answer."""
        args = {**self._args_for(run_id, code_hash, args), "session": True}
        self.session = AgentSession(
            self.shell, calls.preflight_command(self.python, self.workdir, args)
        )

    def preflight(self, run_id: str, code_hash: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if self.session is None:
            self.info = calls.preflight(
                self.shell,
                self.python,
                self.workdir,
                self._args_for(run_id, code_hash, args),
                self.timeout + 60,
            )
            return self.info
        try:
            self.info = self.session.ask(
                bootstrap_input(calls.agent_source()), "pre-flight", self.timeout + 60
            )
        except TargetError:
            calls.check_interpreter(self.shell.host, self.python, self.session.proc.returncode)
            raise
        return self.info

    def probe(self, run_id: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """``preflight`` for a dry run: the node is asked, nothing is installed or made there
        (nor is its copy of the snapshot looked at)."""
        self.run_id = run_id
        self.info = calls.preflight(
            self.shell, self.python, self.workdir, args, self.timeout + 60, probe=True
        )
        return self.info

    def _args_for(self, run_id: str, code_hash: str, args: Mapping[str, Any]) -> dict[str, Any]:
        self.run_id = run_id
        self.snapshot = snapshot_dir_name(code_hash)
        return {**args, "snapshot": self.snapshot}

    def _in_session(
        self, body: dict[str, Any], payload: bytes, what: str, timeout: float
    ) -> dict[str, Any] | None:
        """The session's answer to a request, or None when there is no live session (the
        caller then makes a call of its own)."""
        if self.session is None or not self.session.alive():
            return None
        try:
            return self.session.ask(request(body, payload), what, timeout)
        except TargetError:
            if self.session.alive():
                raise
            return None  # the connection dropped: a call of its own tries again

    def problem(self, gpus_per_node: int = 0) -> TargetError | None:
        """The pre-flight's verdict: None when the node can run the job."""
        return judge(self.label, self.info, gpus_per_node)

    def build_environment(self, env: EnvSpec, check: Mapping[str, Any]) -> dict[str, Any]:
        """Build ``env`` here and pre-flight ``check`` with its python, which ``info`` then
        describes; returns the build record."""
        answer = calls.build_environment(
            self.shell,
            self.python,
            self.info["agent"],
            self.info["workdir"],
            env,
            check,
            uv=self.uv,
            timeout=self.timeout + self.env_timeout,
        )
        checked = answer["check"]
        self.info.update({k: checked[k] for k in ("python", "executable", "missing", "versions")})
        self.built = answer["environment"]
        return self.built

    @property
    def has_snapshot(self) -> bool:
        """An intact copy of the run's snapshot is on the node already."""
        return bool(self.info.get("snapshot"))

    @property
    def set_aside(self) -> str | None:
        """Where the pre-flight moved a copy of the snapshot that a run had changed."""
        return self.info.get("snapshot_set_aside")

    def stage(self, payload: bytes) -> None:
        """Send the snapshot (a tarball from ``snapshot_tarball``)."""
        if (
            self._in_session(
                {"stage": self.snapshot, "n": len(payload)},
                payload,
                "sending the snapshot",
                self.timeout + 600,
            )
            is None
        ):
            calls.send_snapshot(
                self.shell,
                self.python,
                self.info["agent"],
                self.info["workdir"],
                self.snapshot,
                payload,
                self.timeout + 600,
            )

    # -- the launch --------------------------------------------------------------------
    def start(
        self, payload: Mapping[str, Any], what: str, timeout: float | None = None
    ) -> dict[str, Any]:
        """The run folder with ``payload``'s files; its launcher, if it has one (or, with
        ``warm``, the node's rank pool readied: see targets/node_hot.py)."""
        timeout = self.timeout + (60 if timeout is None else timeout)
        answer = self._in_session({"start": payload}, b"", what, timeout)
        if answer is None:
            answer, _ = self._call("start", None, what, timeout, json.dumps(payload).encode())
        if answer.get("error"):
            raise TargetError(f"node {self.label}: {answer['error']}")
        return answer

    def follow(self) -> NodeFollower:
        """The follow session: the run's own session from here on, when it is still up
        (a blip later restarts it as a call of its own)."""
        where = {"run_dir": self.run_dir, "node": self.index}
        self.follower = NodeFollower(
            self.shell,
            lambda: self.agent("follow", where),
            self.index,
            self.label,
            self.files,
            self.lost_after,
        )
        session, self.session = self.session, None
        if session is not None and session.alive():
            self.follower.start(session.proc, {"follow": where}, session.reader)
        else:
            if session is not None:
                session.close()
            self.follower.start()
        return self.follower

    def pump(self) -> None:
        if self.follower is not None and self.finished is None:
            self.follower.pump()

    # -- the end -----------------------------------------------------------------------
    def request_finish(self, args: Mapping[str, Any]) -> bool:
        """Ask the follow session to end the run here; False when there is none to ask."""
        return self.follower is not None and self.follower.request_finish(dict(args))

    def await_finish(self, idle_timeout: float) -> tuple[dict[str, Any], bytes] | None:
        got = self.follower.await_finish(idle_timeout) if self.follower else None
        if got is not None:
            self.finished, self.finished_in_session = got, True
        return got

    def stop_following(self) -> None:
        """End the node's sessions (a run that ends before ``follow`` still has one)."""
        if self.session is not None:
            self.session.close()
            self.session = None
        if self.follower is not None:
            self.follower.kill()

    def end(
        self, args: Mapping[str, Any], timeout: float, *, finish: bool = True
    ) -> tuple[dict[str, Any], bytes]:
        """A call of its own (no follow session): ``finish`` (stop, last bytes, outputs) or,
        later, only ``stop``. Returns (answer, outputs tar); file frames are applied."""
        data = None
        if finish:
            args = dict(args, run_dir=self.run_dir, node=self.index)
            data = json.dumps({"offsets": self.files.resume_offsets(self.index)}).encode() + b"\n"
        answer, stdout = self._call(
            "finish" if finish else "stop", args, "ending the run", timeout, data
        )
        tar = bytearray()
        for header, payload in FrameReader().feed(stdout):
            kind = header.get("t")
            if kind == "tar":
                tar += payload
            elif kind == "status":
                if self.follower is not None:
                    self.follower.status = header
            else:
                self.files.apply(self.index, self.label, header, payload)
        if finish:
            self.finished = (answer, bytes(tar))
        return answer, bytes(tar)

    def collect(self) -> dict[str, Any] | None:
        """``outputs/`` and ``logs/user/`` from the end's answer merged into the local run
        folder; None when the node did not answer at the end."""
        if self.finished is None:
            return None
        return merge_outputs(self.finished[1], self.files.root)

    def snapshot_hash(self) -> tuple[str, str | None]:
        """(``host:path``, content hash) of the snapshot the ranks started from, as the end
        found it (None: no answer)."""
        seen = (self.finished[0] if self.finished else {}).get("snapshot")
        where = seen["path"] if seen else f"{self.info.get('workdir')}/snapshots/{self.snapshot}"
        return f"{self.label}:{where}", seen["hash"] if seen else None

    def leftovers(self, run_id: str) -> list[str]:
        answer, _ = self._call(
            "leftovers",
            {"run_id": run_id, "run_dir": self.run_dir},
            "checking for leftover processes",
            self.timeout + 20,
        )
        return answer["leftovers"]

    def discard(self) -> list[str]:
        """Remove the run's working directories here; ``host:path`` of each removed. Asked
        through the follow session when it ended the run and is still open."""
        got = None
        if (
            self.finished_in_session
            and self.follower is not None
            and self.follower.request({"discard": True})
        ):
            got = self.follower.await_answer("discarded", self.timeout + 60)
        if got is None:
            got = self._call(
                "discard",
                {"run_dir": self.run_dir},
                "removing the working directories",
                self.timeout + 60,
            )
        return [f"{self.label}:{p}" for p in got[0].get("removed", [])]


@dataclass(frozen=True)
class NodeLaunch:
    """What one node runs: a launcher (or nothing: mpirun reaches it), and files it needs."""

    node: Node
    run_dir: str
    command: Command | None
    path_prepend: tuple[str, ...] = ()
    files: Mapping[str, str] = field(default_factory=dict)  # relative to run_dir -> text

    def payload(self, snapshot: str, orphan_timeout: int) -> dict[str, Any]:
        """The JSON the node's agent reads on stdin to prepare the run and start it."""
        data: dict[str, Any] = {
            "run_dir": self.run_dir,
            "snapshot": snapshot,
            "node": self.node.index,
            "files": dict(self.files),
            "orphan_timeout": orphan_timeout,
        }
        if self.command is not None:
            data.update(
                argv=list(self.command.argv),
                env=dict(self.command.env),
                env_defaults=dict(self.command.env_defaults),
                path_prepend=list(self.path_prepend),
                cwd=self.run_dir,
            )
        return data
