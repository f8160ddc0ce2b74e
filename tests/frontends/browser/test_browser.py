"""The run monitor in a real JupyterLab and Notebook 7, driven by headless Chromium: a live
run with its progress, charts, logs and Cancel; the form launch; a failed run; a huge run; a
reloaded page. ``browser_page`` starts the servers and pages, and saves each step's screenshot.
"""

from __future__ import annotations

from conftest import leftover, wait_for
from support.browser_page import browser, notebook7  # noqa: F401 (the fixtures)
from support.browser_views import LIVE_CELL, LIVE_PARAMS, check_live_view

from jupyter_trainer.api import runs as api


def test_live_monitor_progress_charts_logs_and_cancel(browser, home):
    lab, page = browser
    lab.write_notebook(
        "live.ipynb",
        ["%load_ext jupyter_trainer", "lr = 0.1\nepochs = 50\nsteps_per_epoch = 20", LIVE_CELL],
    )
    page.open("live.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-progress-text]")
    # While the ranks start, the view does not tell the user to call jt.progress (the cell
    # does); every text it showed before the first progress is collected here.
    before_progress = page.page.evaluate("""() => new Promise(done => {
        const seen = new Set(), el = () => document.querySelector('[data-testid=jt-progress-text]');
        const tick = setInterval(() => {
            seen.add(el().textContent);
            if (/ \\/ /.test(el().textContent)) { clearInterval(tick); done([...seen]); }
        }, 20);
    })""")
    assert before_progress and not [t for t in before_progress if "call jt.progress" in t], (
        before_progress
    )
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.params == LIVE_PARAMS
    check_live_view(page, "[data-testid=jt-monitor]", run)
    page.page.wait_for_selector(".jp-OutputArea-output:has-text('RunCanceled')")
    assert run.state["reason"] == "canceled from the notebook (Cancel button)"


FORM_CELL = """%%train --form --procs 2 --name from-form
import time
from jupyter_trainer import runtime as jt
for step in range(epochs * 10):
    jt.log(step=step, loss=1.0 / (1 + lr * step), width=float(sum(layers)))
    jt.progress(step + 1, epochs * 10)
    time.sleep(0.05)
print("trained", lr, epochs, layers, optimizer, augment, flush=True)
"""


def test_form_launch_records_the_entered_values(browser, home):
    lab, page = browser
    lab.write_notebook(
        "form.ipynb",
        [
            "%load_ext jupyter_trainer",
            "lr = 0.1\nepochs = 3\nlayers = [64, 32]\noptimizer = 'sgd'\naugment = False",
            FORM_CELL,
        ],
    )
    page.open("form.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-form]")
    assert page.attr("[data-testid=jt-param-lr]", "value") == "0.1"
    assert page.attr("[data-testid=jt-param-layers]", "value") == "[64, 32]"
    page.shot("06-form")
    # a value of the wrong type is caught before anything starts
    page.page.fill("[data-testid=jt-param-epochs]", "4.5")
    assert page.page.locator("[data-testid=jt-launch]").is_disabled()
    assert "epochs must be a whole number" in page.text(".jt-form")
    page.shot("07-form-invalid")
    page.page.fill("[data-testid=jt-param-epochs]", "4")
    page.page.fill("[data-testid=jt-param-lr]", "0.025")
    page.page.fill("[data-testid=jt-param-layers]", "[128, 64, 10]")
    page.page.fill("[data-testid=jt-param-optimizer]", "adam")
    page.page.check("[data-testid=jt-param-augment]")
    page.page.fill("[data-testid=jt-form-procs]", "2")
    assert api.runs(home=home) == []
    page.page.click("[data-testid=jt-launch]")

    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.params == {
        "lr": 0.025,
        "epochs": 4,
        "layers": [128, 64, 10],
        "optimizer": "adam",
        "augment": True,
    }
    assert run.spec.launch.procs == 2 and run.name == "from-form"
    run.wait(timeout=90)
    page.page.wait_for_function(
        "document.querySelector('[data-testid=jt-status]').textContent === 'completed'"
    )
    page.page.wait_for_selector(
        "[data-testid=jt-log-line]:has-text('trained 0.025 4 [128, 64, 10] adam True')"
    )
    assert page.attr("[data-testid=jt-progress-fill]", "data-fraction") == "1"
    page.shot("08-form-became-monitor")
    assert leftover(run.id) == []


