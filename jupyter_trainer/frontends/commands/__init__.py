"""The commands of ``jupyter-trainer`` and ``%train``: one table, one module per noun.

``table.py`` assembles them (``COMMANDS``) and both front ends build their parser from it.
Each command is one argparse definition and one function that writes its text to a stream
and returns an exit code, or starts a run or a sweep for the front end to follow, so a flag,
an output and an error message are the same in both front ends (``options.py`` holds the run
options they share with ``%%train``, ``parser.py`` the parser they are defined on)."""
