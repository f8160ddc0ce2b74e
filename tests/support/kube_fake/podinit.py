"""Runs inside a container's fresh mount and UTS namespaces (started by `unshare`): builds the
container's root as a mirror of the host's with the pod's volumes, /etc/hosts and working
directory mounted where the pod spec says, then chroots into it and execs the container's argv.
Standard library only; run as `python -I -S podinit.py PLAN.json`."""

import ctypes
import json
import os
import socket
import sys

MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC = 1, 32, 4096, 16384
libc = ctypes.CDLL(None, use_errno=True)


def mount(src, dst, fstype=None, flags=0):
    if (
        libc.mount(
            src.encode() if src else None,
            dst.encode(),
            fstype.encode() if fstype else None,
            flags,
            None,
        )
        != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} on {dst}: {os.strerror(err)}")


def mirror(host_dir, target):
    """A tmpfs at ``target`` holding a bind mount (or symlink copy) of each entry of ``host_dir``."""
    mount("tmpfs", target, "tmpfs", 0)
    for entry in os.scandir(host_dir):
        dst = os.path.join(target, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), dst)
        elif entry.is_dir():
            os.mkdir(dst)
            mount(entry.path, dst, None, MS_BIND | MS_REC)
        else:
            open(dst, "a").close()
            mount(entry.path, dst, None, MS_BIND)


def main():
    plan = json.load(open(sys.argv[1]))
    root = plan["root"]
    mirror("/", root)
    writable = {""}  # container paths whose contents are ours to add to

    def ensure(path, is_dir):
        cur = ""
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            nxt = f"{cur}/{part}"
            if os.path.isdir(root + nxt) or (i == len(parts) - 1 and os.path.lexists(root + nxt)):
                cur = nxt
                continue
            if cur not in writable:
                mirror(cur, root + cur)
                writable.add(cur)
            if i == len(parts) - 1 and not is_dir:
                open(root + nxt, "a").close()
            else:
                os.mkdir(root + nxt)
            writable.add(nxt)
            cur = nxt

    for src, dst, read_only in plan["mounts"]:
        is_dir = os.path.isdir(src)
        ensure(dst, is_dir)
        mount(src, root + dst, None, MS_BIND | (MS_REC if is_dir else 0))
        if read_only:
            mount(None, root + dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        if is_dir:
            writable.add(dst.rstrip("/"))
    workdir = plan.get("workdir") or "/"
    ensure(workdir, True)
    socket.sethostname(plan["hostname"])
    os.chroot(root)
    os.chdir(workdir)
    argv = plan["argv"]
    try:
        os.execvpe(argv[0], argv, os.environ)
    except OSError as exc:
        sys.stderr.write(f'exec: "{argv[0]}": {exc.strerror}\n')
        sys.exit(128)


if __name__ == "__main__":
    main()
