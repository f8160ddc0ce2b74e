"""A gzipped tar unpacked once into a folder of its own (a snapshot under ``snapshots/``, an
environment's lock under ``envs/locks/``), and a snapshot's content hash."""

import os

from .frames import CHUNK


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
            shutil.rmtree(tmp, onerror=make_writable)
    return True


def _check_member(member):
    if (
        member.name.startswith("/")
        or ".." in member.name.split("/")
        or not (member.isfile() or member.isdir())
    ):
        raise SystemExit("refusing snapshot member %r" % member.name)


def make_writable(func, path, _exc):
    """``shutil.rmtree``'s ``onerror``: a read-only folder or file is made writable, then
    removed."""
    for writable in (os.path.dirname(path), path):
        os.chmod(writable, 0o755)
    func(path)


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
