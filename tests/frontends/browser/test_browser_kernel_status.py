"""JupyterLab's kernel status while a ``%%train`` cell waits on its run, in headless Chromium:
busy for as long as the cell runs, through the run view's own messages to the kernel and a
click in it, and idle once the cell is done.
"""

from __future__ import annotations

from support.browser_page import browser  # noqa: F401 (the fixture)

CELL = """%%train --name waiting
import os, time
from jupyter_trainer import runtime as jt
for step in range(600):
    jt.log(step=step, loss=1.0 / (step + 1))
    if os.path.exists({flag!r}):
        break
    time.sleep(0.2)
"""


def test_the_kernel_shows_busy_while_a_train_cell_waits(browser, home, tmp_path):
    lab, page = browser
    pw = page.page
    flag = tmp_path / "done"
    lab.write_notebook("status.ipynb", ["%load_ext jupyter_trainer", CELL.format(flag=str(flag))])
    page.open("status.ipynb")
    page.run_all()
    view = ".jp-OutputArea [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('running')")
    pw.wait_for_selector(f"{view} [data-testid=jt-chart][data-points]")
    pw.wait_for_timeout(1500)  # the view's first messages to the kernel have been answered
    assert page.kernel_status().endswith("| Busy"), page.kernel_status()
    pw.click(f"{view} [data-testid=jt-opt-x] button[data-value=time]")  # a message to the kernel
    pw.wait_for_selector(f"{view} [data-testid=jt-chart][data-x=time]")
    pw.wait_for_timeout(1000)
    assert page.kernel_status().endswith("| Busy"), page.kernel_status()
    flag.touch()
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('completed')")
    page.wait_idle()
