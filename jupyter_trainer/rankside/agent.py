"""The agent that runs on each node: ``python jt-node-<hash>.pyz --workdir W SUB ARGS``.

Standard library only (Python 3.8+), installed once under ``W/bin/``, run with the node's
python. ARGS is one JSON argv element, payloads come on stdin, answers are frames on stdout
(``\x1eJT {json}`` then ``n`` raw bytes; the marker skips what a login shell's rc prints).
SUB: ``preflight`` (interpreter, imports, GPUs, tools, a port, an intact snapshot; with
``session`` it then serves ``stage``, ``start``, ``follow``), ``stage``, ``environment``,
``start`` (the launcher under a keeper), ``follow`` (logs, events, rank records; ``finish``,
``discard``), ``finish``, ``stop``, ``leftovers`` (process group, JT_RUN_ID, pool record)."""

import io
import json
import os
import re
import signal
import sys
import time  # the rest where needed: every call starts an agent

MARK = b"\x1eJT "
CHUNK = 1 << 20
REPLACED = re.compile(r"ranks/rank-\d+(?:\.attempt-\d+)?\.json|events/rank-\d+\.beat")
FOLLOWED = re.compile(
    r"logs/rank-\d+\.(?:log|times)|events/rank-\d+\.jsonl|logs/launcher-\d+\.log|"
    + REPLACED.pattern
)
HEARTBEAT_S, PASS_S = 1.0, 0.05  # a launcher's exit is seen within PASS_S


def frame(header, payload=b""):
    header = dict(header, n=len(payload))
    sys.stdout.buffer.write(MARK + json.dumps(header).encode() + b"\n" + payload)


def answer(data):
    frame(data)
    sys.stdout.buffer.flush()


def start_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def alive(pid, ticks=None):
    now = start_ticks(pid) if pid else None
    return now is not None and (ticks is None or now == ticks)


