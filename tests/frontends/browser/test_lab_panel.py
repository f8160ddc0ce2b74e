"""The Training Runs side panel and the run view in a real JupyterLab, in headless Chromium.

A run started from the CLI appears in the panel with its badge, id, start time and
progress; its main-area view is the notebook widget's run view (``check_live_view``, the
same assertions as the widget's test), fed by the server's view socket; "Attach in
notebook" inserts and runs ``%train attach`` in the notebook used last; a view whose
connection is gone says so and stops its clock.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from conftest import REPO, leftover, wait_for
from support.browser_page import TIMEOUT_MS, browser  # noqa: F401 (the fixture)
from support.browser_views import LIVE_CELL, LIVE_PARAMS, check_live_view, open_panel
from support.jt_cli import CLI
from support.workloads import INTERLEAVED

from jupyter_trainer.api import runs as api
from jupyter_trainer.store.owners import Identity

LIVE_SCRIPT = LIVE_CELL.split("\n", 1)[1]


def fraction(page, run_id: str) -> float:
    value = page.locator(
        f"[data-testid=jt-runs-row][data-run='{run_id}'] [data-testid=jt-runs-progress]"
    ).get_attribute("data-fraction")
    return float(value or 0)


def submit_cli(tmp_path, name: str, *extra: str) -> str:
    script = tmp_path / f"{name}.py"
    script.write_text("lr, epochs, steps_per_epoch = 0.1, 50, 20\n" + LIVE_SCRIPT)
    params = [a for k, v in LIVE_PARAMS.items() for a in ("--param", f"{k}={v}")]
    out = subprocess.run(
        [
            *CLI,
            "submit",
            str(script),
            "--procs",
            "2",
            "--name",
            name,
            *params,
            *extra,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()[0]


def background(pw, selector: str) -> str:
    return pw.eval_on_selector(selector, "el => getComputedStyle(el).backgroundColor")


def test_panel_and_run_view_are_the_widgets_view(browser, home, tmp_path):
    lab, page = browser
    run_id = submit_cli(tmp_path, "from-cli")
    twin_id = submit_cli(tmp_path, "from-cli")  # the same name: told apart by id and time
    run, twin = api.get_run(run_id), api.get_run(twin_id)
    wait_for(lambda: run.store.read_events(run_id, 0)[0], timeout=60, what="the first event")
    twin.cancel()

    pw = page.page
    open_panel(page, lab)
    row = f"[data-testid=jt-runs-row][data-run='{run_id}']"
    twin_row = f"[data-testid=jt-runs-row][data-run='{twin_id}']"
    pw.wait_for_selector(row)
    pw.wait_for_selector(f"{twin_row} [data-testid=jt-runs-status-badge]:text-is('canceled')")
    assert "from-cli" in pw.inner_text(row) and "local" in pw.inner_text(row)
    ids = {pw.inner_text(f"{r} [data-testid=jt-runs-id]") for r in (row, twin_row)}
    assert len(ids) == 2 and all(run_id.endswith(i) or twin_id.endswith(i) for i in ids), ids
    assert "\nstarted " in (pw.get_attribute(row, "title") or "")  # the id says it in short
    # badges are styled by status, and so are the progress bars
    running_badge = background(pw, f"{row} [data-testid=jt-runs-status-badge]")
    canceled_badge = background(pw, f"{twin_row} [data-testid=jt-runs-status-badge]")
    assert running_badge not in ("rgba(0, 0, 0, 0)", canceled_badge), (
        running_badge,
        canceled_badge,
    )
    first = wait_for(lambda: fraction(pw, run_id), timeout=30, what="progress in the panel")
    wait_for(lambda: fraction(pw, run_id) > first, timeout=30, what="progress to advance")
    running_bar = background(pw, f"{row} [data-testid=jt-runs-progress] > div")
    page.shot("panel-live", "#jupyter-trainer-runs")

    sockets = []
    pw.on("websocket", lambda ws: sockets.append(ws) if "/view" in ws.url else None)
    pw.click(row)
    view = f"#jt-run-{run_id} [data-testid=jt-monitor]"
    check_live_view(page, view, run, shots="lab-view-", panel_row=row)
    assert leftover(run_id) == []
    pw.wait_for_selector(f"{row} [data-testid=jt-runs-status-badge]:text-is('canceled')")
    canceled_bar = background(pw, f"{row} [data-testid=jt-runs-progress] > div")
    assert canceled_bar != running_bar, "a canceled run's bar keeps the running colour"
    page.shot("panel-canceled", "#jupyter-trainer-runs")
    shot = page.shots / "lab-run-view.png"
    pw.screenshot(path=str(shot))

    # closing the view closes its socket
    pw.click(f".lm-TabBar-tab[data-id='jt-run-area-{run_id}'] .lm-TabBar-tabCloseIcon")
    pw.wait_for_selector(f"#jt-run-{run_id}", state="detached")
    wait_for(  # Playwright delivers the close event only while this thread waits on the page
        lambda: pw.wait_for_timeout(50) or (sockets and all(ws.is_closed() for ws in sockets)),
        timeout=10,
        what="the closed view's socket to be closed",
    )
    if os.environ.get("JT_UPDATE_SCREENSHOTS"):  # refresh the README's picture on purpose only
        shutil.copy(shot, REPO / "docs" / "screenshots" / "lab-run-view.png")


FILLER = 24  # cells of 12 lines each: the end of the notebook is far below the fold


def monitor_in_view(pw, cell: str) -> bool:
    """Whether the run view in ``cell``'s output is shown: wholly inside the notebook's
    visible area, or, taller than that area (its System section and charts), from its top,
    which is in the area's upper half."""
    return pw.eval_on_selector(
        cell,
        """c => {
        const view = c.closest('.jp-WindowedPanel-outer').getBoundingClientRect();
        const box = c.querySelector('[data-testid=jt-monitor]').getBoundingClientRect();
        const whole = box.bottom <= view.bottom + 1;
        const fromTop = box.height > view.height && box.top <= view.top + view.height / 2;
        return box.top >= view.top - 1 && (whole || fromTop); }""",
    )


