"""Editor languages of the magics in a real JupyterLab, in headless Chromium: the body of an
``%%environment`` cell is edited as YAML, a ``%%train`` cell as Python, and a cell that stops
(or starts) being ``%%environment`` follows its first line.

CodeMirror 6 names the active language in ``data-language`` on ``.cm-content``; the test
also checks that a YAML key and a Python keyword are drawn in JupyterLab's colours for them.
"""

from __future__ import annotations

from conftest import wait_for
from support.browser_page import browser  # noqa: F401 (the fixture)

ENV_CELL = '%%environment digits\npython: "3.11"\ninherit: true\npip:\n  - scikit-learn==1.7.*\n'
TRAIN_CELL = "%%train --procs 2 --name digits\nimport torch\nfor epoch in range(3):\n    pass\n"
TYPED_ENV_CELL = '%%environment typed\nenv:\n  OMP_NUM_THREADS: "1"\n'

CELL = ".jp-Notebook .jp-Cell"


def languages(pw) -> list[str | None]:
    return pw.eval_on_selector_all(
        f"{CELL} .cm-content", "cs => cs.map(c => c.dataset.language || null)"
    )


def token_colour(pw, index: int, text: str) -> str | None:
    """The computed colour of the first highlighted token spelled ``text`` in cell ``index``."""
    return pw.evaluate(
        """([sel, index, text]) => {
        const cell = document.querySelectorAll(sel)[index];
        const span = [...cell.querySelectorAll('.cm-content .cm-line span')].find(s => s.textContent === text);
        return span ? getComputedStyle(span).color : null; }""",
        [CELL, index, text],
    )


def css_colour(pw, variable: str) -> str:
    """``var(--name)`` resolved to the ``rgb(...)`` form that getComputedStyle reports."""
    return pw.evaluate(
        """name => { const el = document.createElement('span');
        el.style.color = `var(${name})`; document.body.append(el);
        const colour = getComputedStyle(el).color; el.remove(); return colour; }""",
        variable,
    )


def wait_languages(pw, expected: list[str], what: str) -> None:
    wait_for(
        lambda: languages(pw) == expected, 20, what=f"{what}: {expected}, last seen {languages(pw)}"
    )


def replace_first_line(pw, index: int, text: str) -> None:
    pw.locator(f"{CELL} .cm-content").nth(index).click()
    pw.keyboard.press("Control+Home")
    pw.keyboard.press("Shift+End")
    pw.keyboard.insert_text(text)


def test_environment_cells_are_yaml_and_train_cells_python(browser, home):
    lab, page = browser
    lab.write_notebook("highlight.ipynb", [ENV_CELL, TRAIN_CELL])
    page.open("highlight.ipynb")
    pw = page.page
    # The kernel's language_info arrives once it is connected, and the notebook then resets
    # every code cell's language: what is checked below is what remains after that.
    pw.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')")
    page.dismiss_popups()
    wait_languages(pw, ["yaml", "python"], "the cells' languages once the kernel is connected")

    assert token_colour(pw, 0, "python") == css_colour(
        pw, "--jp-mirror-editor-atom-color"
    )  # a YAML key
    assert token_colour(pw, 1, "import") == css_colour(pw, "--jp-mirror-editor-keyword-color")
    page.shot("highlight-loaded", ".jp-Notebook")

    # a cell added and typed in the browser
    pw.locator(f"{CELL} .cm-content").nth(1).click()
    pw.keyboard.press("Escape")
    pw.keyboard.press("b")
    pw.keyboard.press("Enter")
    pw.keyboard.insert_text(TYPED_ENV_CELL)
    wait_languages(pw, ["yaml", "python", "yaml"], "a typed %%environment cell")
    assert token_colour(pw, 2, "env") == css_colour(pw, "--jp-mirror-editor-atom-color")

    # the first line decides, both ways
    replace_first_line(pw, 0, "%%train --procs 1")
    wait_languages(pw, ["python", "python", "yaml"], "a cell that is no longer %%environment")
    replace_first_line(pw, 1, "%%environment again")
    wait_languages(pw, ["python", "yaml", "yaml"], "a %%train cell turned into %%environment")
    page.shot("highlight-edited", ".jp-Notebook")

    # a restarted kernel sends its language_info again; nothing changes
    pw.click(".lm-MenuBar-item:has-text('Kernel')")
    pw.click(".lm-Menu-item[data-command='kernelmenu:restart']")
    pw.click(".jp-Dialog-button.jp-mod-accept")
    pw.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')")
    wait_languages(pw, ["python", "yaml", "yaml"], "the languages after a kernel restart")
