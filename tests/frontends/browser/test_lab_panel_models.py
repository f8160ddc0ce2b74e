"""The model registry in the Training Runs panel, in a real JupyterLab and headless Chromium.

Each registered model is a row (name, latest version, number of versions) that expands to
its versions (number, time, size, tags, the run it came from), kept up to date by the
panel's polling; a click on a version's run opens that run's view as a click on a run row
does, even when a poll falls between the press and the release.
"""

from __future__ import annotations

from support.browser_page import browser  # noqa: F401 (the fixture)
from support.browser_views import open_panel

from jupyter_trainer.api import runs as api
from jupyter_trainer.store import Store

TRAIN = """
from jupyter_trainer import runtime as jt
for step in range(3):
    jt.log(step=step, loss=lr / (step + 1))
(jt.outputs_dir / "model.pt").write_bytes(b"w" * size)
"""
POLL_S = 1.5  # the panel's polling interval


def train(name: str, lr: float, size: int) -> api.Run:
    return api.submit(
        TRAIN,
        launcher="python",
        name=name,
        params={"lr": lr},
        namespace={"lr": lr, "size": size},
        wait=True,
    )


def versions_shown(pw, row: str) -> list[dict]:
    return pw.eval_on_selector_all(
        f"{row} [data-testid=jt-models-version]",
        """vs => vs.map(v => ({
        version: +v.dataset.version,
        run: v.querySelector('[data-testid=jt-models-run]').dataset.run,
        link: v.querySelector('[data-testid=jt-models-run]').textContent,
        enabled: !v.querySelector('[data-testid=jt-models-run]').disabled,
        size: v.querySelector('[data-testid=jt-models-size]').textContent,
        tags: v.querySelector('[data-testid=jt-models-tags]').textContent,
        created: v.querySelector('[data-testid=jt-models-created]').textContent}))""",
    )


def slow_click(pw, selector: str, held_s: float) -> None:
    """Press on ``selector``, hold for ``held_s`` (polls of the panel go by), release."""
    box = pw.locator(selector).bounding_box()
    pw.mouse.move(box["x"] + min(box["width"] / 2, 30), box["y"] + box["height"] / 2)
    pw.mouse.down()
    pw.wait_for_timeout(held_s * 1000)
    pw.mouse.up()


def test_models_expand_to_versions_whose_runs_open(browser, home):
    lab, page = browser
    first, second = train("first", 0.5, 300), train("second", 0.25, 2048)
    first.register_model("digits", "model.pt", tags={"stage": "dev"})
    first.register_model("other", "model.pt")
    pw = page.page
    open_panel(page, lab)
    row = "[data-testid=jt-models-row][data-model='digits']"
    pw.wait_for_selector(row)
    assert pw.eval_on_selector_all(
        "[data-testid=jt-models-row]", "rs => rs.map(r => r.dataset.model)"
    ) == ["digits", "other"]
    assert pw.text_content(f"{row} [data-testid=jt-models-latest]") == "v1"
    assert pw.text_content(f"{row} [data-testid=jt-models-count]") == "1 version"
    assert "300 bytes" in pw.text_content(f"{row} [data-testid=jt-models-meta]")
    assert pw.get_attribute(f"{row} [data-testid=jt-models-toggle]", "aria-expanded") == "false"
    assert pw.text_content("[data-testid=jt-models-total]") == "2"

    # a version registered while the panel is open appears at its next poll, in the same row
    kept = pw.query_selector(row)
    second.register_model("digits", "model.pt", tags={"stage": "prod"})
    pw.wait_for_selector(f"{row}[data-latest='2']")
    assert pw.text_content(f"{row} [data-testid=jt-models-count]") == "2 versions"
    assert "2.0 KiB" in pw.text_content(f"{row} [data-testid=jt-models-meta]")
    assert "stage=prod" in pw.text_content(f"{row} [data-testid=jt-models-meta]")
    assert kept.evaluate("el => el.isConnected")

    pw.click(f"{row} [data-testid=jt-models-toggle]")
    assert pw.get_attribute(row, "aria-expanded") == "true"
    pw.wait_for_selector(f"{row} [data-testid=jt-models-version] >> nth=1")
    shown = versions_shown(pw, row)
    assert [
        (v["version"], v["run"], v["link"], v["enabled"], v["size"], v["tags"]) for v in shown
    ] == [
        (2, second.id, second.id, True, "2.0 KiB", "stage=prod"),
        (1, first.id, first.id, True, "300 bytes", "stage=dev"),
    ]
    assert all(v["created"] for v in shown)
    page.shot("panel-models", "#jupyter-trainer-runs")

    # the version rows stay the same nodes across polls, so a click held over a poll lands
    link = f"{row} [data-testid=jt-models-version][data-version='1'] [data-testid=jt-models-run]"
    node = pw.query_selector(link)
    pw.wait_for_timeout(POLL_S * 1000 * 2)
    assert node.evaluate("el => el.isConnected")
    slow_click(pw, link, POLL_S * 1.5)
    view = f"#jt-run-{first.id} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('completed')")
    assert page.text(f"{view} [data-testid=jt-run-id]") == first.id

    # the same view as the run's row opens: one tab per run
    pw.click(f"[data-testid=jt-runs-row][data-run='{first.id}']")
    pw.click(f"{row} [data-testid=jt-models-version][data-version='2'] [data-testid=jt-models-run]")
    pw.wait_for_selector(
        f"#jt-run-{second.id} [data-testid=jt-monitor] [data-testid=jt-status]:text-is('completed')"
    )
    pw.click(link)
    pw.wait_for_selector(f"#jt-run-{first.id}", state="visible")
    assert pw.locator(f".lm-TabBar-tab[data-id='jt-run-area-{first.id}']").count() == 1

    # a version outlives its run: the link says the run is gone and opens nothing
    Store(home).delete(first.id)
    pw.wait_for_selector(f"{link}:disabled")
    assert "no longer in the store" in pw.get_attribute(link, "title")
    # the toggle folds the versions away
    pw.click(f"{row} [data-testid=jt-models-toggle]")
    pw.wait_for_selector(f"{row} [data-testid=jt-models-versions]", state="hidden")
    assert pw.get_attribute(row, "aria-expanded") == "false"


def test_no_models_yet(browser, home):
    lab, page = browser
    pw = page.page
    open_panel(page, lab)
    message = "[data-testid=jt-models-message]"
    pw.wait_for_selector(f"{message}:has-text('No models yet')")
    assert pw.locator("[data-testid=jt-models-row]").count() == 0
