"""``follow``: the run's files on this node streamed back as they grow (logs, events, rank
records) with the launcher's status, until the other end goes away; and ``finish``, the end
of the run here in one answer, through the same session or a call of its own."""

import io
import json
import os
import re
import sys
import time

from ..host.procs import describe, is_alive
from .ending import discard, stop
from .frames import CHUNK, answer, frame
from .processes import run_pids
from .snapshot import tree_hash
from .start import touch

# A live session's files that go back: ranks ready, results (each written once), its end
SESSION_BACK = re.compile(r"session/(?:ready\.\d+|stop|results/\d+\.\d+\.(?:json|pkl))")
# ... and those that come here from the notebook (``session`` requests), written as sent
SESSION_IN = re.compile(
    r"session/(?:requests/\d+(?:\.json|/(?:cell\.py|cell_parts\.json|carried\.pkl|values\.pkl))"
    r"|interrupt\.\d+|stop)"
)
REPLACED = re.compile(
    r"ranks/rank-\d+(?:\.attempt-\d+)?\.json|events/rank-\d+\.beat|"
    r"collectives/rank-\d+\.json|" + SESSION_BACK.pattern  # a rank's Flight Recorder dump
)
FOLLOWED = re.compile(
    r"logs/rank-\d+\.(?:log|times)|events/rank-\d+\.jsonl|logs/launcher-\d+\.log|"
    + REPLACED.pattern
)
HEARTBEAT_S, PASS_S = 1.0, 0.05  # a launcher's exit is seen within PASS_S


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


class Follower:
    def __init__(self, run_dir, node, offsets):
        self.run_dir, self.node, self.offsets = run_dir, node, dict(offsets)
        self.stamps, self.status, self.once = {}, None, set()

    def files(self):
        own = "logs/launcher-%d.log" % self.node
        for sub in ("logs", "events", "ranks", "session", "session/results", "collectives"):
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
        # a pulled value before the result that names it, which the notebook reads first
        for rel in sorted(self.files(), key=lambda rel: (rel.endswith(".json"), rel)):
            if rel in self.once:
                continue
            path = os.path.join(self.run_dir, rel)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if rel.startswith("session/results/"):
                self.once.add(rel)  # written whole, once, by rename: never looked at again
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
                frame({"t": "put", "p": rel, "m": st.st_mtime_ns}, data)
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
                is_alive(ids["pid"], ids.get("start_ticks")) or is_alive(ids.get("keeper"))
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
                touch(lease)
            sys.stdout.buffer.flush()
            try:
                request = requests.get(timeout=0 if sent else PASS_S)
            except queue.Empty:
                continue
            if request is None:  # stdin closed: the other end is gone
                return
            if "session" in request:
                session_files(args["run_dir"], request["session"])
                continue
            finish(dict(request["finish"], run_dir=args["run_dir"], node=args["node"]), follower)
            for request in iter(requests.get, None):  # the run has ended here
                if request.get("discard"):
                    answer({"t": "discarded", "removed": discard(args["run_dir"])})
            return
    except BrokenPipeError:
        return


def session_files(run_dir, body):
    """Write the files of a live session's request sent from the notebook into this node's
    run folder, then wake the ranks that listen here."""
    import base64
    import socket

    for rel, data in (body.get("files") or {}).items():
        if not SESSION_IN.fullmatch(rel):
            continue
        path = os.path.join(run_dir, rel)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
            fh.write(base64.b64decode(data))
        os.replace(tmp, path)
    for name, message in body.get("wake") or ():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.sendto(str(message).encode(), str(name).encode())
        except OSError:
            pass
        finally:
            sock.close()


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


def stdin_offsets():  # the first line on stdin of a follow or finish call
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
    report["leftovers"] = [describe(p) for p in run_pids(args["run_id"], args["run_dir"])]
    code = os.path.join(args["run_dir"], "code")
    if os.path.isdir(code):
        report["snapshot"] = {"path": os.path.realpath(code), "hash": tree_hash(code)}
    answer(dict(report, t="finished"))
