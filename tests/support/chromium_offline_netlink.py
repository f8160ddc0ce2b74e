"""Start Chromium unable to watch this machine's network interfaces.

Chromium follows the kernel's address and link changes (a NETLINK_ROUTE socket) and fails every
request waiting for a connection with ``net::ERR_NETWORK_CHANGED`` when one comes. The suite's
SSH hosts and Kubernetes pods add and remove bridges and veth pairs all the time, so a page
loading beside them lost its theme and settings. Here ``socket(AF_NETLINK, ..., NETLINK_ROUTE)``
fails with EACCES (a seccomp filter, which Chromium's processes inherit), and Chromium, as it
does where netlink is denied, stops tracking and treats the network as online.

    python chromium_offline_netlink.py /usr/bin/chromium [chromium's arguments]
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

# (the kernel's AUDIT_ARCH value, the number of socket(2)) per machine
ARCHES = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
AF_NETLINK, NETLINK_ROUTE = 16, 0
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
LD_ABS, JEQ, RET = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
# offsets in struct seccomp_data: nr, arch, the low 32 bits of args[0] and of args[2]
NR, ARCH, ARG0, ARG2 = 0, 4, 16, 32


class SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def program(arch: int, socket_nr: int) -> list[tuple[int, int, int, int]]:
    """socket(AF_NETLINK, *, NETLINK_ROUTE) fails with EACCES; every other call is allowed.
    Each jump's false branch skips to the last instruction, the allow."""
    steps = [
        (LD_ABS, 0, 0, ARCH),
        (JEQ, 0, 7, arch),
        (LD_ABS, 0, 0, NR),
        (JEQ, 0, 5, socket_nr),
        (LD_ABS, 0, 0, ARG0),
        (JEQ, 0, 3, AF_NETLINK),
        (LD_ABS, 0, 0, ARG2),
        (JEQ, 0, 1, NETLINK_ROUTE),
        (RET, 0, 0, SECCOMP_RET_ERRNO | errno.EACCES),
        (RET, 0, 0, SECCOMP_RET_ALLOW),
    ]
    assert len(steps) == 10  # the jumps above count on it
    return steps


def deny_netlink_route() -> bool:
    """Install the filter in this process (and so in what it execs); False where this
    machine's architecture is not known here."""
    known = ARCHES.get(platform.machine())
    if known is None:
        return False
    steps = program(*known)
    filters = (SockFilter * len(steps))(*(SockFilter(*s) for s in steps))
    prog = SockFprog(len(steps), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
    return True


def main(argv: list[str]) -> None:
    deny_netlink_route()
    os.execv(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv)
