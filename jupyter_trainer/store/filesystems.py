"""Which filesystem a store sits on, and refusing SQLite's index on a network one.

SQLite's WAL mode keeps its ``-shm`` index in memory shared by the processes of one host, and
its locks are ``fcntl`` locks, whose meaning over NFS depends on the server: two hosts using
one ``runs.db`` on a network filesystem can corrupt it. So the personal, SQLite-indexed store
refuses to open on one, and says how to give the workspace a PostgreSQL index instead.

The type is the one the kernel reports for the mount that holds the folder (psutil reads
``/proc/self/mountinfo``). What that cannot see: a network filesystem behind an overlay or
bind mount whose type is shown as the local one, and a FUSE filesystem not named here.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..core.errors import StoreError
from ..rankside.host.home import HOME_ENV

NETWORK = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "fuse.ceph",
        "fuse.ceph-fuse",
        "glusterfs",
        "fuse.glusterfs",
        "beegfs",
        "panfs",
        "pvfs2",
        "orangefs",
        "afs",
        "9p",
        "gfs2",
        "ocfs2",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.juicefs",
        "fuse.weka",
        "wekafs",
        "davfs",
        "fuse.rclone",
    }
)


def filesystem_of(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(mount point, filesystem type) of the mount that holds ``path``, or of its nearest
    existing parent when it does not exist yet."""
    import psutil

    here = Path(os.path.realpath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    best = ("/", "")
    for part in psutil.disk_partitions(all=True):
        point = part.mountpoint
        inside = str(here) == point or str(here).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, part.fstype)
    return best


def network_filesystem(path: str | os.PathLike[str]) -> str | None:
    """The type of the network filesystem that holds ``path`` (``nfs4``), or None."""
    return _network(os.path.realpath(path))


@functools.lru_cache(maxsize=64)
def _network(path: str) -> str | None:  # a store's filesystem does not change under it
    _point, kind = filesystem_of(path)
    return kind if kind in NETWORK else None


def refuse_network(home: Path, label: str) -> None:
    """``StoreError`` when the store at ``home`` is on a network filesystem: its SQLite
    ``label`` index is not safe there."""
    kind = network_filesystem(home)
    if kind is None:
        return
    from .workspace import CONFIG, INDEX_ENV

    raise StoreError(
        f"the run store {home} is on {kind}, a network filesystem, where the SQLite "
        f"{label} index can be corrupted by users on two hosts (SQLite's WAL needs memory "
        "shared on one host, and file locks over the network depend on the server). For a "
        f"store shared over the network, put its index on PostgreSQL: set {INDEX_ENV}="
        f'postgresql://HOST/DATABASE, or write index = "postgresql://HOST/DATABASE" in '
        f"{home / CONFIG}; for a personal store, set {HOME_ENV} to a folder on a local disk"
    )
