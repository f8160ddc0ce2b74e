"""The agent's answers: frames on stdout, a line ``\\x1eJT {json header}`` (the header holds
``n``) then ``n`` raw bytes. The marker lets the reader skip what a login shell's rc files
print before the agent starts; one call's answer is its last frame's header."""

import json
import sys

MARK = b"\x1eJT "
CHUNK = 1 << 20


def frame(header, payload=b""):
    header = dict(header, n=len(payload))
    sys.stdout.buffer.write(MARK + json.dumps(header).encode() + b"\n" + payload)


def answer(data):
    frame(data)
    sys.stdout.buffer.flush()


def first_frame(data):
    """The header of the first frame in another agent's output ``data`` (without ``n``)."""
    at = data.find(MARK)
    header = json.loads(data[at + len(MARK) :].split(b"\n", 1)[0].decode()) if at >= 0 else None
    return header and {k: v for k, v in header.items() if k != "n"}
