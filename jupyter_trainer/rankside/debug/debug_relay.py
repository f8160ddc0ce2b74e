"""Join this process's stdin and stdout to a rank's debugger socket on this node.

What ``jupyter-trainer debug`` and ``%train debug`` start on a rank's node, through the
target's own transport (``ssh HOST``, ``srun --overlap``), to reach the socket the rank
serves pdb on (``debugger.py``). Sent with ``python3 -c``; standard library only.
"""

import os
import selectors
import socket
import sys


def relay(path: str) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as exc:
        print(f"cannot reach the debugger at {path}: {exc}", file=sys.stderr)
        return 1
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ, "in")
    sel.register(conn, selectors.EVENT_READ, "rank")
    while True:
        for key, _ in sel.select():
            if key.data == "in":
                data = os.read(0, 65536)
                if not data:  # the person's side closed: let the debugger see its end
                    sel.unregister(0)
                    conn.shutdown(socket.SHUT_WR)
                    continue
                conn.sendall(data)
                continue
            data = conn.recv(65536)
            if not data:
                return 0
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]


if __name__ == "__main__":
    sys.exit(relay(sys.argv[1]))
