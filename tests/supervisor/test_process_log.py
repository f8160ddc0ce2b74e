"""The detached processes' log files: one set-up (``core.logs.process_log``), one line per
message as ``HH:MM:SS message``, and a full disk never turns a log line into a traceback."""

from __future__ import annotations

import io
import logging
import re
from collections.abc import Iterator

import pytest

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.logs import PACKAGE, process_log

LINE = re.compile(r"\d\d:\d\d:\d\d \S.*")


@pytest.fixture
def package_logger() -> Iterator[logging.Logger]:
    """The package's logger, as it was again after the test."""
    logger = logging.getLogger(PACKAGE)
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield logger
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


def test_every_package_logger_writes_time_and_message(package_logger: logging.Logger) -> None:
    stream = io.StringIO()
    log = process_log("jupyter_trainer.supervisor", stream)
    log.info("running backend='gloo'")
    logging.getLogger("jupyter_trainer.store").warning("the index is behind")
    logging.getLogger("jupyter_trainer.store").debug("not shown")
    lines = stream.getvalue().splitlines()
    assert [LINE.fullmatch(line) is not None for line in lines] == [True, True]
    assert [line[9:] for line in lines] == ["running backend='gloo'", "the index is behind"]
    assert process_log("jupyter_trainer.supervisor", io.StringIO()) is log
    log.info("once")
    assert stream.getvalue().count("once") == 1  # a second set-up added no handler


def test_a_full_disk_drops_the_line_quietly(
    package_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    class Full(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError(28, "No space left on device")

    process_log("jupyter_trainer.supervisor", Full()).info("completed")
    assert capsys.readouterr().err == ""


def test_the_supervisor_log_reads_time_then_message(home) -> None:
    run = api.submit("print('hi')", name="logged", launcher="python")
    run.wait(timeout=120)
    lines = (run.path / "supervisor.log").read_text().splitlines()
    said = [line[9:].split(" ")[0] for line in lines if LINE.fullmatch(line)]
    assert said[:1] == ["preparing"] and "running" in said and said[-1] == "completed", lines
