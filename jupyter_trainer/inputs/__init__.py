"""Data inputs of a run (``--data NAME=PATH``): checked and hashed before the run exists,
downloaded when they are URLs, and staged into a node cache where the ranks do not share
this machine's filesystem.

- ``digest.py``: a file or folder's manifest and content hash (file hashes cached by stat).
- ``fetch.py``: URL inputs downloaded once into the local cache, never left half done;
  ``http_fetch.py`` for ``http(s)://``, ``fsspec_fetch.py`` for other schemes.
- ``limits.py``: a download's size and time limits, its watchdog and its progress lines.
- ``credentials.py``: a URL's credentials, kept owner-only for a rerun, nowhere else.
- ``inputs.py``: ``resolve_inputs``, ``--data`` values to checked ``DataSpec``s.
- ``stage.py``: an input sent to a node's ``<workdir>/data/<hash>/`` (rsync where both
  ends have it, else only the changed files in a tar), nothing when it is there already.
"""

from .inputs import parse_inputs, resolve_inputs

__all__ = ["parse_inputs", "resolve_inputs"]
