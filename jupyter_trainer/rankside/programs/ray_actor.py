"""What runs on the nodes of a Ray cluster for a Ray run: a small shell, as a Ray actor (one
per bundle of the run's placement group) or as a one-off task pinned to a node.

It runs the node agent (rankside/agent/) exactly as the ssh target runs it over ssh: a command
line made by ``shlex.join``, split back into the same argv here and executed without a
shell, with a payload on stdin and the agent's frames on stdout. A streaming session (the
agent's ``follow``) is opened, read in chunks, written to and closed by id.

Standard library only (``ray`` is imported inside the calls, where it is always there): the
driver pickles this module by value, so the cluster's nodes need no jupyter_trainer.
"""

import itertools
import os
import shlex
import subprocess
import sys
import threading
import time


def run_command(command, input=None, timeout=60.0):
    """Run one agent call; (exit code or None when it timed out, stdout, stderr)."""
    try:
        done = subprocess.run(
            shlex.split(command),
            input=input,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        return None, exc.stdout or b"", exc.stderr or b""
    except OSError as exc:
        return 127, b"", ("cannot run %s: %s" % (shlex.split(command)[:1], exc)).encode()
    return done.returncode, done.stdout, done.stderr


def _start_ticks(pid):
    """When ``pid`` started (clock ticks since boot), or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def node_facts():
    """Where this code runs: Ray's node id and address, its python, and this process (its
    pid and start time, by which the run checks at the end that the actor is gone)."""
    import ray

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "address": ray.util.get_node_ip_address(),
        "python": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
        "pid": os.getpid(),
        "started": _start_ticks(os.getpid()),
        "cpus": os.cpu_count() or 1,
    }


def still_running(processes):
    """Of ``[(pid, start ticks), ...]``, those still alive on this node, described."""
    alive = []
    for pid, ticks in processes:
        if ticks is not None and _start_ticks(pid) == ticks:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as fh:
                    words = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                words = ""
            alive.append("pid %d: %s" % (pid, words[:200]))
    return alive


def probe():
    """What a run needs to know of a node before anything starts: its python and torch."""
    import importlib.util

    facts = node_facts()
    torch = None
    if importlib.util.find_spec("torch") is not None:
        try:
            from importlib.metadata import version

            torch = version("torch")
        except Exception:
            torch = "unknown"
    facts["torch"] = torch
    return facts


class _Session:
    """One long-lived process; its output is kept in memory until read."""

    def __init__(self, command):
        self.proc = subprocess.Popen(
            shlex.split(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdin = self.proc.stdin
        if stdin is None:  # not with stdin=PIPE; says so to the type checker
            raise OSError(f"no pipe to the stdin of {command!r}")
        self.stdin = stdin
        self.out, self.err = bytearray(), bytearray()
        self.ready = threading.Condition()
        self.open_streams = 2
        for stream, buf in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._drain, args=(stream, buf), daemon=True).start()

    def _drain(self, stream, buf):
        fd = stream.fileno()
        while True:
            try:
                data = os.read(fd, 1 << 20)
            except OSError:
                data = b""
            with self.ready:
                if data:
                    buf += data
                else:
                    self.open_streams -= 1
                self.ready.notify_all()
            if not data:
                return

    def read(self, max_bytes, wait):
        deadline = time.monotonic() + wait
        with self.ready:
            while not self.out and not self.err and self.open_streams:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.ready.wait(left)
            out, err = bytes(self.out[:max_bytes]), bytes(self.err[:max_bytes])
            del self.out[: len(out)]
            del self.err[: len(err)]
            drained = not self.open_streams and not self.out and not self.err
        code = self.proc.poll() if drained else None
        if drained and code is None:
            code = self.proc.wait()
        return out, err, code

    def write(self, data):
        try:
            if data:
                self.stdin.write(data)
                self.stdin.flush()
            else:
                self.stdin.close()
        except (OSError, ValueError):
            return False
        return True

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class NodeActor:
    """The actor: ``run`` one command, or ``open``/``read``/``write``/``close`` a session.
    Threaded (``max_concurrency``), so a long call never holds up a session's reads.

    With ``idle_exit`` (seconds), it is a node's shell shared by the runs that come one after
    another (a detached actor): it ends itself once nothing has used it for that long."""

    def __init__(self, idle_exit=0.0):
        self._sessions = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._busy, self._used = 0, time.monotonic()
        self._ending = False
        if idle_exit:
            threading.Thread(target=self._expire, args=(idle_exit,), daemon=True).start()

    def _expire(self, idle_exit):
        while True:
            time.sleep(min(5.0, idle_exit / 4))
            with self._lock:
                idle = (
                    not self._busy
                    and not self._sessions
                    and (time.monotonic() - self._used > idle_exit)
                )
                self._ending = idle
            if idle:
                import ray

                try:
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                except Exception:
                    pass
                time.sleep(5.0)
                os._exit(0)  # ray.kill did not end this process

    def facts(self, hold=0.0):
        """The node's facts, for a run that has just found this shell: it stays at least
        ``hold`` seconds more, until the run's first calls. None when the shell has already
        decided to end itself: the run then asks for a new one."""
        with self._lock:
            if self._ending:
                return None
            self._used = max(self._used, time.monotonic() + hold)
        return node_facts()

    def run(self, command, input=None, timeout=60.0):
        with self._lock:
            self._busy += 1
        try:
            return run_command(command, input, timeout)
        finally:
            with self._lock:
                self._busy, self._used = self._busy - 1, time.monotonic()

    def open(self, command):
        session = _Session(command)
        with self._lock:
            sid = next(self._ids)
            self._sessions[sid] = session
        return sid

    def read(self, sid, max_bytes=1 << 20, wait=0.5):
        self._used = time.monotonic()
        session = self._sessions.get(sid)
        if session is None:
            return b"", b"no such session\n", -1
        return session.read(max_bytes, wait)

    def write(self, sid, data):
        session = self._sessions.get(sid)
        return session.write(data) if session is not None else False

    def close(self, sid):
        with self._lock:
            session = self._sessions.pop(sid, None)
            self._used = time.monotonic()
        if session is not None:
            session.close()
        return True
