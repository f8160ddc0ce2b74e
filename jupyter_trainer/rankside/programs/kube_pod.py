"""The program every pod of a Kubernetes run starts: ``python pod.py RUN_DIR IN_DIR -- ARGV``.

Shipped in the run's ConfigMap (mounted at IN_DIR) and run by the image's Python, so it uses
the standard library only and imports nothing of jupyter_trainer. It

1. unpacks ``IN_DIR/snapshot.tar.gz`` into ``RUN_DIR/code`` and copies ``IN_DIR/spec.json``
   (once per run folder, under a lock: pods that share a ``workdir_pvc`` folder unpack once;
   without a ``snapshot.tar.gz`` the snapshot is expected in ``RUN_DIR/code`` already), and
   the run's secret values, from the run's Secret mounted at ``SECRETS_FILE``, into
   ``RUN_DIR/secrets.json``, mode 0600 and this user's, where the ranks read them
   (``run_secrets``: the mounted file is a link the kubelet owns);
2. gives the launcher this pod's node rank: ``JOB_COMPLETION_INDEX`` (an Indexed Job) or
   ``PET_NODE_RANK`` (a TrainJob) becomes ``JT_NODE_RANK`` and torchrun's ``is_host``
   (node 0 hosts the c10d store, which then ranks the nodes), and
   ``PET_MASTER_ADDR:PET_MASTER_PORT`` the rendezvous endpoint when none is given, and an
   empty ``MASTER_ADDR`` (mpirun under the Trainer's MPI runtime) the first host of the
   runtime's hostfile, which mpirun passes on to every rank;
3. runs ARGV (the launcher, an argv list: nothing here goes through a shell), passing
   SIGTERM on, and exits with its exit code once what the launcher left behind has ended
   (the ranks' death watchers, which record how each rank ended: ``reap_orphans``); once
   only per node and run folder: a container restarted in place ends at once with that code
   (see ``launched_before``);
4. meanwhile copies what the ranks write into the run folder (``logs/``, ``events/``,
   ``ranks/``, and a live session's readiness, results and end) onto its stdout, the pod
   log, as marked lines (``MARK`` + JSON), which the target splits off into the local run
   folder. The launcher's own output passes through whole lines, so a marked line is never
   cut into;
5. once the ranks have made a live session's folder (``RUN_DIR/session``), watches the
   ConfigMaps the target writes a session's requests into (``SessionRequests``: the API
   server as the pod reaches it, with its service account's token) and writes each into
   the run folder, in order, then wakes the ranks.

With ``--rank`` (a rank started by mpirun on a node pod) it unpacks, then execs ARGV; where
no launcher follows the run folder (a node pod's own), a child first copies that rank's files
onto the pod log the same way.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

# Starts a line that carries a run-folder file's new bytes: a visible sign (U+241E, SYMBOL
# FOR RECORD SEPARATOR) that no line splitter treats as a line break, as it would 0x1e.
MARK = "\u241ejt1 "
FOLLOWED = ("logs", "events", "ranks")
WHOLE = (".json", ".beat")  # files rewritten whole (atomic replace), sent whole
# Bytes per marked line: its base64 stays under the 16 KiB at which container runtimes cut a
# log line into parts.
CHUNK = 8 * 1024
INTERVAL = 0.25
FOLLOWED_MARK = ".jt-followed"  # in a run folder whose files a launcher's pod.py copies
LAUNCHED = ".jt-launched-"  # + the node: its launcher ran here (its exit code, once it ended)
CONTAINER_LOG = "/proc/1/fd/1"  # the pod log, from any process of the container
SECRETS_FILE = "/jt/secrets/secrets.json"  # the run's Secret, mounted owner-only (0400)
HOSTFILE = "/etc/mpi/hostfile"  # where the Trainer's MPI runtime mounts the hostfile
PR_SET_CHILD_SUBREAPER = 36  # prctl(2)
ORPHAN_WAIT = 10.0  # seconds the launcher's leftovers (the ranks' watchers) have to end
# A live session's files (rankside/rank/session_loop.py): those that go back, whole (each
# result once), and those a request ConfigMap may write here
SESSION_BACK = re.compile(r"session/(?:ready\.\d+|stop|results/\d+\.\d+\.(?:json|pkl))")
SESSION_IN = re.compile(
    r"session/(?:requests/\d+(?:\.json|/(?:cell\.py|cell_parts\.json|carried\.pkl|values\.pkl))"
    r"|interrupt\.\d+|stop)"
)
SESSION_OF = "jupyter-trainer/session-of"  # label of a session's request ConfigMaps
SESSION_SEQ = "jupyter-trainer/session-seq"  # ... and their order, from 1
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
WATCH_S = 60  # a watch of the request ConfigMaps is made again after this long
_out_lock = threading.Lock()


def emit(line: bytes, fd: int = 1) -> None:
    """One whole line onto ``fd`` (stdout), never interleaved with another."""
    with _out_lock:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]


def copy_secrets(run_dir: str) -> None:
    """The run's Secret, if it has one, as ``RUN_DIR/secrets.json``: 0600, this user's,
    made once (a folder pods share on a claim gets it from the first)."""
    try:
        with open(SECRETS_FILE, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return
    except OSError as exc:
        print(f"[jt] the run's secret values cannot be read: {exc}", file=sys.stderr)
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(os.path.join(run_dir, "secrets.json"), flags, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)


def unpack(run_dir: str, in_dir: str) -> None:
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, ".jt-unpack.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        copy_secrets(run_dir)
        spec = os.path.join(in_dir, "spec.json")
        if os.path.exists(spec) and not os.path.exists(os.path.join(run_dir, "spec.json")):
            shutil.copyfile(spec, os.path.join(run_dir, "spec.json"))
        code, tarball = os.path.join(run_dir, "code"), os.path.join(in_dir, "snapshot.tar.gz")
        if os.path.isdir(code) or not os.path.exists(tarball):
            return
        tmp = code + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(tarball) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # Pythons before the tarfile filters: refuse paths that leave the folder
                for member in tar.getmembers():
                    target = os.path.realpath(os.path.join(tmp, member.name))
                    if not (member.isfile() or member.isdir()) or not target.startswith(
                        os.path.realpath(tmp) + os.sep
                    ):
                        raise SystemExit(f"[jt] unsafe snapshot member {member.name!r}")
                tar.extractall(tmp)
        os.rename(tmp, code)


def node_env(env: dict[str, str]) -> dict[str, str]:
    env = dict(env)
    index = env.get("JOB_COMPLETION_INDEX") or env.get("PET_NODE_RANK")
    if index is not None:
        env.setdefault("JT_NODE_RANK", index)
        env.setdefault("PET_RDZV_CONF", f"is_host={int(index == '0')}")
    if "PET_RDZV_ENDPOINT" not in env and env.get("PET_MASTER_ADDR"):
        env["PET_RDZV_ENDPOINT"] = f"{env['PET_MASTER_ADDR']}:{env.get('PET_MASTER_PORT', '29400')}"
    if "MASTER_ADDR" in env and not env["MASTER_ADDR"]:
        env["MASTER_ADDR"] = first_host(env.get("OMPI_MCA_orte_default_hostfile", HOSTFILE))
    return env


def first_host(hostfile: str) -> str:
    """The first host of an MPI hostfile (``NAME slots=N`` lines), where mpirun puts rank 0."""
    try:
        with open(hostfile) as f:
            for line in f:
                words = line.split("#", 1)[0].split()
                if words:
                    return words[0]
    except OSError:
        pass
    return ""


def mark(rel: str, **fields: object) -> bytes:
    return (MARK + json.dumps({"f": rel, **fields}, separators=(",", ":")) + "\n").encode()


class Mirror:
    """Sends the new bytes of the run folder's followed files as marked lines."""

    def __init__(self, run_dir: str, only: str = "", fd: int = 1) -> None:
        self.run_dir = run_dir
        self.only = only  # a file-name prefix (``rank-3.``): that rank's files alone
        self.fd = fd
        self.sent: dict[str, object] = {}

    def once(self) -> None:
        for top in FOLLOWED:
            folder = os.path.join(self.run_dir, top)
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                if name.endswith(".tmp") or not name.startswith(self.only):
                    continue  # a file being written (renamed into place later), or not ours
                self.file(f"{top}/{name}")
        if not self.only:
            self.session()

    def session(self) -> None:
        """A live session's readiness, results and end (a pulled value before the result
        that names it, which the notebook reads first); a result is written once, by rename."""
        found = []
        for sub in ("session", "session/results"):
            try:
                names = os.listdir(os.path.join(self.run_dir, sub))
            except OSError:
                continue
            found += [f"{sub}/{n}" for n in names if SESSION_BACK.fullmatch(f"{sub}/{n}")]
        for rel in sorted(found, key=lambda rel: (rel.endswith(".json"), rel)):
            if self.sent.get(rel) != "once":
                self.file(rel, whole=True)
                if rel.startswith("session/results/") and rel in self.sent:
                    self.sent[rel] = "once"

    def file(self, rel: str, whole: bool = False) -> None:
        path = os.path.join(self.run_dir, rel)
        try:
            if whole or rel.endswith(WHOLE):
                stat = os.stat(path)
                key = (stat.st_mtime_ns, stat.st_size)
                if self.sent.get(rel) != key:
                    with open(path, "rb") as f:
                        data = f.read()
                    self.sent[rel] = key
                    self.whole(rel, data)
                return
            sent = self.sent.get(rel, 0)
            at = sent if isinstance(sent, int) else 0
            with open(path, "rb") as f:
                f.seek(at)
                while True:
                    data = f.read(CHUNK)
                    if not data:
                        break
                    emit(mark(rel, at=at, a=base64.b64encode(data).decode()), self.fd)
                    at += len(data)
            self.sent[rel] = at
        except OSError:
            pass

    def whole(self, rel: str, data: bytes) -> None:
        """A file sent whole: one line, or, over CHUNK, its parts in order (``o`` where a
        part starts, ``n`` the whole size), which the target puts together."""
        if len(data) <= CHUNK:
            emit(mark(rel, w=base64.b64encode(data).decode()), self.fd)
            return
        for at in range(0, len(data), CHUNK):
            part = base64.b64encode(data[at : at + CHUNK]).decode()
            emit(mark(rel, o=at, n=len(data), p=part), self.fd)

    def run(self, done: threading.Event) -> None:
        while not done.wait(INTERVAL):
            self.once()


