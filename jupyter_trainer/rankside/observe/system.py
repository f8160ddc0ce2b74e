"""What a rank's hardware is doing, sampled by the runtime's flusher thread while it lives.

Every ``--system-interval`` seconds (5 by default; 0 turns sampling off) a rank appends one
``{"kind": "system", "t": ..., "values": {...}}`` line to its events file: the first as the
rank starts, the next a second later (the first with a CPU figure, which is a rate since the
one before), then one an interval, and a last one as the rank exits (not when it is
killed), so a run shorter than the interval has its figures too. The values:

- of its process and every process below it (data-loader workers included): ``cpu_percent``
  (100 is one core busy) and ``rss_bytes``; ``rss_peak_bytes``, the rank process's own peak;
- of the same processes: ``disk_read_bytes_per_s`` and ``disk_write_bytes_per_s``, what
  they read from and wrote to storage;
- of its node: ``node_mem_available_bytes`` and ``node_mem_total_bytes``, and
  ``node_net_rx_bytes_per_s`` and ``node_net_tx_bytes_per_s`` over its interfaces (not
  loopback);
- of its GPU, when the node has NVIDIA GPUs: ``gpu_util_percent``, ``gpu_mem_used_bytes``,
  ``gpu_mem_total_bytes``, ``gpu_power_watts``, ``gpu_power_limit_watts``, ``gpu_temp_c``,
  ``gpu_sm_clock_mhz``, ``gpu_index``, and ``gpu_process_mem_bytes``, the GPU memory its own
  processes hold; through NVML also ``gpu_process_sm_percent``, their share of the SM time,
  and with DCGM ``gpu_sm_active_percent``, its SM activity.

The rank's GPU is the one whose compute processes include its own; before it has one, the
device its ``LOCAL_RANK`` picks among ``CUDA_VISIBLE_DEVICES``. GPU figures are read by
rankside/observe/gpu_read.py, through NVML (nvidia-ml-py) or ``nvidia-smi``, never through CUDA, so
the sampler creates no CUDA context in the rank. CPU, memory, disk and network figures are
read from ``/proc`` (Linux); elsewhere they are left out.

Standard library only (gpu_read.py uses nvidia-ml-py where the rank's environment has it):
this file is copied into every run's snapshot with the runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from typing import Any

from jupyter_trainer.rankside.observe import gpu_read

DEFAULT_INTERVAL = 5.0
CPU_BASELINE = 1.0  # seconds from the first sample to the second, the first with a CPU figure
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def interval(run_dir: str | None) -> float:
    """Seconds between samples: the run's ``--system-interval`` (``watch.system_interval``
    of its spec.json); 0 when sampling is off or there is no run."""
    import jupyter_trainer.rankside.rank.run_inputs as run_inputs

    try:
        watch = run_inputs.from_spec(run_dir, "watch") if run_dir else None
    except RuntimeError:
        return DEFAULT_INTERVAL
    value = (watch or {}).get("system_interval", DEFAULT_INTERVAL)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return 0.0
    return float(value)


_sampler: Sampler | None = None


def due_line(pid: int, local_rank: int, run_dir: str | None, now: float) -> bytes | None:
    """The next line of figures of rank process ``pid`` when one is due; None in another
    process (a data-loader worker forked from the rank) and outside a run."""
    global _sampler
    if run_dir is None or os.getpid() != pid:
        return None
    if _sampler is None:
        _sampler = Sampler(pid, local_rank, interval(run_dir))
    line = _sampler.line(now)
    return line.encode() if line else None


def last_line(pid: int, now: float) -> bytes | None:
    """The figures of rank process ``pid`` as it exits; None in another process, outside a
    run, with sampling off, and when a sample was just taken."""
    if _sampler is None or os.getpid() != pid:
        return None
    line = _sampler.line(now, last=True)
    return line.encode() if line else None


class Sampler:
    """One rank's sampler: ``line(now)`` is its next events line when one is due, else None."""

    def __init__(self, pid: int, local_rank: int, every: float) -> None:
        self.pid = pid
        self.local_rank = local_rank
        self.every = every
        self.due = 0.0  # when the next sample is due; 0 before the first
        self.taken = 0.0  # when the last one was taken
        self.lock = threading.Lock()  # the flusher's samples and the one at exit
        self.cpu: tuple[float, float] | None = None  # (wall time, CPU seconds) of the last one
        self.gpu_reader = gpu_read.open_reader() if every else None
        self.dcgmi = shutil.which("dcgmi") if self.gpu_reader is not None else None
        self.gpu_failed = False
        self.gpu_last: dict[str, float] = {}  # the last GPU figures read
        self.gpu_peak = 0.0  # the most GPU memory its processes held at a sample
        self.counters: dict[str, tuple[float, float]] = {}  # name -> (time, count) last read

    def line(self, now: float, last: bool = False) -> str | None:
        """The sample due at ``now`` as an events line: the first at once, the second
        ``CPU_BASELINE`` seconds later, then one an interval; with ``last``, one now unless
        one was taken in the last tenth of a second."""
        if not self.every:
            return None
        with self.lock:
            if last:
                if now - self.taken < 0.1:
                    return None
            elif now < self.due:
                return None
            self.due = now + (min(self.every, CPU_BASELINE) if not self.due else self.every)
            self.taken = now
            values = self.sample(now)
        if not values:
            return None
        return json.dumps({"kind": "system", "t": now, "values": values}) + "\n"

    def sample(self, now: float) -> dict[str, float]:
        values: dict[str, float] = {}
        tree = process_tree(self.pid)
        if tree:
            seconds = sum(cpu_seconds(p) for p in tree)
            if self.cpu is not None and now > self.cpu[0]:
                used = max(0.0, seconds - self.cpu[1])
                values["cpu_percent"] = round(100.0 * used / (now - self.cpu[0]), 1)
            self.cpu = (now, seconds)
            values["rss_bytes"] = sum(rss_bytes(p) for p in tree)
            peak = status_kib(self.pid, "VmHWM")
            if peak is not None:
                values["rss_peak_bytes"] = peak * 1024
            disk = [io_bytes(p) for p in tree]
            for i, name in enumerate(("disk_read_bytes_per_s", "disk_write_bytes_per_s")):
                counts = [d[i] for d in disk if d is not None]
                self.rate(values, name, now, sum(counts) if counts else None)
        values.update(node_memory())
        received, sent = net_bytes()
        self.rate(values, "node_net_rx_bytes_per_s", now, received)
        self.rate(values, "node_net_tx_bytes_per_s", now, sent)
        if self.gpu_reader is not None and not self.gpu_failed:
            try:
                self.gpu_last = self.gpu(set(tree) or {self.pid})
            except Exception:  # NVML or nvidia-smi failed, hung or answered what cannot be read
                self.gpu_failed = True  # a broken driver is not asked every few seconds
            values.update(self.gpu_last)
            self.gpu_peak = max(self.gpu_peak, self.gpu_last.get("gpu_process_mem_bytes", 0))
        return values

    def rate(self, values: dict[str, float], name: str, now: float, count: float | None) -> None:
        """``values[name]``: how fast ``count`` (a counter that only grows) grew since the
        last sample; none at the first. A process of the tree that ended takes its counts
        with it, so a fall reads 0."""
        if count is None:
            return
        last = self.counters.get(name)
        self.counters[name] = (now, count)
        if last is not None and now > last[0]:
            values[name] = round(max(0.0, count - last[1]) / (now - last[0]))

    def gpu(self, pids: set[int]) -> dict[str, float]:
        reader = self.gpu_reader
        if reader is None:
            return {}
        rows = reader.rows()
        if not rows:
            return {}
        held = reader.held(pids)
        by_uuid = {uuid: (index, figures) for index, uuid, figures in rows}
        uuid = next((u for u in held if u in by_uuid), None) or gpu_read.visible_device(
            rows, self.local_rank
        )
        if uuid is None:
            return {}
        index, figures = by_uuid[uuid]
        out = dict(figures)
        out["gpu_process_mem_bytes"] = held.get(uuid, 0.0)
        share = reader.process_sm(index, uuid, pids)
        if share is not None:
            out["gpu_process_sm_percent"] = share
        active = gpu_read.dcgm_sm_active(self.dcgmi, index) if self.dcgmi else None
        if active is not None:
            out["gpu_sm_active_percent"] = active
        return out


