"""The ``jupyter-trainer`` command line, run as real processes, and its command table."""