def session_of(run_id: str) -> str:
    """The ``SESSION_OF`` label value of run ``run_id``'s request ConfigMaps."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:40]


class SessionRequests:
    """A live session's requests, from the ConfigMaps the target writes one per message
    (``SESSION_OF`` and ``SESSION_SEQ`` labels; ``data["message.json"]``: the files' paths
    and the sockets to wake, ``binaryData["<i>"]``: file i's bytes), into the run folder in
    their order. The API server is asked as any in-cluster client asks it: ``https://
    $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` with the pod's service account token
    and CA; a list, then a watch from the list's resourceVersion, again after any failure."""

    def __init__(self, run_dir: str, run_id: str, env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.selector = f"{SESSION_OF}={session_of(run_id)}"
        self.server = f"https://{env.get('KUBERNETES_SERVICE_HOST')}:" + (
            env.get("KUBERNETES_SERVICE_PORT") or "443"
        )
        self.applied = 0  # messages 1..applied are in the run folder
        self.waiting: dict[int, dict] = {}
        self.said = ""

    def run(self, done: threading.Event) -> None:
        while not os.path.isdir(os.path.join(self.run_dir, "session")):
            if done.wait(INTERVAL):
                return  # not a session: the API is never asked
        while not done.is_set() and not os.path.exists(os.path.join(self.run_dir, "session/stop")):
            try:
                version = self.list()
                self.watch(version, done)
            except (OSError, ValueError, KeyError) as exc:
                self.say(f"[jt] the session's requests cannot be read from the API server: {exc}")
                done.wait(1.0)

    def say(self, text: str) -> None:
        if text != self.said:  # once per kind of failure, not once a second
            self.said = text
            print(text, file=sys.stderr, flush=True)

    def _get(self, query: dict[str, str], timeout: float) -> Any:
        with open(os.path.join(SERVICE_ACCOUNT, "token")) as f:
            token = f.read().strip()  # read each time: the kubelet rotates it
        with open(os.path.join(SERVICE_ACCOUNT, "namespace")) as f:
            namespace = f.read().strip()
        context = ssl.create_default_context(cafile=os.path.join(SERVICE_ACCOUNT, "ca.crt"))
        url = (
            f"{self.server}/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps?"
            + urllib.parse.urlencode({"labelSelector": self.selector, **query})
        )
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        return urllib.request.urlopen(request, timeout=timeout, context=context)

    def list(self) -> str:
        with self._get({}, 30) as answer:
            found = json.load(answer)
        for item in found.get("items") or ():
            self.take(item)
        return str(found["metadata"]["resourceVersion"])

    def watch(self, version: str, done: threading.Event) -> None:
        query = {"watch": "1", "resourceVersion": version, "timeoutSeconds": str(WATCH_S)}
        with self._get(query, WATCH_S + 30) as answer:
            for line in answer:
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self.take(event["object"])
                elif event.get("type") == "ERROR":  # e.g. 410 Gone: list again
                    return
                if done.is_set():
                    return

    def take(self, config_map: dict) -> None:
        labels = (config_map.get("metadata") or {}).get("labels") or {}
        seq = int(labels.get(SESSION_SEQ, "0"))
        if seq > self.applied:
            self.waiting[seq] = config_map
        while self.applied + 1 in self.waiting:
            self.apply(self.waiting.pop(self.applied + 1))
            self.applied += 1
        self.said = ""

    def apply(self, config_map: dict) -> None:
        message = json.loads(config_map["data"]["message.json"])
        parts = config_map.get("binaryData") or {}
        for i, rel in enumerate(message.get("files") or ()):
            if not SESSION_IN.fullmatch(rel):
                continue
            path = os.path.join(self.run_dir, rel)
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                f.write(base64.b64decode(parts.get(str(i), "")))
            os.replace(tmp, path)
        for name, text in message.get("wake") or ():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.sendto(str(text).encode(), str(name).encode())
            except OSError:
                pass
            finally:
                sock.close()


def follow_rank(run_dir: str, env: dict[str, str]) -> None:
    """A rank on a pod whose run folder no launcher's pod.py follows (an MPI node pod, its
    own emptyDir): a child copies this rank's files onto the pod's log (the stdout of the
    container's first process, where ``kubectl logs`` reads) until the rank has ended."""
    rank = env.get("OMPI_COMM_WORLD_RANK") or env.get("HOROVOD_RANK") or env.get("RANK")
    if rank is None or os.path.exists(os.path.join(run_dir, FOLLOWED_MARK)):
        return
    try:
        fd = os.open(CONTAINER_LOG, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    parent = os.getpid()
    if os.fork():
        os.close(fd)
        return
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    mirror = Mirror(run_dir, only=f"rank-{rank}.", fd=fd)
    while os.getppid() == parent:
        time.sleep(INTERVAL)
        mirror.once()
    time.sleep(INTERVAL)
    mirror.once()
    os._exit(0)


def launched_before(marker: str) -> int:
    """This node's launcher already ran in this run folder: the container was restarted in
    place (a TrainJob's pods are ``OnFailure``) after it ended. Starting it again would
    rewrite the ranks' records of how the run failed, and a run is restarted by jt
    (``--max-restarts``), never by its pods, so the container ends at once with the
    launcher's exit code (1 when the launcher was killed before it could record one). It
    prints nothing: the target reads a restarted container's log from its start, into the
    same launcher log."""
    try:
        with open(marker) as f:
            text = f.read().strip()
        return int(text) if text else 1
    except (OSError, ValueError):
        return 1


def become_subreaper() -> None:
    """Have the processes this one starts that outlive their parents come to this one rather
    than to the container's first process, so that ``reap_orphans`` can wait for them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap_orphans(within: float) -> None:
    """Wait, for at most ``within`` seconds, for what is left below this process once the
    launcher has ended: each rank's death watcher (rankside/observe/death_watch.py) records there how
    its rank ended, and the container's end kills whatever is left in it, so a watcher slowed
    by a loaded node would otherwise die before it wrote that a rank exited with code 7."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            time.sleep(0.02)


def main(argv: list[str]) -> int:
    rank_only = argv[:1] == ["--rank"]
    argv = argv[1:] if rank_only else argv
    if len(argv) < 4 or argv[2] != "--":
        print("usage: pod.py [--rank] RUN_DIR IN_DIR -- ARGV...", file=sys.stderr)
        return 2
    run_dir, in_dir, command = argv[0], argv[1], argv[3:]
    unpack(run_dir, in_dir)
    env = node_env(dict(os.environ))
    if rank_only:
        follow_rank(run_dir, env)
        os.execvpe(command[0], command, env)
    launched = os.path.join(
        run_dir, LAUNCHED + (env.get("JT_NODE_RANK") or env.get("HOSTNAME", ""))
    )
    if os.path.exists(launched):
        return launched_before(launched)
    with open(launched, "w"):
        pass
    with open(os.path.join(run_dir, FOLLOWED_MARK), "w"):
        pass
    become_subreaper()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
    mirror, done = Mirror(run_dir), threading.Event()
    thread = threading.Thread(target=mirror.run, args=(done,), daemon=True)
    thread.start()
    if env.get("JT_RUN_ID") and env.get("KUBERNETES_SERVICE_HOST"):
        requests = SessionRequests(run_dir, env["JT_RUN_ID"], env)
        threading.Thread(target=requests.run, args=(done,), daemon=True).start()
    for line in iter(child.stdout.readline, b""):  # type: ignore[union-attr]
        emit(line if line.endswith(b"\n") else line + b"\n")
    code = child.wait()
    reap_orphans(ORPHAN_WAIT)
    done.set()
    thread.join()
    time.sleep(INTERVAL)  # a rank's last write, renamed into place as the launcher ended
    mirror.once()
    code = code if code >= 0 else 128 - code
    with open(launched, "w") as f:
        f.write(str(code))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