def gpu_oom(exc: BaseException) -> dict[str, Any]:
    """``{"gpu_oom": {...}}`` when ``exc`` is PyTorch's out-of-memory error, else {}: the
    rank's GPU (``device``), the most memory its processes held at a sample and PyTorch's
    own peak reservation (``peak_bytes``, the larger), and the GPU's ``total_bytes``. CUDA
    is only asked when it is initialised already (the error says it is)."""
    kind = type(exc)
    if kind.__name__ != "OutOfMemoryError" or not kind.__module__.startswith("torch"):
        return {}
    found: dict[str, Any] = {}
    last = _sampler.gpu_last if _sampler is not None else {}
    if "gpu_index" in last:
        found["device"] = int(last["gpu_index"])
    if "gpu_mem_total_bytes" in last:
        found["total_bytes"] = int(last["gpu_mem_total_bytes"])
    peak = _sampler.gpu_peak if _sampler is not None else 0.0
    try:
        import sys

        cuda = sys.modules["torch"].cuda
        if cuda.is_initialized():
            device = cuda.current_device()
            peak = max(peak, float(cuda.max_memory_reserved(device)))
            found["total_bytes"] = int(cuda.get_device_properties(device).total_memory)
    except Exception:  # no CUDA in this torch, or it is broken: the samples say what they can
        pass
    if peak:
        found["peak_bytes"] = int(peak)
    return {"gpu_oom": found}


