"""What a real jupyter_server does with hostile output and messages: a rank's log line
longer than one read, progress bars drawn with ``\\r`` only, and a WebSocket message built to
make a bracket count slow."""

from __future__ import annotations

import asyncio
import json
import time

from support.server_rest import BASE, Viewer, get_json, jp_server_config  # noqa: F401 (jp_server_config: the server's configuration)

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.server.base import MAX_READ_BYTES
from jupyter_trainer.frontends.server.view import MAX_MESSAGE_BYTES

pytest_plugins = ["pytest_jupyter.jupyter_server"]

LONG = 5 << 20  # bytes of one line without a newline: more than one REST read

# A progress bar redrawn with \r only (over 4 MiB of it, as tqdm writes), then a 5 MiB line
# with no end at all (of three-byte characters, which a read may not cut), then the traceback
# that says why the rank failed.
NO_NEWLINES = f"""
import sys
for i in range(60_000):
    sys.stdout.write(f"\\r{{i:>6}}/60000 " + "#" * 70)
sys.stdout.write("\u20ac" * {LONG // 3})
sys.stdout.flush()
raise ValueError("the end of a run that never wrote a newline")
"""


def failed_run_without_newlines():
    run = api.submit(NO_NEWLINES, launcher="python", name="no-newlines")
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "failed"
    return run


def stream_messages(body: bytes) -> list[tuple[str, dict]]:
    """(event kind, payload) of each server-sent event in ``body``."""
    blocks = [block for block in body.decode().split("\n\n") if block]
    return [
        (b.split("\n")[0].removeprefix("event: "), json.loads(b.split("\n", 1)[1][6:]))
        for b in blocks
    ]


def check_whole_log(text: str) -> None:
    assert "\r 59999/60000 " in text  # the progress bar's last drawing
    assert "\u20ac" * (LONG // 3) in text  # whole once its pieces are joined, no euro cut
    assert text.rstrip().endswith("ValueError: the end of a run that never wrote a newline")


async def test_logs_deliver_a_line_longer_than_a_read_in_pieces_and_the_traceback(jp_fetch, home):
    run = failed_run_without_newlines()
    size = run.store.paths(run.id).log_file(0).stat().st_size
    assert size > 2 * MAX_READ_BYTES
    pieces, offset = [], 0
    for _ in range(10):
        answer = await get_json(jp_fetch, "runs", run.id, "logs", rank="0", offset=str(offset))
        if answer["offset"] == offset:
            break
        assert answer["text"], "an answer that moves the offset has text"
        pieces.append(answer["text"])
        offset = answer["offset"]
    assert offset == size, f"the reads stopped at byte {offset} of {size}"
    check_whole_log("".join(pieces))


async def test_the_stream_sends_a_log_without_newlines_and_ends(jp_fetch, home):
    run = failed_run_without_newlines()
    response = await jp_fetch(BASE, "runs", run.id, "stream", request_timeout=60)
    messages = stream_messages(response.body)
    assert messages[-1] == ("end", {"status": "failed"})
    check_whole_log("".join(p["text"] for kind, p in messages if kind == "log"))


async def test_progress_drawn_with_carriage_returns_only_reaches_a_live_stream(jp_fetch, home):
    run = api.submit(
        "import sys, time\nfor i in range(600):\n"
        "    sys.stdout.write(f'\\rstep {i}'); sys.stdout.flush(); time.sleep(0.1)",
        launcher="python",
        name="progress",
    )
    try:
        deadline = time.monotonic() + 60
        text, offset = "", 0
        while "\rstep 3" not in text and time.monotonic() < deadline:
            answer = await get_json(jp_fetch, "runs", run.id, "logs", offset=str(offset))
            text, offset = text + answer["text"], answer["offset"]
            await asyncio.sleep(0.2)
        assert "\rstep 3" in text, f"the progress never arrived: {text!r}"
    finally:
        run.cancel()
        run.wait(timeout=60, raise_on_failure=False)


async def test_an_event_line_longer_than_a_read_is_skipped_and_the_next_one_read(jp_fetch, home):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\njt.log(step=0, x=0)",
        launcher="python",
        name="long-event",
        wait=True,
    )
    with open(run.store.paths(run.id).events_file(0), "ab") as events:
        events.write(b'{"kind": "metric", "values": {"pad": "' + b"p" * LONG + b'"}}\n')
        events.write(b'{"kind": "metric", "step": 1, "t": 1.0, "values": {"x": 1}}\n')
    steps, offset = [], 0
    for _ in range(5):
        answer = await get_json(jp_fetch, "runs", run.id, "events", rank="0", offset=str(offset))
        if answer["offset"] == offset:
            break
        steps += [e["step"] for e in answer["events"] if e["kind"] == "metric"]
        offset = answer["offset"]
    assert steps == [0, 1]


# Each \" opened a string the old pattern searched to the end for its closing quote: 48 KB of
# them took the server's loop (every request of every user) for seconds, quadratically.
UNCLOSED = '{"set": {"log_selection": "' + '\\"' * 24_000


async def test_a_message_made_to_slow_the_depth_check_is_refused_at_once(
    jp_ws_fetch, jp_fetch, home
):
    run = api.submit("print('x')", launcher="python", name="view-slow", wait=True)
    viewer = Viewer(await jp_ws_fetch(BASE, "runs", run.id, "view"))
    await viewer.read_until(lambda m: m.get("state", {}).get("status") == "completed")
    biggest = '{"set": {"log_selection": "' + '\\"' * ((MAX_MESSAGE_BYTES - 40) // 2)
    deep = "[" * (MAX_MESSAGE_BYTES - 10)
    for message in (UNCLOSED, biggest, deep):
        started = time.monotonic()
        viewer.ws.write_message(message)
        # the server shares this loop: another request answers only once the check is done
        version = await get_json(jp_fetch, "version")
        await viewer.read_until(lambda m: viewer.errors, timeout=10)
        took = time.monotonic() - started
        assert version["api"] == 1
        assert took < 0.5, f"a {len(message)}-byte message held the server for {took:.1f} s"
        assert len(viewer.errors) == 1, viewer.errors
        viewer.errors.clear()
    viewer.send({"set": {"log_selection": "0"}})
    model = await viewer.read_until(lambda m: m.get("log", {}).get("selection") == "0")
    assert model["log"]["lines"] == [[0, "x"]] and not viewer.errors
