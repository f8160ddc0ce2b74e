"""The Training Runs side panel in a real JupyterLab, in headless Chromium: a run started
from the CLI appears, its progress advances, its view follows it over the event stream and
draws a chart, and Cancel ends it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

from jupyter_trainer import api

from conftest import REPO, leftover, wait_for
from test_browser import TIMEOUT_MS, browser  # noqa: F401  (the fixture)

SCRIPT = """
import time
from jupyter_trainer import runtime as jt
for step in range(400):
    print(f"step {step} of 400", flush=True)
    jt.log(step=step, loss=1.0 / (1 + step))
    jt.progress(step + 1, 400)
    time.sleep(0.1)
"""


def fraction(page, run_id: str) -> float:
    value = page.locator(f"[data-testid=jt-runs-row][data-run='{run_id}'] "
                         "[data-testid=jt-runs-progress]").get_attribute("data-fraction")
    return float(value or 0)


def open_panel(page, lab) -> None:
    """JupyterLab with the Training Runs panel shown."""
    pw = page.page
    pw.goto(f"{lab.url}/lab?token={lab.token}&reset")
    pw.wait_for_selector("#jupyter-trainer-runs, [data-id='jupyter-trainer-runs']", state="attached",
                         timeout=TIMEOUT_MS)
    page.dismiss_popups()
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")


def open_run_view(page, lab, run_id: str) -> str:
    """The run's view opened from the panel; returns its selector."""
    open_panel(page, lab)
    page.page.click(f"[data-testid=jt-runs-row][data-run='{run_id}']")
    return f"#jt-run-{run_id}"


def test_panel_lists_a_cli_run_live_and_cancels_it(browser, home, tmp_path):  # noqa: F811
    lab, page = browser
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    run_id = subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", "submit", str(script),
                             "--procs", "2", "--name", "from-cli"],
                            capture_output=True, text=True, check=True).stdout.strip()
    run = api.get_run(run_id)
    wait_for(lambda: run.store.read_events(run_id, 0)[0], timeout=60, what="the first event")

    pw = page.page
    open_panel(page, lab)
    row = f"[data-testid=jt-runs-row][data-run='{run_id}']"
    pw.wait_for_selector(row)
    assert "from-cli" in pw.inner_text(row) and "local" in pw.inner_text(row)
    first = wait_for(lambda: fraction(pw, run_id), timeout=30, what="progress in the panel")
    page.shot("panel-live", "#jupyter-trainer-runs")
    wait_for(lambda: fraction(pw, run_id) > first, timeout=30, what="progress to advance")
    assert pw.inner_text(f"{row} [data-testid=jt-runs-status-badge]") == "running"

    pw.click(row)
    view = f"#jt-run-{run_id}"
    pw.wait_for_selector(f"{view}[data-feed=stream]")  # followed over the event stream
    pw.wait_for_selector(f"{view} [data-testid=jt-chart]")
    ink = wait_for(lambda: pw.eval_on_selector(f"{view} [data-testid=jt-chart]", """c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }"""),
        timeout=30, what="a drawn chart")
    assert ink > 500
    wait_for(lambda: "step" in pw.inner_text(f"{view} [data-testid=jt-log-body]"), timeout=30,
             what="log lines in the run view")
    shot = page.shots / "lab-run-view.png"
    pw.screenshot(path=str(shot))

    # closing the view ends its stream; opening it again follows the run anew
    aborted: list[str] = []
    pw.on("requestfailed", lambda request: aborted.append(request.url))
    pw.click(f".lm-TabBar-tab[data-id='jt-run-area-{run_id}'] .lm-TabBar-tabCloseIcon")
    pw.wait_for_selector(view, state="detached")
    wait_for(lambda: any(f"/runs/{run_id}/stream" in url for url in aborted), timeout=10,
             what="the closed view's stream to be aborted")
    pw.click(row)
    pw.wait_for_selector(f"{view}[data-feed=stream] [data-testid=jt-chart]")
    pw.click(f"{view} [data-testid=jt-cancel]")
    run.wait(timeout=30, raise_on_failure=False)
    assert run.status == "canceled" and leftover(run_id) == []
    pw.wait_for_selector(f"{row} [data-testid=jt-runs-status-badge]:has-text('canceled')")
    pw.wait_for_selector(f"{view}[data-feed=ended] [data-testid=jt-status]:has-text('canceled')")
    page.shot("panel-canceled", "#jupyter-trainer-runs")
    if os.environ.get("JT_UPDATE_SCREENSHOTS"):  # refresh the README's picture on purpose only
        shutil.copy(shot, REPO / "docs" / "screenshots" / "lab-run-view.png")


def test_run_view_polls_when_the_stream_is_refused(browser, home, tmp_path):  # noqa: F811
    lab, page = browser
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("400", "60"))
    run_id = subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", "submit", str(script),
                             "--procs", "2", "--name", "no-stream"],
                            capture_output=True, text=True, check=True).stdout.strip()
    run = api.get_run(run_id)

    pw = page.page
    refused: list[str] = []
    pw.route("**/jupyter-trainer/api/runs/*/stream*",
             lambda route: (refused.append(route.request.url), route.abort()))
    view = open_run_view(page, lab, run_id)
    pw.wait_for_selector(f"{view}[data-feed=poll]")
    assert refused
    pw.wait_for_selector(f"{view} [data-testid=jt-chart]")
    run.wait(timeout=60)
    pw.wait_for_selector(f"{view}[data-feed=ended] [data-testid=jt-status]:has-text('completed')")
    assert pw.get_attribute(f"{view} [data-testid=jt-progress]", "data-fraction") == "1.0000"
    wait_for(lambda: "step 59 of 60" in pw.inner_text(f"{view} [data-testid=jt-log-body]"), timeout=10,
             what="the last log line")
    assert leftover(run_id) == []


def test_run_view_resumes_a_broken_stream_from_its_offsets(browser, home, tmp_path):  # noqa: F811
    """The first stream breaks off halfway (its first half, as the server sent it); the view
    opens it again from the offsets it reached and ends with every line once."""
    lab, page = browser
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("400", "30").replace("time.sleep(0.1)", "pass"))
    run_id = subprocess.run([sys.executable, "-m", "jupyter_trainer.cli", "submit", str(script),
                             "--procs", "2", "--name", "resume", "--wait"],
                            capture_output=True, text=True, check=True).stdout.strip().split()[0]
    run = api.get_run(run_id)
    assert run.status == "completed"

    pw = page.page
    streams: list[str] = []

    def break_the_first(route) -> None:
        streams.append(route.request.url)
        if len(streams) > 1:
            route.continue_()
            return
        blocks = route.fetch().text().split("\n\n")
        data = [b for b in blocks if b.startswith(("event: events", "event: log"))]
        assert len(data) >= 4, blocks
        kept = blocks[:blocks.index(data[len(data) // 2])]
        route.fulfill(status=200, headers={"Content-Type": "text/event-stream"},
                      body="\n\n".join(kept) + "\n\n")

    pw.route("**/jupyter-trainer/api/runs/*/stream*", break_the_first)
    view = open_run_view(page, lab, run_id)
    pw.wait_for_selector(f"{view}[data-feed=ended] [data-testid=jt-status]:has-text('completed')")
    assert len(streams) == 2 and "events=" not in streams[0], streams
    assert "events=" in streams[1], streams
    text = pw.inner_text(f"{view} [data-testid=jt-log-body]")
    for step in range(30):
        assert text.count(f"step {step} of 30\n") + text.endswith(f"step {step} of 30") == 2, step
