"""``preflight``: what a run needs to know of this node (interpreter, imports, versions,
GPUs, tools, addresses, a free port (below the kernel's ephemeral range, as
``procs.free_port`` explains), an intact snapshot, a writable workdir), in one answer;
with ``session`` the connection then stays for the run's next steps (``session.py``)."""

import os
import sys
import time

from ..host.procs import free_port
from .frames import answer
from .session import serve
from .snapshot import tree_hash


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
        out["port"] = free_port("")
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
