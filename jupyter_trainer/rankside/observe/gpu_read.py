"""Reading a node's NVIDIA GPUs without creating a CUDA context.

Two readers give the same rows, one per GPU, and the GPU memory each process holds:

- ``NvmlReader``: NVML itself through ``nvidia-ml-py`` (``import pynvml``), where that
  package is importable in the rank's environment and the driver's ``libnvidia-ml.so.1``
  loads. It also gives each process's share of the SM time (``gpu_process_sm_percent``).
- ``SmiReader``: ``nvidia-smi``'s query interface, which reads NVML too, where it is not.

Where DCGM's command line ``dcgmi`` is on the PATH, ``dcgm_sm_active`` adds its SM-activity
field (``DCGM_FI_PROF_SM_ACTIVE``): the share of time at least one warp was resident, which
a busy-wait kernel cannot fake the way it fakes nvidia-smi's utilisation.

Standard library only (``pynvml`` is optional): this file is copied into every run's
snapshot with the runtime.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

SMI_TIMEOUT = 10.0
DCGM_TIMEOUT = 5.0
DCGM_SM_ACTIVE = 1002  # DCGM_FI_PROF_SM_ACTIVE
SMI_FIELDS = (  # nvidia-smi's --query-gpu names, the figures' names, the factor to their unit
    ("index", "gpu_index", 1),
    ("uuid", None, None),
    ("utilization.gpu", "gpu_util_percent", 1),
    ("memory.used", "gpu_mem_used_bytes", 1 << 20),
    ("memory.total", "gpu_mem_total_bytes", 1 << 20),
    ("power.draw", "gpu_power_watts", 1),
    ("power.limit", "gpu_power_limit_watts", 1),
    ("temperature.gpu", "gpu_temp_c", 1),
    ("clocks.sm", "gpu_sm_clock_mhz", 1),
)

Row = tuple[str, str, dict[str, float]]  # (index, uuid, figures)


def open_reader() -> NvmlReader | SmiReader | None:
    """NVML through nvidia-ml-py where it loads, else nvidia-smi where it is on the PATH,
    else None (no NVIDIA driver on this node)."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        pynvml.nvmlInit()
        return NvmlReader(pynvml)
    except Exception:  # not installed, no driver library, or a driver that will not answer
        pass
    smi = shutil.which("nvidia-smi")
    return SmiReader(smi) if smi else None


