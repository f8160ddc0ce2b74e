"""The commands of ``jupyter-trainer`` and ``%train``: one table, one module per noun.

Each command is one argparse definition and one function that writes its text to a stream
and returns an exit code, so a flag, an output and an error message are the same in both
front ends (``options.py`` holds the run options they share with ``%%train``)."""
