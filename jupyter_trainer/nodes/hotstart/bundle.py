"""The pool's files for a remote node, where jupyter_trainer may not be installed.

The modules a node's pool and its launcher need (``client``, ``server``, ``warm``,
``child``, ``records``, ``node_launch`` and the two they import from the package, ``procs``
and ``home``; all standard library only) are shipped as the package ``_jt_node_pool`` (a
name of its own: the pool's forked ranks import the snapshot's ``jupyter_trainer``), with
two small programs: ``launch.py`` (``node_launch``) and ``pool.py`` (a pool's entry). The
node agent writes them into the run folder (``pool/``) like the run's other files."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from ...rankside.hotstart.node_launch import BUNDLE_PACKAGE

FOLDER = "pool"  # in a node's run folder
_PACKAGE = Path(__file__).resolve().parent.parent
SHIPPED = ("procs.py", "home.py", "pool/__init__.py", "pool/client.py", "pool/server.py",
           "pool/warm.py", "pool/child.py", "pool/records.py", "pool/node_launch.py",
           "pool/keeper.py")
_PROGRAMS = {
    "launch.py": ("import sys\nfrom _jt_node_pool.pool.node_launch import main\n\n"
                  "sys.exit(main(sys.argv[1:]))\n"),
    "pool.py": "import sys\nfrom _jt_node_pool.pool.warm import main\n\nsys.exit(main(sys.argv[1:]))\n",
    "keeper.py": ("import sys\nfrom _jt_node_pool.pool.keeper import main\n\n"
                  "sys.exit(main(sys.argv[1:]))\n"),
}


@lru_cache(maxsize=1)
def node_bundle() -> tuple[str, dict[str, str]]:
    """(content hash, {path in the run folder: text}) of the pool's files for a node."""
    files = {f"{FOLDER}/{BUNDLE_PACKAGE}/__init__.py": ""}
    for rel in SHIPPED:
        files[f"{FOLDER}/{BUNDLE_PACKAGE}/{rel}"] = (_PACKAGE / rel).read_text(encoding="utf-8")
    files.update({f"{FOLDER}/{name}": text for name, text in _PROGRAMS.items()})
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{files[path]}\0".encode())
    return digest.hexdigest()[:16], files