class NvmlReader:
    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.seen: dict[str, int] = {}  # per GPU: NVML's timestamp of the last SM sample read

    def rows(self) -> list[Row]:
        nvml = self.nvml
        rows: list[Row] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            rows.append((str(i), _text(nvml.nvmlDeviceGetUUID(handle)), self.figures(i, handle)))
        return rows

    def figures(self, index: int, handle: Any) -> dict[str, float]:
        nvml = self.nvml
        readings = (
            ("gpu_util_percent", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            ("gpu_mem_used_bytes", lambda: self.memory(handle).used),
            ("gpu_mem_total_bytes", lambda: self.memory(handle).total),
            ("gpu_power_watts", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000),
            ("gpu_power_limit_watts", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000),
            (
                "gpu_temp_c",
                lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            ),
            ("gpu_sm_clock_mhz", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        )
        figures: dict[str, float] = {"gpu_index": index}
        for name, read in readings:
            try:
                figures[name] = _plain(read())
            except nvml.NVMLError:  # [Not Supported] on this GPU: left out, as smi does
                continue
        return figures

    def memory(self, handle: Any) -> Any:
        """NVML's memory figures in its second version, whose ``used`` leaves out what the
        driver reserves, as nvidia-smi's does; the first where the driver has no second."""
        nvml = self.nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            except nvml.NVMLError:
                pass
        return nvml.nvmlDeviceGetMemoryInfo(handle)

    def held(self, pids: set[int]) -> dict[str, float]:
        nvml = self.nvml
        held: dict[str, float] = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except nvml.NVMLError:
                continue
            for proc in procs:
                if proc.pid in pids:
                    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                    held[uuid] = held.get(uuid, 0.0) + float(proc.usedGpuMemory or 0)
        return held

    def process_sm(self, index: str, uuid: str, pids: set[int]) -> float | None:
        """The most SM time (%) one of ``pids`` had on GPU ``index`` in NVML's samples since
        the last call; None where NVML keeps no such samples."""
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(int(index))
        since = self.seen.get(uuid, int((time.time() - 10) * 1e6))
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except nvml.NVMLError:  # NOT_FOUND: no process ran a kernel since; else unsupported
            return None
        ours = [s for s in samples if s.pid in pids]
        if samples:
            self.seen[uuid] = max(s.timeStamp for s in samples)
        return float(max(s.smUtil for s in ours)) if ours else 0.0


class SmiReader:
    name = "nvidia-smi"

    def __init__(self, smi: str) -> None:
        self.smi = smi

    def rows(self) -> list[Row]:
        names = [query for query, _, _ in SMI_FIELDS]
        rows: list[Row] = []
        for cells in smi_rows(self.smi, f"--query-gpu={','.join(names)}"):
            if len(cells) != len(SMI_FIELDS):
                continue
            figures: dict[str, float] = {}
            for (_, name, scale), text in zip(SMI_FIELDS, cells):
                value = number(text)
                if name is not None and scale is not None and value is not None:
                    figures[name] = value * scale if scale != 1 else value
            rows.append((cells[0], cells[1], figures))
        return rows

    def held(self, pids: set[int]) -> dict[str, float]:
        held: dict[str, float] = {}
        for row in smi_rows(self.smi, "--query-compute-apps=pid,gpu_uuid,used_memory"):
            if len(row) == 3 and row[0].isdigit() and int(row[0]) in pids:
                held[row[1]] = held.get(row[1], 0.0) + (number(row[2]) or 0.0) * (1 << 20)
        return held

    def process_sm(self, index: str, uuid: str, pids: set[int]) -> float | None:
        return None


def dcgm_sm_active(dcgmi: str, index: str) -> float | None:
    """DCGM's SM activity of GPU ``index`` (%), one sample through ``dcgmi dmon`` (the
    program at ``dcgmi``); None where DCGM does not answer (its host engine down, profiling
    not supported)."""
    try:
        done = subprocess.run(
            [dcgmi, "dmon", "-e", str(DCGM_SM_ACTIVE), "-c", "1", "-d", "100", "-i", index],
            capture_output=True,
            text=True,
            timeout=DCGM_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in done.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 3 and cells[0] == "GPU" and cells[1] == index:
            value = number(cells[2])
            return None if value is None else round(100.0 * value, 1)
    return None


def visible_device(rows: list[Row], local_rank: int) -> str | None:
    """The uuid of the GPU ``local_rank`` uses among ``CUDA_VISIBLE_DEVICES`` (all, unset)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        picks = [uuid for _, uuid, _ in rows]
    else:
        picks = []
        for item in (v.strip() for v in visible.split(",")):
            if not item:
                break
            found = next(
                (uuid for index, uuid, _ in rows if index == item or uuid.startswith(item)),
                None,
            )
            if found is None:
                break  # CUDA stops at the first device it cannot find
            picks.append(found)
    if not picks:
        return None
    return picks[local_rank % len(picks)]


def smi_rows(smi: str, query: str) -> list[list[str]]:
    done = subprocess.run(
        [smi, query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=SMI_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(done.stderr.strip() or f"nvidia-smi exited with {done.returncode}")
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line]


def number(text: str) -> float | None:
    """A figure of nvidia-smi's CSV; None for ``[N/A]``, ``[Not Supported]`` and the like."""
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() else value


def _plain(value: Any) -> float:
    value = float(value)
    return int(value) if value.is_integer() else round(value, 3)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