def test_attach_in_notebook_inserts_runs_and_shows_the_cell(browser, home, tmp_path):
    lab, page = browser
    run = api.submit(INTERLEAVED, procs=2, name="to-attach", wait=True)
    filler = "\n".join(f"# line {i}" for i in range(12))
    lab.write_notebook("attach.ipynb", ["%load_ext jupyter_trainer", *[filler] * FILLER])
    open_panel(page, lab, lab.notebook_url("attach.ipynb"))
    pw = page.page
    page.wait_idle()
    pw.set_viewport_size({"width": 1280, "height": 800})  # a laptop's screen
    # the last cell used, then the notebook scrolled back to its top: the new cell goes
    # below the last one, out of sight, and Attach shows it, with the run it shows
    outer = ".jp-NotebookPanel .jp-WindowedPanel-outer"
    pw.eval_on_selector(outer, "el => { el.scrollTop = el.scrollHeight; }")
    last = f".jp-Notebook .jp-Cell:nth-child({FILLER + 1}) .jp-InputPrompt"
    pw.click(last)
    pw.wait_for_selector(f".jp-Notebook .jp-Cell.jp-mod-active:nth-child({FILLER + 1})")
    pw.eval_on_selector(outer, "el => { el.scrollTop = 0; }")
    pw.wait_for_timeout(300)
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}'] [data-testid=jt-runs-attach]")
    new = f".jp-Notebook .jp-Cell >> nth={FILLER + 1}"
    cell = pw.locator(new)
    cell.wait_for()
    assert f'get_run("{run.id}").monitor()' in cell.locator(".jp-InputArea-editor").inner_text()
    pw.wait_for_selector(f"{new} >> [data-testid=jt-run-id]:text-is('{run.id}')")
    pw.wait_for_selector(f"{new} >> [data-testid=jt-status]:text-is('completed')")
    wait_for(
        lambda: monitor_in_view(pw, f".jp-Notebook .jp-Cell:nth-child({FILLER + 2})"),
        timeout=10,
        what="the inserted cell's run view to be scrolled into view",
    )
    # the log history of both ranks, in the order the lines were written
    lines = lambda: [
        t.split("] ", 1)[-1]
        for t in pw.locator(f"{new} >> [data-testid=jt-log-line]").all_inner_texts()
        if "line" in t
    ]
    wait_for(lambda: len(lines()) == 8, timeout=20, what="the attached run's log")
    assert lines() == [f"rank {i % 2} line {i // 2}" for i in range(8)], lines()
    assert not pw.locator(".jp-Dialog").count()
    page.shot("attached-in-view", ".jp-Notebook")


