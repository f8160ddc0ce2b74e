"""The run view's System section in a real JupyterLab, in headless Chromium: each rank's
newest CPU, memory and GPU figures in a table, a rank whose GPU sits idle while the other's
works marked, and a chart per figure with a line per rank; alike in the notebook widget and
the Lab view. The GPUs are an ``nvidia-smi`` faked at the process boundary, put on the
ranks' PATH by a local target's ``env``."""

from __future__ import annotations

import os
import re
import sys

from conftest import leftover
from support.browser_page import browser  # noqa: F401 (the fixture)

from jupyter_trainer import api
from jupyter_trainer.frontends.views.cost import money, run_cost
from jupyter_trainer.rankside.observe import gpu_read
from jupyter_trainer.targets.registry import add_target

# GPU 0 works (rank 0 holds 1500 MiB on it); GPU 1, rank 1's by its local rank, idles.
FAKE_SMI = """#!{python}
import os, sys
query = sys.argv[1] if len(sys.argv) > 1 else ""
if query.startswith("--query-gpu="):
    print("0, GPU-00000000-fake, 87, 20000, 81559, 312.45, 700.00, 61, 1980")
    print("1, GPU-11111111-fake, 2, 900, 81559, 60.10, 700.00, 33, 210")
elif query.startswith("--query-compute-apps="):
    if os.environ.get("LOCAL_RANK") == "0":
        print(f"{{os.getppid()}}, GPU-00000000-fake, 1500")
else:
    sys.exit(2)
"""

CELL = """%%train --target gpus --procs 2 --system-interval 0.5 --stall-timeout 2 --name hardware
import time
time.sleep(9)
"""

CHARTS = [
    "gpu_util_percent",
    "gpu_power_watts",
    "gpu_mem_used_bytes",
    "cpu_percent",
    "rss_bytes",
    "disk_read_bytes_per_s",
    "node_net_rx_bytes_per_s",
]


def check_system(page, root: str) -> None:
    pw = page.page
    section = f"{root} [data-testid=jt-system]"
    pw.wait_for_selector(f"{section} tr[data-rank='1']")
    cells = pw.evaluate(
        """sel => [...document.querySelectorAll(sel + ' tr')].map(
            r => [...r.children].map(c => c.textContent))""",
        f"{section} [data-testid=jt-system-table]",
    )
    assert cells[0] == [
        "rank",
        "CPU",
        "memory",
        "node free",
        "disk read / write",
        "node net in / out",
        "GPU",
        "util",
        "GPU memory",
        "power",
        "temp",
        "SM clock",
    ], cells[0]
    assert cells[1][0] == "0" and cells[1][6:] == [
        "0",
        "87%",
        "19.5 GiB / 79.6 GiB",
        "312 W / 700 W",
        "61 °C",
        "1980 MHz",
    ], cells[1]
    assert cells[2][0] == "1" and cells[2][6:] == [
        "1",
        "2%",
        "900.0 MiB / 79.6 GiB",
        "60 W / 700 W",
        "33 °C",
        "210 MHz",
    ], cells[2]
    assert all(cell.endswith("%") for cell in (cells[1][1], cells[2][1])), cells
    assert all(cell.endswith(("MiB", "GiB")) for cell in (cells[1][2], cells[2][2])), cells
    assert all(cell.endswith("/s") for row in cells[1:] for cell in row[4:6]), cells
    # rank 1's GPU idles while rank 0's works: its row is marked, and the section says so
    assert page.attr(f"{section} tr[data-rank='1']", "class") == "jt-gpu-idle"
    assert not page.attr(f"{section} tr[data-rank='0']", "class")
    assert page.text(f"{section} .jt-system-note") == "GPU idle on rank 1 while the others work"
    figures = pw.evaluate(
        """sel => [...document.querySelectorAll(sel)].map(c => [c.dataset.figure,
            c.querySelector('[data-testid=jt-system-chart]')?.dataset.series,
            Number(c.querySelector('[data-testid=jt-system-chart]')?.dataset.points || 0)])""",
        f"{section} .jt-system-card",
    )
    assert [name for name, _, _ in figures] == CHARTS, figures
    assert all(series == "2" and points >= 6 for _, series, points in figures), figures
    legend = " ".join(
        page.text(
            f"{section} .jt-system-card[data-figure=gpu_util_percent] .jt-system-stats"
        ).split()
    )
    assert legend == "rank 0 87% rank 1 2%", legend
    # the charts share the run's time range; their ticks are distinct and say their unit, in
    # the table's units (1024s, named KiB, MiB, GiB)
    axes = pw.evaluate(
        """sel => Object.fromEntries([...document.querySelectorAll(sel)].map(c => {
            const canvas = c.querySelector('[data-testid=jt-system-chart]');
            return [c.dataset.figure, [canvas.dataset.xRange, canvas.dataset.xTicks,
                canvas.dataset.yTicks]];
        }))""",
        f"{section} .jt-system-card",
    )
    assert len({x_range for x_range, _, _ in axes.values()}) == 1, axes
    label = re.compile(r"-?[\d.,]+k?(?: ?(?:%|W|B|KiB|MiB|GiB|TiB)(?:/s)?)?")
    for name, (_, x_ticks, y_ticks) in axes.items():
        for ticks in (x_ticks.split(), label.findall(y_ticks)):
            assert ticks and len(ticks) == len(set(ticks)), (name, ticks)
    unit = lambda name: {t.lstrip("-0123456789.,k ") for t in label.findall(axes[name][2])}
    assert unit("cpu_percent") == unit("gpu_util_percent") == {"%"}, axes
    assert unit("gpu_power_watts") == {"W"}, axes
    assert unit("rss_bytes") <= {"B", "KiB", "MiB", "GiB"}, axes
    assert unit("node_net_rx_bytes_per_s") <= {"B/s", "KiB/s", "MiB/s", "GiB/s"}, axes


