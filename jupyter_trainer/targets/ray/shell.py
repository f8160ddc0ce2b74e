"""A Ray node behind the interface of ``SshClient``: the node agent's calls and follow
sessions go through the run's node-shell actor (ray_actor.py) instead of ssh, so the
ssh target's staging, launch, live mirror and teardown work on Ray nodes unchanged.

``popen`` gives a Popen-like object whose ``stdout``/``stderr`` are real pipes, fed by a
thread that pulls chunks from the actor, and whose ``stdin`` is a pipe a thread forwards to
the actor: ``NodeFollower`` reads and writes them exactly as it does an ssh session. Once
the run's actors are gone, ``run`` goes through a one-off task pinned to the same node (the
leftover scan, removing working directories).
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from ...core.errors import TargetError

READ_WAIT_S = 0.5  # how long one read waits in the actor for new output
EXTRA_S = 15  # what a call may take beyond its own timeout (scheduling, transport)


def _ray():
    import ray

    return ray


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


@dataclass
class RayShell:
    """One node of a Ray run: its label, the actor on it (None once it is gone) and where the
    node is (Ray's node id, its address)."""

    host: str
    node_id: str
    address: str
    actor: Any = None

    def run(
        self,
        remote: str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        what: str = "a command",
    ) -> subprocess.CompletedProcess:
        ray = _ray()
        if self.actor is not None:
            ref = self.actor.run.remote(remote, input, timeout)
        else:
            ref = pinned_task(self.node_id).remote(remote, input, timeout)
        try:
            code, out, err = ray.get(ref, timeout=timeout + EXTRA_S)
        except ray.exceptions.GetTimeoutError as exc:
            ray.cancel(ref, force=True)
            raise TargetError(
                f"node {self.host}: {what} did not finish within {timeout:.0f} s"
            ) from exc
        except ray.exceptions.RayError as exc:
            raise TargetError(
                f"node {self.host}: {what} failed: the node's Ray worker is gone ({_short(exc)})"
            ) from exc
        if code is None:
            raise TargetError(f"node {self.host}: {what} did not finish within {timeout:.0f} s")
        return subprocess.CompletedProcess(remote, code, out, err)

    def popen(self, remote_command: str, **_kwargs: Any) -> RayPopen:
        if self.actor is None:
            raise TargetError(f"node {self.host}: the run's actor is gone; nothing to follow")
        return RayPopen(self, remote_command)

    def resolve(self) -> dict[str, list[str]]:
        return {"hostname": [self.address]}

    def close(self) -> None:
        pass


def pinned_task(node_id: str):
    """``run_command`` as a task that runs on ``node_id`` and nowhere else, using no CPU."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ...rankside.programs.ray_actor import run_command

    return ray.remote(run_command).options(
        num_cpus=0,
        max_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    )


def pinned_call(node_id: str, fn: Any, arg: Any, timeout: float) -> Any:
    """``fn(arg)`` as a one-off task on ``node_id``; a TargetError when Ray cannot run it."""
    ray = _ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ref = (
        ray.remote(fn)
        .options(
            num_cpus=0,
            max_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        )
        .remote(arg)
    )
    try:
        return ray.get(ref, timeout=timeout)
    except ray.exceptions.RayError as exc:
        raise TargetError(f"Ray node {node_id[:8]} did not answer: {_short(exc)}") from exc


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class RayPopen:
    """A session of the node-shell actor, as much of ``subprocess.Popen`` as a follower uses."""

    def __init__(self, shell: RayShell, remote: str) -> None:
        ray = _ray()
        self.shell = shell
        self.args = remote
        self.returncode: int | None = None
        try:
            self.sid = ray.get(shell.actor.open.remote(remote), timeout=60)
        except ray.exceptions.RayError as exc:
            raise TargetError(f"node {shell.host}: cannot open a session: {_short(exc)}") from exc
        out_r, self._out_w = os.pipe()
        err_r, self._err_w = os.pipe()
        in_r, in_w = os.pipe()
        self.stdout = os.fdopen(out_r, "rb", buffering=0)
        self.stderr = os.fdopen(err_r, "rb", buffering=0)
        self.stdin = os.fdopen(in_w, "wb", buffering=0)
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._pull, name=f"ray-pull-{shell.host}", daemon=True)
        self._pump.start()
        threading.Thread(
            target=self._push, args=(in_r,), name=f"ray-push-{shell.host}", daemon=True
        ).start()

    def _pull(self) -> None:
        ray = _ray()
        code: int | None = None
        try:
            while code is None and not self._stop.is_set():
                out, err, code = ray.get(
                    self.shell.actor.read.remote(self.sid, 1 << 20, READ_WAIT_S),
                    timeout=READ_WAIT_S + EXTRA_S,
                )
                if out:
                    _write_all(self._out_w, out)
                if err:
                    _write_all(self._err_w, err)
        except (ray.exceptions.RayError, OSError) as exc:
            code = 1
            try:
                _write_all(self._err_w, f"the node's Ray worker is gone: {_short(exc)}\n".encode())
            except OSError:
                pass
        finally:
            for fd in (self._out_w, self._err_w):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.returncode = -9 if code is None else code

    def _push(self, fd: int) -> None:
        ray = _ray()
        try:
            while data := os.read(fd, 1 << 16):
                ray.get(self.shell.actor.write.remote(self.sid, data), timeout=EXTRA_S)
            ray.get(self.shell.actor.write.remote(self.sid, b""), timeout=EXTRA_S)
        except (ray.exceptions.RayError, OSError):
            pass
        finally:
            os.close(fd)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._pump.join(timeout)
        if self._pump.is_alive():
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        ray = _ray()
        self._stop.set()
        try:
            ray.get(self.shell.actor.close.remote(self.sid), timeout=EXTRA_S)
        except ray.exceptions.RayError:
            pass
