"""How the fake finds its containers' processes: each carries a marker in its environment,
and a process that entered a container without it is found by the container's mount
namespace."""

from __future__ import annotations

import os

MARKER = "KUBE_FAKE_POD"
# The mount namespace of each live container (its inode) -> the container's marker: a process
# that entered a container without its environment (an sshd session) is found by it.
MOUNT_NS: dict[int, str] = {}


def mount_ns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def live_pids(prefix: str) -> dict[int, str]:
    """pid -> marker of every live process whose environment carries a marker starting with
    ``prefix`` (descendants inherit it, whatever session or group they move to), or that is
    in the mount namespace of a container whose marker starts so."""
    out = {}
    needle = f"{MARKER}=".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
        except OSError:
            continue
        for item in env.split(b"\0"):
            if item.startswith(needle):  # a pod's process: ours only by its own marker,
                found = item.split(b"=", 1)[1].decode()  # never by a namespace's number
                if found.startswith(prefix):  # (one that ended may be reused by another's)
                    out[int(entry.name)] = found
                break
        else:
            marker = MOUNT_NS.get(mount_ns(int(entry.name)) or 0)
            if marker and marker.startswith(prefix):
                out[int(entry.name)] = marker
    return out


def forget_mount_ns(prefix: str) -> None:
    for ns in [n for n, m in MOUNT_NS.items() if m.startswith(prefix)]:
        MOUNT_NS.pop(ns, None)


def signal_marker(prefix: str, sig: int, skip: int | None = None):
    for pid in set(live_pids(prefix)) - {skip}:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
