"""A Slurm run whose folder lives on the cluster, under the target's ``workdir``.

Used when the target has a ``login`` node (reached with the system OpenSSH client) or a
``workdir`` that is not the run store. The node layer's ``RemoteFolder``, as for
each node of an ssh target, does the work on the login node, or on this machine through
``/bin/sh``:

- ``check_cluster`` (the target's ``plan``): pre-flight (the interpreter, the imports,
  the Slurm commands, a writable workdir);
- ``realise`` (``build_environment``): the run's locked environment built under
  ``<workdir>/envs`` (on the shared filesystem, so the compute nodes see it);
- ``send`` (``stage``): the snapshot sent to ``<workdir>/snapshots/<hash>`` unless it is
  there already;
- ``open`` (``start``): ``<workdir>/runs/<id>/`` with ``code`` -> the snapshot,
  ``spec.json`` and the batch script, before ``sbatch``.
- ``pump``: new bytes of the ranks' logs, events and records (and of the job's output,
  ``logs/launcher-0.log``) copied into the local run folder while the job runs.
- ``finish``/``collect``: the last bytes, ``outputs/`` and ``logs/user/`` brought back when
  the run ends, with the content hash of the snapshot there; ``discard``: the run's working
  directories removed (the run ended well).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...nodes.folder import RemoteFolder
from ...nodes.mirror import LocalFiles
from ...nodes.prepare import required_modules, snapshot_tarball
from ...nodes.transport import NodeShell
from ..base import BuiltEnvironment

JOB_OUTPUT = "logs/launcher-0.log"  # followed like a launcher's log, prefixed in launcher.log


class ClusterFolder(RemoteFolder):
    """The run's folder on the cluster, reached through ``shell``: one ``RemoteFolder``
    whose launcher is ``sbatch``, so its checks and messages say "submitted"."""

    def __init__(
        self,
        shell: NodeShell,
        python: str,
        workdir: str,
        local_run_dir: str,
        *,
        tools: Sequence[str],
        timeout: int,
        env_timeout: int,
        uv: str | None,
        lost_after: int,
    ) -> None:
        super().__init__(
            shell,
            python,
            workdir,
            LocalFiles(local_run_dir),
            timeout=timeout,
            lost_after=lost_after,
            env_timeout=env_timeout,
            uv=uv,
        )
        self.tools = list(tools)
        self.environment: BuiltEnvironment | None = None
        self._modules: tuple[list[str], list[str]] = ([], [])
        self._started = 0.0
        self.staged: dict[str, Any] = {}

    def _log(self, text: str) -> None:
        self.files.log(text + "\n")

    # -- before sbatch -----------------------------------------------------------------
    def check_cluster(self, spec: RunSpec, run_id: str) -> None:
        """The pre-flight on the cluster side: the interpreter, the imports (those of the
        environment later, with ``--env``), the Slurm commands, a writable workdir."""
        self._modules = required_modules(spec, self.files.root / "code")
        modules, versions = self._modules
        named = spec.env.name is not None
        self._started = time.monotonic()
        self.preflight(
            run_id,
            spec.code.hash,
            {
                "modules": [] if named else modules,
                "versions": [] if named else versions,
                "tools": self.tools,
            },
        )
        self._judge()

    def realise(self, spec: RunSpec) -> BuiltEnvironment:
        """The run's locked environment, built (or found) under ``<workdir>/envs``."""
        modules, versions = self._modules
        built = self.build_environment(spec.env, {"modules": modules, "versions": versions})
        self._judge()
        self.environment = BuiltEnvironment(
            python=built["python"],
            env_id=built.get("env_id"),
            built=built.get("built"),
            build_seconds=built.get("build_seconds") if built.get("built") else None,
            built_at=built.get("built_at"),
            python_version=self.info["python"],
            torch=self.info["versions"].get("torch"),
            on=self.label,
        )
        return self.environment

    def send(self, spec: RunSpec) -> None:
        """Say what the cluster side is, then send the snapshot unless it is there."""
        self._log(
            f"[jt] {self.label}: workdir {self.info['workdir']}, python "
            f"{self.info['python']}"
            + (
                f", environment {spec.env.name!r} {'built' if self.environment.built else 'cached'}"
                if self.environment
                else ""
            )
            + f" ({time.monotonic() - self._started:.2f} s)"
        )
        self._stage(self.files.root / "code")

    def _judge(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise TargetError(f"{problem}; nothing was submitted")

    def _stage(self, code: Path) -> None:
        if self.has_snapshot:
            self.staged = {"snapshot": self.snapshot, "sent": False}
            return
        started = time.monotonic()
        payload = snapshot_tarball(code)
        self.stage(payload)
        self.staged = {
            "snapshot": self.snapshot,
            "sent": True,
            "bytes": len(payload),
            "seconds": round(time.monotonic() - started, 3),
        }
        self._log(
            f"[jt] snapshot {self.snapshot} ({len(payload)} bytes) sent to "
            f"{self.label} in {self.staged['seconds']} s"
        )

    def open(self, files: dict[str, str], blobs: dict[str, str] | None = None) -> None:
        """The run folder on the cluster, with ``files`` (and base64 ``blobs``) in it, then
        the live copy."""
        self.start(
            {
                "run_dir": self.run_dir,
                "snapshot": self.snapshot,
                "files": files,
                **({"blobs": blobs} if blobs else {}),
            },
            "preparing the run folder",
        )
        self.follow()

    # -- at the end --------------------------------------------------------------------
    def finish(self, run_id: str, grace: float) -> dict[str, Any]:
        """The last bytes of the files, ``outputs/`` and what of the run is still alive on
        the shell's host, in one answer; asked once, through the follow session if it is up."""
        if self.finished is None and self.follower is not None:
            args = {"run_id": run_id, "grace": grace, "outputs": True}
            got = None
            if self.request_finish(args):
                got = self.await_finish(self.timeout + grace + 30)
            self.stop_following()
            if got is None:
                self.end(args, self.timeout + 600)
        answer = self.finished[0] if self.finished else {}
        return {"sigkilled": answer.get("sigkilled", []), "leftovers": answer.get("leftovers", [])}

    def report(self) -> dict[str, Any]:
        """What ``collect`` brought back, for the run's state."""
        report = self.collect()
        if report is None:
            return {
                "error": f"{self.label} did not answer when the run ended; the last logs "
                f"and outputs are still in {self.run_dir}"
            }
        self.files.flush_partial()
        return {
            **report,
            "from": f"{self.label}:{self.run_dir}",
            "mirrored_bytes": self.files.bytes_written,
        }

    def snapshot_hashes(self) -> dict[str, str | None]:
        """The snapshot the ranks started from, as ``finish`` found it (None: no answer)."""
        where, digest = self.snapshot_hash()
        return {where: digest}

    def discard_all(self) -> dict[str, Any]:
        return {"removed": self.discard()}
