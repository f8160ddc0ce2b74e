"""Capturing a cell or a script: free names, the snapshot, secrets kept out of it, and the
cells' lines a run cites."""