def test_a_failed_run_shows_the_failing_rank_and_traceback(browser, home):
    lab, page = browser
    # the Lab view's messages from the server, held while ``release`` says so (set up
    # before the page loads: Playwright routes the sockets of pages loaded after)
    held: list = []
    release = {"now": True}

    def hold(ws) -> None:
        server = ws.connect_to_server()
        server.on_message(
            lambda message: ws.send(message) if release["now"] else held.append((ws, message))
        )

    page.page.route_web_socket("**/jupyter-trainer/api/runs/*/view*", hold)
    lab.write_notebook(
        "fail.ipynb",
        [
            "%load_ext jupyter_trainer",
            """%%train --procs 2 --name diverges
import time
from jupyter_trainer import runtime as jt
def check(loss, step):
    if loss > 4:
        raise FloatingPointError(f"loss diverged to {loss:.2f} at step {step}")
for step in range(60):
    loss = 1.0 + (step * 0.1 if jt.rank == 1 else 0.0)
    jt.log(step=step, loss=loss)
    jt.progress(step + 1, 60)
    print(f"rank {jt.rank} step {step} loss {loss:.2f}", flush=True)
    check(loss, step)
    time.sleep(0.05)
""",
        ],
    )
    page.open("fail.ipynb")
    page.run_all()
    page.page.wait_for_function(
        "(document.querySelector('[data-testid=jt-status]') || {}).textContent === 'failed'"
    )
    banner = page.text("[data-testid=jt-banner]")
    assert "Rank 1 failed first: FloatingPointError: loss diverged to 4.10 at step 31" in banner
    assert 'raise FloatingPointError(f"loss diverged to' in banner
    assert "Cell In [" in banner and "cell.py" not in banner  # the cell's own line numbers
    frames = page.page.eval_on_selector("[data-testid=jt-frames]", "e => e.textContent")
    assert frames.startswith("Variables of each frame of rank 1"), frames
    assert ", in check\n    loss = 4.1" in frames and "\n    step = 31\n" in frames, frames
    page.page.wait_for_selector(".jp-OutputArea-output:has-text('RunFailed')")
    run = api.runs(home=home)[0]
    outputs = page.text("[data-testid=jt-outputs]")  # an ended run lists its outputs/
    assert outputs.startswith("Outputs") and str(run.outputs) in outputs and "(empty)" in outputs
    page.shot("09-failed")
    assert leftover(api.runs(home=home)[0].id) == []
    # The server-fed view of the finished run opens on the end of its log, the traceback,
    # even when it is filled while out of sight (a tab behind another, as JupyterLab
    # restores them): the server's first messages are held until the notebook is in front.
    pw = page.page
    release["now"] = False
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    body = f"#jt-run-{run.id} [data-testid=jt-log-body]"
    pw.wait_for_selector(body)
    pw.click(".lm-TabBar-tab:has-text('fail.ipynb')")
    pw.wait_for_selector(body, state="hidden")
    # (the page's events reach this thread while it waits on the page)
    wait_for(lambda: pw.wait_for_timeout(50) or held, 30, what="the view's first message")
    release["now"] = True
    for ws, message in held:
        ws.send(message)
    pw.wait_for_selector(
        f"{body} [data-testid=jt-log-line]:has-text('FloatingPointError')", state="attached"
    )
    pw.wait_for_timeout(500)  # filled while hidden
    pw.click(f".lm-TabBar-tab[data-id='jt-run-area-{run.id}']")
    pw.wait_for_selector(body)
    assert_log_at_end(pw, body)


def assert_log_at_end(pw, body: str) -> None:
    """The log ``body`` is scrolled to its newest line (and has more than it shows)."""
    at = pw.eval_on_selector(
        body,
        """b => ({top: b.scrollTop, height: b.clientHeight, total: b.scrollHeight,
        last: b.lastElementChild.getBoundingClientRect().bottom <= b.getBoundingClientRect().bottom + 1})""",
    )
    assert at["total"] > at["height"] > 0, at
    assert at["top"] + at["height"] >= at["total"] - 8 and at["last"], (
        f"the log is not at its end: {at}"
    )