def pids_with_env(run_id, run_dir=None):
    """With ``JT_RUN_ID``, and a hot run's pool-forked ranks (their record, read by ``pool/``)."""
    needle, found = ("JT_RUN_ID=" + run_id).encode(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in env and start_ticks(int(name)) is not None:
            found.append(int(name))
    if run_dir and os.path.isfile(os.path.join(run_dir, "pool-ranks.json")):
        sys.path[:0] = [p for p in [os.path.join(run_dir, "pool")] if p not in sys.path]
        found += __import__("_jt_node_pool.hotstart.records").hotstart.records.recorded_pids(
            run_dir
        )
    return sorted(set(found))


def describe(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = "?"
    return "%d %s" % (pid, cmd[:200])


def kill(pids, sig, group=False):
    for pid in pids:
        try:
            (os.killpg if group else os.kill)(pid, sig)
        except OSError:
            pass


def killpg(pgid, ticks, sig):
    """Signal the launcher's group, if its leader is still the process we started."""
    if pgid and alive(pgid, ticks):
        kill([pgid], sig, group=True)


def cmd_preflight(workdir, args):
    import importlib.util
    import shutil
    import socket

    out = {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "executable": sys.executable,
        "hostname": socket.gethostname(),
        "workdir": workdir,
        "agent": sys.argv[0],  # the zip application, not a file inside it
        "cpus": os.cpu_count() or 1,
        "root": os.geteuid() == 0,
        "missing": [],
        "versions": {},
        "tools": {},
        "resolved": {},
    }
    for name in args.get("modules", []):
        try:
            if importlib.util.find_spec(name) is None:
                out["missing"].append(name)
        except Exception:  # its parent package fails to import
            out["missing"].append(name)
    out["versions"] = {name: _version(name) for name in args.get("versions", [])}
    out["tools"] = {tool: shutil.which(tool) for tool in args.get("tools", [])}
    if args.get("gpus"):
        out["gpus"], out["gpu_error"] = _count_gpus()
    for name in args.get("resolve", []):
        try:
            out["resolved"][name] = [i[4][0] for i in socket.getaddrinfo(name, None, proto=6)]
        except OSError:
            out["resolved"][name] = []
    if args.get("port"):
        with socket.socket() as sock:
            sock.bind(("", 0))
            out["port"] = sock.getsockname()[1]
    if args.get("snapshot"):
        out["snapshot"], out["snapshot_set_aside"] = _intact_snapshot(workdir, args["snapshot"])
    runs = os.path.join(workdir, "runs")
    while args.get("probe") and not os.path.exists(runs):  # a dry run's makes nothing, and
        runs = os.path.dirname(runs)  # asks of the folder that would hold runs/
    try:
        os.makedirs(runs, exist_ok=True)
        out["writable"] = os.access(runs, os.W_OK)
    except OSError as exc:
        out["writable"], out["write_error"] = False, str(exc)
    answer(out)
    if args.get("session"):
        serve(workdir)


def serve(workdir):
    """The pre-flight's connection, kept for the run's next steps: one JSON line a request,
    ``stage`` (a tar of ``n`` bytes follows), ``start``, then ``follow``, which keeps it."""
    import io

    for line in iter(sys.stdin.buffer.readline, b""):
        ask = json.loads(line)
        if "follow" in ask:
            return follow(ask["follow"], ask.get("offsets", {}))
        if "start" in ask:
            start(workdir, ask["start"])
        else:
            answer(
                {
                    "staged": unpack(
                        os.path.join(workdir, "snapshots"),
                        ask["stage"],
                        io.BytesIO(sys.stdin.buffer.read(ask["n"])),
                    )
                }
            )


def _version(name):
    """``name``'s version from its dist-info folder (importlib.metadata costs 0.1 s)."""
    prefix = name + "-"
    for folder in sys.path:
        try:
            found = [
                n
                for n in os.listdir(folder or ".")
                if n.startswith(prefix) and n.endswith(".dist-info")
            ]
        except OSError:
            continue
        if found:
            return found[0][len(prefix) : -len(".dist-info")]
    return None


def _count_gpus():
    """GPUs ``nvidia-smi -L`` lists (honouring CUDA_VISIBLE_DEVICES), and why 0 if it failed."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi"):
        return 0, "nvidia-smi was not found on the node's PATH"
    try:
        done = subprocess.run(
            ["nvidia-smi", "-L"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, "nvidia-smi -L failed: %s" % exc
    count = sum(1 for line in done.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() not in ("", "-1")]))
    return count, done.stderr.strip()[-500:] if done.returncode else None


def _intact_snapshot(workdir, name):
    """(usable, set aside to): a copy a run changed is moved away, never reused or repaired."""
    path = os.path.join(workdir, "snapshots", name)
    if not os.path.isdir(path) or tree_hash(path) == name.replace("-", ":", 1):
        return os.path.isdir(path), None
    aside = os.path.join(workdir, "snapshots", ".changed-%s-%d" % (name, time.time() * 1000))
    try:
        os.rename(path, aside)
    except OSError:  # another node's pre-flight set it aside first
        return False, None
    return False, aside


def unpack(root, name, stream):
    """A gzipped tar into ``root/name`` through a temporary folder and one rename (a reader sees
    all or nothing; two writers make one); False: it was there."""
    import shutil
    import tarfile

    dest = os.path.join(root, name)
    os.makedirs(root, exist_ok=True)
    if os.path.isdir(dest):
        stream.read()
        return False
    tmp = os.path.join(root, ".tmp-" + os.urandom(8).hex())
    os.mkdir(tmp, 0o700)
    try:
        with tarfile.open(fileobj=stream, mode="r|gz") as tar:
            for member in tar:
                _check_member(member)
                tar.extract(member, tmp)
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not os.path.isdir(dest):
                raise
            return False
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, onerror=_make_writable)
    return True


def cmd_environment(workdir, args):
    """Unpack a tar of ``build.py`` and ``lock/`` (stdin) once under ``envs/locks/<name>/``;
    build.py builds (or finds) the environment under ``envs/venvs/`` on this python; then
    the pre-flight ``args["check"]`` runs with the environment's own python."""
    import subprocess

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,80}", args["name"]):
        return answer({"error": "refusing environment folder name %r" % args["name"]})
    root = os.path.join(workdir, "envs")
    unpack(os.path.join(root, "locks"), args["name"], sys.stdin.buffer)
    folder = os.path.join(root, "locks", args["name"])
    argv = [
        sys.executable,
        os.path.join(folder, "build.py"),
        os.path.join(folder, "lock"),
        os.path.join(root, "venvs"),
        "--base-python",
        sys.executable,
    ]
    argv += ["--uv", args["uv"]] if args.get("uv") else []
    done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        return answer(
            {
                "error": (done.stderr.strip() or "build.py exited with code %d" % done.returncode)[
                    -3000:
                ]
            }
        )
    record = json.loads(done.stdout)
    check = subprocess.run(
        [
            record["python"],
            sys.argv[0],
            "--workdir",
            workdir,
            "preflight",
            json.dumps(args.get("check", {})),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    header = _first_frame(check.stdout)
    if check.returncode or header is None:
        return answer(
            {
                "error": "the environment's python %s failed the pre-flight: %s"
                % (record["python"], check.stderr.decode(errors="replace").strip()[-2000:])
            }
        )
    answer({"environment": record, "check": header})


def _first_frame(data):
    at = data.find(MARK)
    header = json.loads(data[at + len(MARK) :].split(b"\n", 1)[0].decode()) if at >= 0 else None
    return header and {k: v for k, v in header.items() if k != "n"}


def _check_member(member):
    if (
        member.name.startswith("/")
        or ".." in member.name.split("/")
        or not (member.isfile() or member.isdir())
    ):
        raise SystemExit("refusing snapshot member %r" % member.name)


def _make_writable(func, path, _exc):
    for writable in (os.path.dirname(path), path):
        os.chmod(writable, 0o755)
    func(path)


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
        write_atomic(os.path.join(run_dir, rel), text, 0o755 if rel.startswith("bin/") else 0o644)
    _touch(os.path.join(run_dir, "lease"))
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
    ids = {"pid": child.pid, "pgid": child.pid, "start_ticks": ticks, "keeper": os.getpid()}
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
    write_atomic(
        exit_path, json.dumps({"exit_code": code, "ended": time.time(), "orphaned": orphaned})
    )


def write_atomic(path, text, mode=0o644):
    with open(path + ".tmp", "wb" if isinstance(text, bytes) else "w") as fh:
        fh.write(text)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _touch(path):
    with open(path, "a"):
        os.utime(path)


class Follower:
    def __init__(self, run_dir, node, offsets):
        self.run_dir, self.node, self.offsets = run_dir, node, dict(offsets)
        self.stamps, self.status = {}, None

    def files(self):
        own = "logs/launcher-%d.log" % self.node
        for sub in ("logs", "events", "ranks"):
            try:
                names = os.listdir(os.path.join(self.run_dir, sub))
            except OSError:
                continue
            for name in names:
                rel = sub + "/" + name
                if FOLLOWED.fullmatch(rel) and (not rel.startswith("logs/launcher-") or rel == own):
                    yield rel

    def one_pass(self):
        """Send what is new; return how many bytes went out."""
        sent = 0
        for rel in sorted(self.files()):
            path = os.path.join(self.run_dir, rel)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if REPLACED.fullmatch(rel):
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if self.stamps.get(rel) == stamp:
                    continue
                try:
                    with open(path, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                self.stamps[rel] = stamp
                frame({"t": "put", "p": rel}, data)
                sent += len(data) + 1
                continue
            offset = self.offsets.get(rel, 0)
            if st.st_size <= offset:
                continue
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(CHUNK)
            if data:
                frame({"t": "file", "p": rel, "o": offset}, data)
                self.offsets[rel] = offset + len(data)
                sent += len(data)
        return sent

    def launcher_status(self):
        ids = read_json(os.path.join(self.run_dir, "node-%d.json" % self.node))
        for look in (1, 2):  # the keeper records the exit, then ends: look again once both are gone
            ended = read_json(os.path.join(self.run_dir, "node-%d.exit" % self.node))
            if ended is not None:
                return {"exit": ended.get("exit_code"), "alive": False}
            if ids is None:
                return {"exit": None, "alive": None}  # this node runs no launcher of its own
            if look == 1 and (
                alive(ids["pid"], ids.get("start_ticks")) or alive(ids.get("keeper"))
            ):
                return {"exit": None, "alive": True}
        return {"exit": -1, "alive": False, "lost": "launcher and keeper gone; no exit recorded"}


def follow(args, offsets):
    """Stream the run's files until the other end goes away. A ``{"finish": ARGS}`` line on
    stdin ends the run through this same session (see ``finish``); after it, a
    ``{"discard": true}`` line removes the run's working directories (``discarded``)."""
    import queue
    import threading

    follower = Follower(args["run_dir"], args["node"], offsets)
    lease = os.path.join(args["run_dir"], "lease")
    requests: queue.Queue[dict | None] = queue.Queue()  # None: stdin ended
    threading.Thread(target=_read_requests, args=(requests,), daemon=True).start()
    last_beat = 0.0
    try:
        while True:
            sent = follower.one_pass()
            now = time.monotonic()
            status = follower.launcher_status()
            if status != follower.status or now - last_beat >= HEARTBEAT_S:
                frame(dict(status, t="status"))
                follower.status, last_beat = status, now
                _touch(lease)
            sys.stdout.buffer.flush()
            try:
                request = requests.get(timeout=0 if sent else PASS_S)
            except queue.Empty:
                continue
            if request is None:  # stdin closed: the other end is gone
                return
            finish(dict(request["finish"], run_dir=args["run_dir"], node=args["node"]), follower)
            for request in iter(requests.get, None):  # the run has ended here
                if request.get("discard"):
                    answer({"t": "discarded", "removed": discard(args["run_dir"])})
            return
    except BrokenPipeError:
        return


def _read_requests(requests):
    for line in sys.stdin.buffer:
        try:
            requests.put(json.loads(line))
        except ValueError:
            pass
    requests.put(None)


def _send_outputs(run_dir):
    """``outputs/``, ``logs/user/`` and ``checkpoints/`` of the run folder: a gzipped tar."""
    import tarfile

    class Chunks(io.BufferedIOBase):  # the tar stream, sent on as frames
        def writable(self):
            return True

        def write(self, data):
            frame({"t": "tar"}, bytes(data))
            return len(data)

    with tarfile.open(fileobj=Chunks(), mode="w|gz") as tar:
        for sub in ("outputs", "logs/user", "checkpoints"):
            folder = os.path.join(run_dir, sub)
            if os.path.isdir(folder):
                for name in sorted(os.listdir(folder)):
                    tar.add(os.path.join(folder, name), arcname=sub + "/" + name)


def _offsets():  # the first line on stdin of a follow or finish call
    return json.loads(sys.stdin.buffer.readline() or b"{}").get("offsets", {})


def finish(args, follower):
    """The end of a run here, in one answer: stop what is left, a last pass over its files,
    what is still alive, (``outputs``) ``outputs/`` and ``logs/user/``, the snapshot's hash."""
    report = stop(args)
    while follower.one_pass():
        pass
    frame(dict(follower.launcher_status(), t="status"))
    if args.get("outputs"):
        _send_outputs(args["run_dir"])
    report["leftovers"] = [describe(p) for p in pids_with_env(args["run_id"], args["run_dir"])]
    code = os.path.join(args["run_dir"], "code")
    if os.path.isdir(code):
        report["snapshot"] = {"path": os.path.realpath(code), "hash": tree_hash(code)}
    answer(dict(report, t="finished"))


def tree_hash(root):
    """sha256 over the sorted (relative path, sha256 of content) pairs of every file under
    ``root``: the snapshot's content hash, as capture computes it."""
    import hashlib

    digests = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(CHUNK), b""):
                        digest.update(chunk)
            except OSError as exc:
                digest.update(str(exc).encode())
            digests[os.path.relpath(path, root).replace(os.sep, "/")] = digest.hexdigest()
    total = hashlib.sha256()
    for rel in sorted(digests):
        total.update(("%s\0%s\n" % (rel, digests[rel])).encode("utf-8", "surrogateescape"))
    return "sha256:" + total.hexdigest()


def discard(run_dir):
    """Remove the run's working directories here (the rest stays); returns what was removed."""
    import shutil

    path = os.path.join(run_dir, "work")
    gone = "%s.discarded-%s" % (path, os.urandom(6).hex())
    try:  # nodes that share a filesystem share the folder: one of them takes it
        os.rename(path, gone)
    except FileNotFoundError:
        return []
    shutil.rmtree(gone, onerror=_make_writable)
    return [path]


def stop(args):
    """SIGTERM to the launcher's group and every process of the run, SIGKILL after grace."""
    run_id, run_dir = args["run_id"], args.get("run_dir")
    pgid, ticks = args.get("pgid"), args.get("start_ticks")
    found = pids_with_env(run_id, run_dir)
    killpg(pgid, ticks, signal.SIGTERM)
    kill(found, signal.SIGTERM)
    deadline = time.monotonic() + float(args.get("grace", 3.0))
    left = pids_with_env(run_id, run_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = pids_with_env(run_id, run_dir)
    killed = [describe(p) for p in left]
    if left or alive(pgid, ticks):
        killpg(pgid, ticks, signal.SIGKILL)
        kill(left, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while pids_with_env(run_id, run_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"sigterm": len(found), "sigkilled": killed}


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
    "follow": lambda workdir, args: follow(args, _offsets()),
    "finish": lambda workdir, args: finish(
        args, Follower(args["run_dir"], args["node"], _offsets())
    ),
    "discard": lambda workdir, args: answer({"removed": discard(args["run_dir"])}),
    "stop": lambda workdir, args: answer(stop(args)),
    "leftovers": lambda workdir, args: answer(
        {"leftovers": [describe(p) for p in pids_with_env(args["run_id"], args.get("run_dir"))]}
    ),
}


def main(argv):
    if len(argv) != 4 or argv[0] != "--workdir" or argv[2] not in COMMANDS:
        sys.stderr.write("usage: jt-node.pyz --workdir W {%s} JSON\n" % "|".join(COMMANDS))
        return 2
    workdir = os.path.abspath(os.path.expanduser(argv[1]))
    COMMANDS[argv[2]](workdir, json.loads(argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