def test_a_view_whose_connection_is_gone_says_so(browser, home, tmp_path):
    lab, page = browser
    run_id = submit_cli(tmp_path, "cut-off")
    run = api.get_run(run_id)
    pw = page.page
    sockets = []

    def cut_later(ws) -> None:
        server = ws.connect_to_server()
        sockets.append((ws, server))

    pw.route_web_socket("**/jupyter-trainer/api/runs/*/view*", cut_later)
    open_panel(page, lab)
    pw.click(f"[data-testid=jt-runs-row][data-run='{run_id}']")
    view = f"#jt-run-{run_id} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('running')")
    sockets[0][0].close()
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('running?')")
    assert "connection to the Jupyter server closed" in pw.inner_text(
        f"{view} [data-testid=jt-notice]"
    )
    assert pw.is_disabled(f"{view} [data-testid=jt-cancel]")
    frozen = pw.inner_text(f"{view} [data-testid=jt-elapsed]")
    pw.wait_for_timeout(2500)
    assert pw.inner_text(f"{view} [data-testid=jt-elapsed]") == frozen
    run.cancel()
    assert leftover(run_id) == []


def test_everyone_mine_and_a_colleagues_run_read_only(browser, home, tmp_path):
    """The panel lists everyone's runs with their owner and, switched to "mine", one's own;
    a colleague's running run opens read-only: Cancel is disabled and the view says why."""
    import json
    import time

    from support.made_runs import SOMEONE, finish, new_run

    from jupyter_trainer.store import Store

    lab, page = browser
    store = Store(home)
    mine = new_run(store, "my-run")
    finish(store, mine)
    theirs = new_run(store, "their-run", owner=SOMEONE)
    state = json.loads(store.paths(theirs).state.read_text())
    elsewhere = {"host": "a-login-node", "pid": 1, "start_ticks": 1}  # runs on another host
    stages = {"running": {"start": time.time()}}
    store.write_state(
        theirs, {**state, "status": "running", "supervisor": elsewhere, "stages": stages}
    )

    pw = page.page
    open_panel(page, lab)
    row = "[data-testid=jt-runs-row][data-run='{}']"
    pw.wait_for_selector(row.format(theirs))
    pw.wait_for_selector(row.format(mine))
    owner = "[data-testid=jt-runs-row-owner]"
    assert pw.inner_text(f"{row.format(theirs)} {owner}") == "someone-else"
    assert pw.inner_text(f"{row.format(mine)} {owner}") == Identity.current().user
    pw.select_option("[data-testid=jt-runs-owner]", "mine")
    pw.wait_for_selector(row.format(theirs), state="detached")
    assert pw.locator("[data-testid=jt-runs-row]").count() == 1
    pw.select_option("[data-testid=jt-runs-owner]", "")
    pw.wait_for_selector(row.format(theirs))

    pw.click(row.format(theirs))
    view = f"#jt-run-{theirs} [data-testid=jt-monitor]"
    cancel = f"{view} [data-testid=jt-cancel]"
    pw.wait_for_selector(f"{cancel}:disabled")
    title = pw.get_attribute(cancel, "title") or ""
    assert "read-only: this run belongs to someone-else" in title, title
    assert "only its owner" in pw.inner_text(f"{view} [data-testid=jt-notice]")
    assert "by someone-else" in pw.inner_text(f"{view} [data-testid=jt-meta]")
    assert store.cancel_request(theirs) is None
    finish(store, theirs, "canceled")  # as its supervisor on the other host would record
