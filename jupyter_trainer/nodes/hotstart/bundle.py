"""The pool's files for a remote node, where jupyter_trainer may not be installed.

What a node's pool and its launcher need is ``rankside.POOL`` (the hot-start modules and
the two they import, ``procs`` and ``home``; all standard library only), shipped as the
package ``_jt_node_pool`` (a name of its own: the pool's forked ranks import the snapshot's
``jupyter_trainer``), with three small programs: ``launch.py`` (``node_launch``),
``pool.py`` (a pool's entry) and ``keeper.py`` (a held Slurm allocation's keeper). The node
agent writes them into the run folder (``pool/``) like the run's other files."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from ... import rankside
from ...rankside.hotstart.node_launch import BUNDLE_PACKAGE

FOLDER = "pool"  # in a node's run folder
_PROGRAMS = {
    "launch.py": (
        "import sys\nfrom _jt_node_pool.hotstart.node_launch import main\n\n"
        "sys.exit(main(sys.argv[1:]))\n"
    ),
    "pool.py": (
        "import sys\nfrom _jt_node_pool.hotstart.warm import main\n\nsys.exit(main(sys.argv[1:]))\n"
    ),
    "keeper.py": (
        "import sys\nfrom _jt_node_pool.hotstart.keeper import main\n\n"
        "sys.exit(main(sys.argv[1:]))\n"
    ),
}


@lru_cache(maxsize=1)
def node_bundle() -> tuple[str, dict[str, str]]:
    """(content hash, {path in the run folder: text}) of the pool's files for a node."""
    files = {f"{FOLDER}/{BUNDLE_PACKAGE}/{rel}": rankside.text(rel) for rel in rankside.POOL}
    files.update({f"{FOLDER}/{name}": text for name, text in _PROGRAMS.items()})
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path}\0{files[path]}\0".encode())
    return digest.hexdigest()[:16], files