def process_tree(root: int) -> list[int]:
    """``root`` and every process below it, from ``/proc``; [] where there is no ``/proc``."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is not None:
            parents.setdefault(int(stat[1]), []).append(int(entry))
    if _stat(root) is None:
        return []
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, ()))
    return tree


def _stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/PID/stat`` after the command's name: state, ppid, ...; None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    return text.rsplit(")", 1)[-1].split()


def cpu_seconds(pid: int) -> float:
    stat = _stat(pid)
    if stat is None or len(stat) < 13:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / _TICKS  # utime and stime


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(key.encode() + b":"):
                    return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return None


def io_bytes(pid: int) -> tuple[int, int] | None:
    """Bytes ``pid`` had read from and written to storage (``/proc/PID/io``; page-cache hits
    are not reads); None where it cannot be read."""
    found: dict[bytes, int] = {}
    try:
        with open(f"/proc/{pid}/io", "rb") as fh:
            for line in fh:
                key, _, rest = line.partition(b":")
                if key in (b"read_bytes", b"write_bytes"):
                    found[key] = int(rest)
    except (OSError, ValueError):
        return None
    if len(found) != 2:
        return None
    return found[b"read_bytes"], found[b"write_bytes"]


def net_bytes() -> tuple[int | None, int | None]:
    """Bytes the node's network interfaces (loopback left out) received and sent, from
    ``/proc/net/dev`` (of the rank's network namespace)."""
    received = sent = 0
    try:
        with open("/proc/net/dev", "rb") as fh:
            for line in fh.readlines()[2:]:
                name, _, rest = line.partition(b":")
                fields = rest.split()
                if name.strip() == b"lo" or len(fields) < 9:
                    continue
                received += int(fields[0])
                sent += int(fields[8])
    except (OSError, ValueError):
        return None, None
    return received, sent


def node_memory() -> dict[str, float]:
    found: dict[str, float] = {}
    try:
        with open("/proc/meminfo", "rb") as fh:
            for line in fh:
                key, _, rest = line.partition(b":")
                if key in (b"MemTotal", b"MemAvailable"):
                    name = "total" if key == b"MemTotal" else "available"
                    found[f"node_mem_{name}_bytes"] = int(rest.split()[0]) * 1024
    except (OSError, IndexError, ValueError):
        return {}
    return found
