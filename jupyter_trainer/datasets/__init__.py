"""Data inputs of a run (``--data NAME=PATH``): checked and hashed before the run exists,
downloaded when they are URLs, and staged into a node cache where the ranks do not share
this machine's filesystem.

- ``digest.py``: a file or folder's manifest and content hash (file hashes cached by stat).
- ``fetch.py``: ``http(s)://`` and fsspec URLs downloaded once into the local cache.
- ``inputs.py``: ``resolve_inputs``, ``--data`` values to checked ``DataSpec``s.
- ``stage.py``: an input sent to a node's ``<workdir>/data/<hash>/`` (rsync where both
  ends have it, else only the changed files in a tar), nothing when it is there already.
"""

from .inputs import resolve_inputs

__all__ = ["resolve_inputs"]
