"""The ssh target's hooks once its launchers are started: following the nodes while the run
runs (``sync``, ``poll``: a node unreachable for ``node_timeout`` seconds is lost), ranks'
live stacks, and ending the run (``stop``, ``end_attempt``, ``leftovers``, ``collect``,
``snapshot_hashes``, ``discard_workdirs``, ``release``).

``SshRunning`` holds what those hooks share with the rest of the target (target.py): the
run's folders on its nodes, node 0 first, and what each launch and stop left behind. Every
step asks all nodes at once (parallel.py), through each node's follow session when it is up.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from abc import abstractmethod
from typing import Any, ClassVar

from ...core.errors import TargetError, TrainerError
from ...nodes.folder import Node, NodeLaunch, RemoteFolder
from ...nodes.mirror import LocalFiles
from ...nodes.session_relay import SessionRelay
from ...nodes.transport import NodeShell
from ...rankside.host import procs
from ..base import Handle, Target, reach_probe, relay_command
from .commands import HostConfig, SshConfig
from .parallel import parallel

PUMP_S = 0.05  # as often as the supervisor syncs


class SshRunning(Target):
    """The ssh target's run on its nodes, from the start of the launchers to the end."""

    # One connection per node from the pre-flight to the follow (nodes/session.py); False
    # where the transport has no long-lived sessions of that kind.
    node_sessions: ClassVar[bool] = True
    cfg: SshConfig
    _nodes: list[Node]
    _folders: list[RemoteFolder]  # one per node, node 0 first
    _launches: list[NodeLaunch]
    _started: list[RemoteFolder]  # the folders a launch was started in
    _files: LocalFiles | None
    _relay: SessionRelay | None  # a live session's requests, to the nodes
    _last_pump: float
    _closed: bool
    _finished: bool  # the first stop ended the run on the nodes
    _left: dict[str, list[str]]  # host -> what was alive after it
    _fresh_leftovers: bool

    @abstractmethod
    def _client(self, host: HostConfig) -> NodeShell:
        """The transport to ``host``, one per host for the whole run."""

    # -- while it runs -----------------------------------------------------------------
    def _pump(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._closed or (not force and now - self._last_pump < PUMP_S):
            return
        self._last_pump = now
        if self._relay is not None:
            self._relay.pump([folder.follower for folder in self._started])
        for folder in self._folders:
            folder.pump()

    def sync(self, handle: Handle) -> None:
        self._pump()

    def _exit_code(self) -> int | None:
        codes = [
            (f.follower.status if f.follower else {}).get("exit")
            for f, item in zip(self._folders, self._launches)
            if item.command is not None
        ]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if codes and all(c == 0 for c in codes) else None

    def poll(self, handle: Handle) -> int | None:
        if self._closed:
            return self._exit_code()
        self._pump()
        code = self._exit_code()
        for folder, node in zip(self._folders, self._nodes):
            follower = folder.follower
            if follower is None:
                continue
            down = follower.lost_for()
            if down > self.cfg.node_timeout or (down and code not in (None, 0)):
                raise TargetError(
                    f"node {folder.label} ({node.address}) was lost: "
                    f"unreachable for {down:.0f} s ({follower.error})"
                )
        return code

    # -- teardown ----------------------------------------------------------------------
    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """The first stop also takes each node's last files, leftovers and outputs in the
        same answer (``finish``), asked through the node's follow session when it is up, so
        ending a run costs no new connection; a node without one gets a call of its own."""
        first = not self._finished

        def args_for(folder: RemoteFolder) -> dict[str, Any]:
            return _end_args(handle, folder, run_id, grace)

        answers: dict[str, tuple[dict[str, Any], bytes] | TrainerError] = {}
        if first:
            self._finished = True
            asked = [f for f in self._started if f.request_finish(args_for(f))]
            for folder in asked:
                got = folder.await_finish(self.cfg.connect_timeout + grace + 30)
                if got is not None:
                    answers[folder.label] = got
        for folder in self._folders:  # those that answered keep theirs for discard_workdirs
            if folder.label not in answers:
                folder.stop_following()
        self._closed = True

        def call(folder: RemoteFolder) -> tuple[dict[str, Any], bytes]:
            return folder.end(
                args_for(folder),
                self.cfg.connect_timeout + grace + (600 if first else 20),
                finish=first,
            )

        rest = [f for f in self._started if f.label not in answers]
        for folder, result in zip(rest, parallel(call, rest)):
            answers[folder.label] = result
        report: dict[str, Any] = {}
        for folder in self._started:
            result = answers[folder.label]
            if isinstance(result, TrainerError):
                report[folder.label] = {"error": str(result)}
                continue
            answer, _ = result
            report[folder.label] = {
                "sigterm": answer.get("sigterm"),
                "sigkilled": answer.get("sigkilled", []),
                "stragglers": answer.get("stragglers", []),  # outside group and environment
            }
            if first:
                self._left[folder.label] = answer.get("leftovers", [])
        self._fresh_leftovers = first
        stragglers = [f"{h}: {p}" for h, r in report.items() for p in r.get("stragglers", [])]
        return {
            "nodes": report,
            "sigkilled": [f"{h}: {p}" for h, r in report.items() for p in r.get("sigkilled", [])],
            **({"stragglers": stragglers} if stragglers else {}),
        }

    def end_attempt(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """Stop each node's launcher and ranks with a call of its own; the follow sessions
        end too, and ``start`` opens new ones for the next attempt."""
        self._pump(force=True)
        for folder in self._started:
            folder.stop_following()
            folder.follower = None  # the next start follows the next attempt afresh
        ended = parallel(
            lambda f: f.end(
                _end_args(handle, f, run_id, grace),
                self.cfg.connect_timeout + grace + 20,
                finish=False,
            ),
            self._started,
        )
        failed = [
            f"{f.label}: {a}" for f, a in zip(self._started, ended) if isinstance(a, TrainerError)
        ]
        if failed:
            raise TargetError(
                "the attempt's processes could not be stopped on every node: " + "; ".join(failed)
            )
        done = {f.label: a for f, a in zip(self._started, ended) if not isinstance(a, TrainerError)}
        return {
            "nodes": {label: {"sigkilled": a[0].get("sigkilled", [])} for label, a in done.items()}
        }

    def _node_of(self, handle: Handle | None, record: dict[str, Any]) -> HostConfig | None:
        """The node a rank runs on: the one whose pre-flight found the hostname it recorded."""
        by_name: dict[Any, str] = {}
        for label, facts in ((handle or {}).get("preflight") or {}).items():
            by_name.setdefault(facts.get("hostname"), label)
        hosts = {h.host: h for h in self.cfg.hosts}
        return hosts.get(by_name.get(record.get("host")) or "")

    def reaches(self, handle: Handle | None, node: str, host: str, port: int) -> str | None:
        """``reach_probe`` on ``node``, over its ssh connection."""
        found = {h.host: h for h in self.cfg.hosts}.get(node)
        if found is None:
            return None
        try:
            done = self._client(found).run(reach_probe(host, port), timeout=30, what="a probe")
        except TargetError as exc:
            return f"cannot ask the node: {exc}"
        if done.returncode == 0:
            return None
        said = (done.stdout or done.stderr).decode(errors="replace").strip()
        return said[-300:] or f"the probe exited with {done.returncode}"

    def debug_relay(self, handle: Handle | None, record: dict[str, Any]) -> Any:
        """``ssh NODE python3 -c RELAY SOCKET``, over the rank's node's ssh connection."""
        node = self._node_of(handle, record)
        if node is None:
            raise TargetError(f"no node of target {self.name} is {record.get('host')}")
        pipe = subprocess.PIPE
        return self._client(node).popen(relay_command(record), stdin=pipe, stdout=pipe, stderr=pipe)

    def stacks(self, handle: Handle | None, ranks: dict[int, dict[str, Any]]) -> dict[int, str]:
        """Each rank's stack by ``py-spy dump`` on its node (``_node_of``), over that node's
        ssh connection."""
        found = {}
        for rank, record in ranks.items():
            node = self._node_of(handle, record)
            if node is None:
                found[rank] = f"(no stack: no node of target {self.name} is {record.get('host')})"
                continue
            label = node.host
            try:
                done = self._client(node).run(
                    shlex.join(procs.py_spy_argv((handle or {}).get("python"), record.get("pid"))),
                    timeout=60,
                    what="py-spy",
                )
            except TargetError as exc:
                found[rank] = f"(no stack: {exc})"
                continue
            out = done.stdout.decode(errors="replace")
            found[rank] = (
                out
                if done.returncode == 0
                else (
                    f"(no stack: py-spy failed on {label}: "
                    f"{(done.stderr.decode(errors='replace') or out).strip()[-400:]})"
                )
            )
        return found

    def leftovers(self, run_id: str) -> list[str]:
        """Processes of the run still alive on each node; a node that cannot be asked is
        reported as not verified. Right after ``stop``, its own final check is the answer."""
        if self._fresh_leftovers:
            self._fresh_leftovers = False
            found = [f"{host}: {line}" for host, left in self._left.items() for line in left]
            found += [
                f"{f.label}: not verified: the node did not answer when the run ended"
                for f in self._started
                if f.label not in self._left
            ]
            return found
        found = []
        for folder, result in zip(
            self._started, parallel(lambda f: f.leftovers(run_id), self._started)
        ):
            if isinstance(result, TrainerError):
                found.append(f"{folder.label}: not verified: {result}")
            else:
                found += [f"{folder.label}: {line}" for line in result]
        return found

    def collect(self, handle: Handle) -> dict[str, Any]:
        """Each node's outputs/ (taken by ``stop``) merged here, node 0 first; the last bytes
        of the logs and events came with them."""
        self._closed = True  # the follow sessions stay open for discard_workdirs
        if self._files is None:
            return {}
        report: dict[str, Any] = {}
        for folder in self._started:
            merged = folder.collect()
            report[folder.label] = (
                merged
                if merged is not None
                else {
                    "error": "the node did not answer when the run ended; its last logs and "
                    "outputs are still there"
                }
            )
        self._files.flush_partial()
        return {"nodes": report, "mirrored_bytes": self._files.bytes_written}

    def snapshot_hashes(self, handle: Handle) -> dict[str, str | None]:
        return dict(folder.snapshot_hash() for folder in self._started)

    def discard_workdirs(self, handle: Handle | None, run_dir: str) -> dict[str, Any]:
        """Each node's ``<run>/work/``, removed by the node's agent (asked through the
        node's follow session, still open after the end, or in a call of its own)."""
        report: dict[str, Any] = {"removed": []}
        for result in parallel(lambda f: f.discard(), self._started):
            if isinstance(result, TrainerError):
                report.setdefault("errors", []).append(str(result))
            else:
                report["removed"] += result
        return report

    def release(self, handle: Handle | None) -> None:
        for folder in self._folders:
            folder.stop_following()

    def _log(self, text: str) -> None:
        if self._files is not None:
            self._files.log(text if text.endswith("\n") else text + "\n")


def _end_args(handle: Handle, folder: RemoteFolder, run_id: str, grace: float) -> dict[str, Any]:
    """What a node's ``stop`` or ``finish`` needs: the run, its launcher's ids there."""
    ids: dict[str, Any] = next(
        (n for n in handle.get("nodes", []) if n.get("host") == folder.label), {}
    )
    return {
        "run_id": run_id,
        "pgid": ids.get("pgid"),
        "start_ticks": ids.get("start_ticks"),
        "grace": grace,
        "outputs": True,
        "run_dir": folder.run_dir,
    }
