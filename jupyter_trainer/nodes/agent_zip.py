"""The node agent as it is sent to a node: one zip application (``jt-node-<hash>.pyz``).

The agent is the package ``rankside.AGENT`` lists (the agent's modules and the rank-side
modules they import), shipped under a name of its own, ``_jt_agent``, so that it never
meets the snapshot's ``jupyter_trainer`` stand-in or the pool's ``_jt_node_pool`` in one
process. ``__main__.py`` at the root of the zip makes it a program: ``python x.pyz
--workdir W SUB ARGS`` runs it, as ``runpy.run_path`` does (``nodes/commands.py``).

The bytes are built here, in memory, the same for the same sources: entries sorted, every
timestamp and mode fixed, stored uncompressed (a node's python needs no zlib to read it).
Their digest names the installed file, so versions never mix.
"""

from __future__ import annotations

import io
import zipfile
from functools import lru_cache

from .. import rankside

PACKAGE = "_jt_agent"
MAIN = (
    '"""The node agent: ``python jt-node-<hash>.pyz --workdir W SUB ARGS``."""\n'
    f"import sys\nfrom {PACKAGE}.agent.main import main\n\nsys.exit(main(sys.argv[1:]))\n"
)
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


def agent_files() -> dict[str, bytes]:
    """{path in the zip: bytes} of the agent's zip application."""
    files = {f"{PACKAGE}/{name}": rankside.source(name) for name in rankside.AGENT}
    files["__main__.py"] = MAIN.encode()
    return files


@lru_cache(maxsize=1)
def agent_zip() -> bytes:
    """The agent's zip application, byte for byte the same for the same sources."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path, data in sorted(agent_files().items()):
            entry = zipfile.ZipInfo(path, date_time=_EPOCH)
            entry.create_system = 3  # unix, wherever the zip is built
            entry.external_attr = 0o100644 << 16
            entry.compress_type = zipfile.ZIP_STORED
            archive.writestr(entry, data)
    return buffer.getvalue()
