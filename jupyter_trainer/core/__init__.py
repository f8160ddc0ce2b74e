"""Layer 1: what every layer above shares.

- ``errors.py``: the error family; core code raises these, front ends map them to a notebook
  message, an HTTP status or an exit code;
- ``spec.py``: the frozen, validated RunSpec (and its parts) with a JSON round trip;
- small utilities: atomic files (``files.py``), sizes (``units.py``), printable text
  (``printable.py``), credentials in URLs (``urls.py``), lazy package attributes
  (``lazy.py``), waking on a folder's change (``waker.py``), the version (``version.py``).
"""