def test_the_system_section_shows_each_ranks_hardware(browser, home, tmp_path):
    lab, page = browser
    pw = page.page
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(python=sys.executable))
    smi.chmod(0o755)
    add_target(
        "gpus",
        "local",
        home=home,
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0,1"},
        price_per_gpu_hour=3600.0,  # a dollar a second for each of the two ranks
    )
    assert [query for query, _, _ in gpu_read.SMI_FIELDS][2:] == [
        "utilization.gpu",
        "memory.used",
        "memory.total",
        "power.draw",
        "power.limit",
        "temperature.gpu",
        "clocks.sm",
    ]  # the order of the fake's columns
    lab.write_notebook("hardware.ipynb", ["%load_ext jupyter_trainer", CELL])
    page.open("hardware.ipynb")
    page.run_all()
    widget = ".jp-OutputArea [data-testid=jt-monitor]"
    # while it runs, rank 1 stalls with its GPU idle: the stall banner tags it
    tag = pw.wait_for_selector(f"{widget} [data-testid=jt-gpu-idle]", timeout=120_000)
    assert tag.text_content() == "GPU idle: 2% at 60 W of 700 W"
    pw.wait_for_selector(f"{widget} [data-testid=jt-status]:text-is('completed')", timeout=120_000)
    run = api.get_run(page.text(f"{widget} [data-testid=jt-run-id]"))
    check_system(page, widget)
    # the cost meter: two GPU-ranks at $3,600 an hour, from the running stage to the end
    cost = run_cost(run.spec, run.state, run.state["ended"])
    assert cost is not None and cost["so_far"] > 2 * 9
    assert page.text(f"{widget} [data-testid=jt-cost]") == f"{money(cost['so_far'], '$')} so far"
    assert page.attr(f"{widget} [data-testid=jt-cost]", "title") == "2 GPUs at $3,600.00 an hour"
    page.shot("system-widget", f"{widget} [data-testid=jt-system]")
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    view = f"#jt-run-{run.id} [data-testid=jt-monitor]"
    check_system(page, view)
    page.shot("system-lab-view", f"{view} [data-testid=jt-system]")
    assert leftover(run.id) == []
