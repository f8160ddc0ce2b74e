"""The pre-flight's connection, kept for the run's next steps (``preflight`` with
``session``): one JSON line a request, ``stage`` (a tar of ``n`` bytes follows), ``start``,
then ``follow``, which keeps it."""

import io
import json
import os
import sys

from .follow import follow
from .frames import answer
from .snapshot import unpack
from .start import start


def serve(workdir):
    for line in iter(sys.stdin.buffer.readline, b""):
        ask = json.loads(line)
        if "follow" in ask:
            return follow(ask["follow"], ask.get("offsets", {}))
        if "start" in ask:
            start(workdir, ask["start"])
        else:
            answer(
                {
                    "staged": unpack(
                        os.path.join(workdir, "snapshots"),
                        ask["stage"],
                        io.BytesIO(sys.stdin.buffer.read(ask["n"])),
                    )
                }
            )
