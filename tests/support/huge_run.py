"""A finished run with a huge history, written straight into the store: for the widget and
browser tests and bench/browser_huge_run.py."""

from __future__ import annotations

from jupyter_trainer.api import runs as api


def huge_run(n: int = 1_000_000, log_mb: int = 100) -> api.Run:
    """A finished 2-rank run whose history is ``n`` points of loss and acc per rank, in the
    runtime's event format, and ``log_mb`` MB of logs (written here: a real run would take
    minutes to log that much on two cores)."""
    run = api.submit("print('warm-up')", launcher="python", name="huge", wait=True)
    start = run.state["created"]
    for rank in (0, 1):
        with open(run.path / "events" / f"rank-{rank}.jsonl", "w") as fh:
            fh.write(
                "".join(
                    f'{{"kind": "metric", "t": {start + i / 1000!r}, "step": {i}, "values": '
                    f'{{"loss": {1.0 / (i + 1) + (rank + 1) * 0.01 * (i % 997 == 0)!r}, '
                    f'"acc": {i / n!r}}}}}\n'
                    for i in range(n)
                )
            )
            fh.write(
                f'{{"kind": "progress", "t": {start + n / 1000!r}, "done": {n}, "total": {n}}}\n'
            )
        with open(run.path / "logs" / f"rank-{rank}.log", "w") as fh:
            block = "".join(f"rank {rank} line {i:06d} " + "x" * 80 + "\n" for i in range(10_000))
            for _ in range(log_mb // 2):
                fh.write(block)
            fh.write(f"\x1b[32mrank {rank} done\x1b[0m\n")
    return run
