"""A Slurm run whose folder lives on the cluster, under the target's ``workdir``.

Used when the target has a ``login`` node (reached with the system OpenSSH client) or a
``workdir`` that is not the run store. The same node agent as the ssh target
(nodes/agent.py) does the work on the login node, or on this machine through ``/bin/sh``:

- ``prepare``: pre-flight (the interpreter, the imports, the Slurm commands, a writable
  workdir); the run's locked environment built under ``<workdir>/envs`` (on the shared
  filesystem, so the compute nodes see it); the snapshot sent to
  ``<workdir>/snapshots/<hash>`` unless it is there already.
- ``start``: ``<workdir>/runs/<id>/`` with ``code`` -> the snapshot, ``spec.json`` and the
  batch script, before ``sbatch``.
- ``pump``: new bytes of the ranks' logs, events and records (and of the job's output,
  ``logs/launcher-0.log``) copied into the local run folder while the job runs.
- ``finish``/``collect``: the last bytes, ``outputs/`` and ``logs/user/`` brought back when
  the run ends, with the content hash of the snapshot there; ``discard``: the run's working
  directories removed (the run ended well).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import TargetError
from ..spec import RunSpec
from ..nodes import calls
from ..nodes.commands import agent_command, snapshot_dir_name
from ..nodes.frames import FrameReader, parse_answer
from ..nodes.mirror import LocalFiles, NodeFollower, merge_outputs
from ..nodes.prepare import judge, required_modules, snapshot_tarball
from ..nodes.transport import NodeShell

JOB_OUTPUT = "logs/launcher-0.log"  # followed like a launcher's log, prefixed in launcher.log


class ClusterFolder:
    """The run's folder on the cluster, reached through ``shell``."""

    def __init__(self, shell: NodeShell, python: str, workdir: str, *, tools: Sequence[str],
                 timeout: int, env_timeout: int, uv: str | None, lost_after: int) -> None:
        self.shell = shell
        self.python = python
        self.workdir = workdir
        self.tools = list(tools)
        self.timeout = timeout
        self.env_timeout = env_timeout
        self.uv = uv
        self.lost_after = lost_after
        self.info: dict[str, Any] = {}
        self.run_id = ""
        self.snapshot = ""
        self.files: LocalFiles | None = None
        self.follower: NodeFollower | None = None
        self.environment: dict[str, Any] | None = None
        self.staged: dict[str, Any] = {}
        self.finished: tuple[dict[str, Any], bytes] | None = None

    @property
    def label(self) -> str:
        return self.shell.host

    @property
    def run_dir(self) -> str:
        return f"{self.info['workdir']}/runs/{self.run_id}"

    def _agent(self, sub: str, args: dict[str, Any] | None = None, python: str | None = None) -> str:
        return agent_command(python or self.python, self.info["agent"], self.info["workdir"],
                             sub, args)

    def _log(self, text: str) -> None:
        if self.files is not None:
            self.files.log(text + "\n")

    # -- before sbatch -----------------------------------------------------------------
    def prepare(self, spec: RunSpec, run_id: str, local_run_dir: str) -> str:
        """Check the cluster side, build the environment, send the snapshot; returns the
        interpreter the ranks run."""
        self.run_id = run_id
        self.files = LocalFiles(local_run_dir)
        self.snapshot = snapshot_dir_name(spec.code.hash)
        code = Path(local_run_dir) / "code"
        modules, versions = required_modules(spec, code)
        named = spec.env.name is not None
        started = time.monotonic()
        self.info = calls.preflight(
            self.shell, self.python, self.workdir,
            {"modules": [] if named else modules, "versions": [] if named else versions,
             "snapshot": self.snapshot, "tools": self.tools}, self.timeout + 60)
        self._judge()
        python = self.python
        if named:
            answer = calls.build_environment(
                self.shell, self.python, self.info["agent"], self.info["workdir"], spec.env,
                {"modules": modules, "versions": versions}, uv=self.uv,
                timeout=self.timeout + self.env_timeout)
            built, checked = answer["environment"], answer["check"]
            self.info.update({k: checked[k] for k in ("python", "executable", "missing",
                                                      "versions")})
            self._judge()
            python = built["python"]
            self.environment = {
                "python": python, "env_id": built.get("env_id"), "built": built.get("built"),
                "build_seconds": built.get("build_seconds") if built.get("built") else None,
                "built_at": built.get("built_at"), "python_version": checked["python"],
                "torch": checked["versions"].get("torch"), "on": self.label}
        self._log(f"[jt] {self.label}: workdir {self.info['workdir']}, python "
                  f"{self.info['python']}"
                  + (f", environment {spec.env.name!r} "
                     f"{'built' if self.environment['built'] else 'cached'}"
                     if self.environment else "")
                  + f" ({time.monotonic() - started:.2f} s)")
        self._stage(code)
        return python

    def _judge(self) -> None:
        problem = judge(self.label, self.info, 0)
        if problem is not None:
            raise TargetError(f"{problem}; nothing was submitted")

    def _stage(self, code: Path) -> None:
        if self.info.get("snapshot"):
            self.staged = {"snapshot": self.snapshot, "sent": False}
            return
        started = time.monotonic()
        payload = snapshot_tarball(code)
        calls.send_snapshot(self.shell, self.python, self.info["agent"],
                                  self.info["workdir"], self.snapshot, payload,
                                  self.timeout + 600)
        self.staged = {"snapshot": self.snapshot, "sent": True, "bytes": len(payload),
                       "seconds": round(time.monotonic() - started, 3)}
        self._log(f"[jt] snapshot {self.snapshot} ({len(payload)} bytes) sent to "
                  f"{self.label} in {self.staged['seconds']} s")

    def start(self, files: dict[str, str]) -> None:
        """The run folder on the cluster, with ``files`` in it, then the live copy."""
        payload = {"run_dir": self.run_dir, "snapshot": self.snapshot, "files": files}
        done = self.shell.run(self._agent("start"), input=json.dumps(payload).encode(),
                              timeout=self.timeout + 60, what="preparing the run folder")
        parse_answer(self.label, done, "preparing the run folder")
        assert self.files is not None
        self.follower = NodeFollower(
            self.shell, lambda: self._agent("follow", {"run_dir": self.run_dir, "node": 0}),
            0, self.label, self.files, self.lost_after)
        self.follower.start()

    # -- while the job runs ------------------------------------------------------------
    def pump(self) -> None:
        if self.follower is not None and self.finished is None:
            self.follower.pump()

    # -- at the end --------------------------------------------------------------------
    def finish(self, run_id: str, grace: float) -> dict[str, Any]:
        """The last bytes of the files, ``outputs/`` and what of the run is still alive on
        the shell's host, in one answer; asked once, through the follow session if it is up."""
        if self.finished is None and self.follower is not None:
            args = {"run_id": run_id, "grace": grace, "outputs": True}
            got = None
            if self.follower.request_finish(args):
                got = self.follower.await_finish(self.timeout + grace + 30)
            self.follower.kill()
            if got is None:
                got = self._finish_call(args)
            self.finished = got
        answer = self.finished[0] if self.finished else {}
        return {"sigkilled": answer.get("sigkilled", []), "leftovers": answer.get("leftovers", [])}

    def _finish_call(self, args: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        assert self.files is not None
        offsets = json.dumps({"offsets": self.files.resume_offsets(0)}).encode() + b"\n"
        done = self.shell.run(self._agent("finish", dict(args, run_dir=self.run_dir, node=0)),
                              input=offsets, timeout=self.timeout + 600, what="ending the run")
        answer = parse_answer(self.label, done, "ending the run")
        tar = bytearray()
        for header, payload in FrameReader().feed(done.stdout):
            if header.get("t") == "tar":
                tar += payload
            elif header.get("t") not in ("status", "finished"):
                self.files.apply(0, self.label, header, payload)
        return answer, bytes(tar)

    def collect(self) -> dict[str, Any]:
        if self.files is None:
            return {}
        if self.finished is None:
            return {"error": f"{self.label} did not answer when the run ended; the last logs "
                             f"and outputs are still in {self.run_dir}"}
        report = merge_outputs(self.finished[1], self.files.root)
        self.files.flush_partial()
        return {**report, "from": f"{self.label}:{self.run_dir}",
                "mirrored_bytes": self.files.bytes_written}

    def snapshot_hashes(self) -> dict[str, str | None]:
        """The snapshot the ranks started from, as ``finish`` found it (None: no answer)."""
        seen = (self.finished[0] if self.finished else {}).get("snapshot")
        where = seen["path"] if seen else f"{self.info.get('workdir')}/snapshots/{self.snapshot}"
        return {f"{self.label}:{where}": seen["hash"] if seen else None}

    def discard(self) -> dict[str, Any]:
        done = self.shell.run(self._agent("discard", {"run_dir": self.run_dir}),
                              timeout=self.timeout + 60, what="removing the working directories")
        answer = parse_answer(self.label, done, "removing the working directories")
        return {"removed": [f"{self.label}:{p}" for p in answer.get("removed", [])]}
