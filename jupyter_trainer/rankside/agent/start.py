"""``start``: the run folder prepared on this node (its folders, the snapshot linked as
``code``, the files the run needs), a hot run's pool readied, and the launcher started
detached under a keeper that records its exit and ends it when nobody follows the run."""

import json
import os
import signal
import time

from ..host.atomic import write_atomic
from ..host.procs import become_subreaper, start_ticks
from .frames import answer
from .processes import killpg, record_orphans


def start(workdir, spec):
    """Prepare the run folder; with a launcher, start it detached and answer its ids."""
    run_dir = spec["run_dir"]
    for sub in ("logs", "events", "ranks", "outputs"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    code = os.path.join(run_dir, "code")
    if not os.path.lexists(code):
        os.symlink(os.path.join(workdir, "snapshots", spec["snapshot"]), code)
    blobs = {rel: __import__("base64").b64decode(b) for rel, b in spec.get("blobs", {}).items()}
    for rel, text in dict(spec.get("files", {}), **blobs).items():  # blobs: a resumed checkpoint
        if rel.startswith("/") or ".." in rel.split("/"):
            raise SystemExit("refusing to write %r outside the run folder" % rel)
        os.makedirs(os.path.dirname(os.path.join(run_dir, rel)), exist_ok=True)
        mode = 0o755 if rel.startswith("bin/") else 0o600 if rel == "secrets.json" else 0o644
        write_atomic(os.path.join(run_dir, rel), text, mode=mode)
    touch(os.path.join(run_dir, "lease"))
    if "warm" in spec:  # a hot run: its rank pool readied on every node before any launcher
        done = __import__("subprocess").run(
            spec["warm"], cwd=run_dir, stdout=-1, stderr=-1, stdin=-3
        )
        said = (done.stdout.strip().splitlines() or [b""])[-1]
        return answer(
            json.loads(said)
            if said.startswith(b"{")
            else {
                "ok": False,
                "why": (
                    done.stderr.decode(errors="replace").strip() or "exit %d" % done.returncode
                )[-800:],
            }
        )
    if "argv" not in spec:
        return answer({"prepared": True})
    earlier = os.path.join(run_dir, "node-%d.exit" % spec["node"])  # a relaunch's last end
    if os.path.exists(earlier):
        os.unlink(earlier)
    read, write = os.pipe()
    if os.fork() == 0:  # the keeper: owns the launcher, records its exit, ends orphans
        os.close(read)
        try:
            _keeper(spec, write)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        data = fh.read()
    answer(json.loads(data) if data else {"error": "the launcher did not start"})


def _keeper(spec, report_fd):
    import subprocess

    os.setsid()
    become_subreaper()  # a rank's orphan stays below this process, whatever session it made
    node = spec["node"]
    run_dir = spec["run_dir"]
    log = os.open(
        os.path.join(run_dir, "logs", "launcher-%d.log" % node),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o644,
    )
    null = os.open(os.devnull, os.O_RDWR)
    for fd, src in ((0, null), (1, log), (2, log)):  # let go of the ssh session's pipes
        os.dup2(src, fd)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
    env = dict(spec.get("env_defaults", {}), **env)
    env.update(spec["env"])
    if spec.get("path_prepend"):
        env["PATH"] = os.pathsep.join(spec["path_prepend"] + [env.get("PATH", os.defpath)])
    exit_path = os.path.join(run_dir, "node-%d.exit" % node)
    try:
        child = subprocess.Popen(
            spec["argv"],
            env=env,
            cwd=spec["cwd"],
            stdin=null,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        os.write(
            report_fd,
            json.dumps({"error": "cannot start %s: %s" % (spec["argv"][0], exc)}).encode(),
        )
        return
    ticks = start_ticks(child.pid)
    ids = {
        "pid": child.pid,
        "pgid": child.pid,
        "start_ticks": ticks,
        "keeper": os.getpid(),
        "keeper_ticks": start_ticks(os.getpid()),
    }
    write_atomic(os.path.join(run_dir, "node-%d.json" % node), json.dumps(ids))
    os.write(report_fd, json.dumps(ids).encode())
    os.close(report_fd)
    lease = os.path.join(run_dir, "lease")
    orphaned, deadline = False, 0.0  # deadline: when the orphaned run is killed
    while True:
        try:
            code = child.wait(timeout=2.0)
            break
        except subprocess.TimeoutExpired:
            pass
        try:
            idle = time.time() - os.stat(lease).st_mtime
        except OSError:
            idle = 0.0
        if not orphaned and idle > spec.get("orphan_timeout", 300):
            # Nobody has followed this run for that long: its supervisor is gone. End it,
            # as a local run ends when its supervisor dies.
            orphaned, deadline = True, time.monotonic() + 10
            killpg(child.pid, ticks, signal.SIGTERM)
        elif orphaned and time.monotonic() > deadline:
            killpg(child.pid, ticks, signal.SIGKILL)
    record_orphans(run_dir, node, os.getpid())
    write_atomic(
        exit_path, json.dumps({"exit_code": code, "ended": time.time(), "orphaned": orphaned})
    )


def touch(path):
    """The run's lease: its time says when someone last followed the run here."""
    with open(path, "a"):
        os.utime(path)