def test_a_huge_run_stays_smooth_in_the_browser(browser, home):
    """1,000,000 points per metric and 100 MB of logs: the page draws downsampled series and
    a bounded log tail. How long the page is blocked while the history streams in is
    measured by ``bench/browser_huge_run.py``."""
    from support.huge_run import huge_run

    lab, page = browser
    run = huge_run(1_000_000, 100)
    lab.write_notebook("huge.ipynb", ["%load_ext jupyter_trainer", f"%train attach {run.id}"])
    page.open("huge.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    page.page.wait_for_function(
        "[...document.querySelectorAll('[data-testid=jt-chart]')].map(c => c.dataset.count).join() === '2000000,2000000'",
        timeout=180_000,
    )
    wait_for(
        lambda: (
            "rank 1 done"
            in " ".join(page.page.locator("[data-testid=jt-log-line]").all_inner_texts()[-2:])
        ),
        30,
        what="the log tail",
    )
    drawn = page.page.eval_on_selector_all(
        "[data-testid=jt-chart]", "cs => cs.map(c => +c.dataset.points)"
    )
    assert all(0 < n <= 2000 for n in drawn), drawn
    assert page.page.locator("[data-testid=jt-log-line]").count() <= 2000
    assert "1,000,000 points per rank · 2 ranks" in page.text(".jt-chart-foot")
    # rank 1's spike (1.02) is the maximum, not rank 0's (1.01)
    assert (
        " ".join(page.text(".jt-chart-card[data-metric=loss] .jt-chart-stats").split())
        == "ranks 0, 1 · last 1e-6 · min 1e-6 (rank 0) · max 1.02 (rank 1)"
    )
    page.shot("10-huge-run")


def test_a_reloaded_page_shows_the_live_widget_again(browser, home, tmp_path):
    lab, page = browser
    stop = tmp_path / "stop"  # the run goes on until the reloaded page has been checked
    lab.write_notebook(
        "reload.ipynb",
        [
            "%load_ext jupyter_trainer",
            f"stop_file = {str(stop)!r}",
            """%%train --no-wait --procs 2 --name reload
import os, time
from jupyter_trainer import runtime as jt
total = 3000
for step in range(total):
    jt.log(step=step, loss=1.0 / (step + 1))
    jt.progress(step + 1, total)
    print("reload step", step, flush=True)
    if os.path.exists(stop_file):
        break
    time.sleep(0.06)
jt.progress(total, total)
""",
        ],
    )
    page.open("reload.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-log-line]")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    page.page.keyboard.press("Control+s")
    page.page.wait_for_selector(".jp-mod-dirty", state="detached")
    page.page.reload()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    assert page.text("[data-testid=jt-run-id]") == run.id and not run.done
    fraction = lambda: float(page.attr("[data-testid=jt-progress-fill]", "data-fraction") or 0)
    before = fraction()
    wait_for(lambda: fraction() > before, 30, what="progress after the reload")
    wait_for(
        lambda: (
            page.page.locator("[data-testid=jt-log-line]:has-text('reload step 0')").count() == 2
        ),
        30,
        what="the log history after the reload",
    )
    page.shot("11-after-reload")
    stop.touch()
    run.wait(timeout=60)
    page.page.wait_for_function(
        "document.querySelector('[data-testid=jt-status]').textContent === 'completed'"
    )
    assert page.attr("[data-testid=jt-progress-fill]", "data-fraction") == "1"
    assert leftover(run.id) == []


def test_notebook7_shows_the_same_live_monitor(notebook7, home):
    server, page = notebook7
    server.write_notebook(
        "nb7.ipynb",
        [
            "%load_ext jupyter_trainer",
            "lr = 0.1\nepochs = 50\nsteps_per_epoch = 20",
            LIVE_CELL.replace("browser-live", "notebook7"),
        ],
    )
    page.open("nb7.ipynb")
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-monitor] [data-testid=jt-run-id]:not(:empty)")
    run = api.get_run(page.text("[data-testid=jt-run-id]"))
    assert run.spec.name == "notebook7"
    check_live_view(page, "[data-testid=jt-monitor]", run, shots="12-notebook7-")
