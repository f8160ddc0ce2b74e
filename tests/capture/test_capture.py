"""Free-name analysis and resolving a cell against a notebook namespace."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from collections import OrderedDict
from textwrap import dedent

import pytest

from jupyter_trainer.capture import DEFAULT_MAX_CARRY_BYTES, CellContext, free_names, resolve_cell
from jupyter_trainer.core.errors import CaptureError, SpecError

HOSTILE = '\'; rm -rf ~ "$(reboot)" `id` \\n\n{x}'


def notebook(*cells: str, **values) -> tuple[dict, list[str]]:
    """A namespace built the way a kernel builds it: each cell executed in order as
    ``__main__`` under its own file name, which inspect cannot read back."""
    ns: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    history = [""]
    for n, src in enumerate(cells, start=1):
        src = dedent(src)
        exec(compile(src, f"<cell-{n}>", "exec"), ns)
        history.append(src)
    ns.update(values)
    return ns, history


# -- free names -----------------------------------------------------------------------------


def test_free_names_shadowing_and_first_seen_order():
    src = "x = 1\nprint(x, y)\nz = y + w\nprint(z)"
    assert free_names(src) == ["print", "y", "w"]


def test_read_before_rebinding_counts_as_read():
    assert free_names("lr = lr * 2\nepochs += 1\nbatch = 3\nbatch") == ["lr", "epochs"]


def test_nested_function_params_and_locals_are_not_free():
    src = dedent("""
        def train(model, steps=default_steps):
            total = 0
            def inner(k):
                nonlocal total
                total += k * scale
                return helper(k)
            for i in range(steps):
                inner(i)
            return total
        def helper(v):
            return v
        train(net)
    """)
    assert free_names(src) == ["default_steps", "scale", "range", "net"]


def test_function_body_sees_names_bound_later_in_the_cell():
    # a deferred read of a name the cell binds anywhere is not free
    assert free_names("def f():\n    return lr\nlr = 1\nf()") == []


def test_comprehension_variables_are_local_but_iterables_are_read():
    src = "out = [x * k for x in data if x > lo]\nd = {a: b for a, b in pairs}\nout, d, x"
    assert free_names(src) == ["data", "lo", "k", "pairs", "x"]  # evaluation order


def test_decorators_defaults_and_class_bases_are_read():
    src = dedent("""
        @register(name=tag)
        class Net(Base, metaclass=Meta):
            width = size
            depth = width + 1
            def forward(self, x):
                return x * width
        Net()
    """)
    assert free_names(src) == ["register", "tag", "Base", "Meta", "size", "width"]


def test_bindings_by_import_with_except_walrus_and_global():
    src = dedent("""
        import os.path
        from json import dumps as to_json
        with open(p) as fh:
            fh.read()
        try:
            pass
        except KeyError as err:
            err
        if (n := count) > 1:
            n
        def setup():
            global model
            model = build()
        setup()
        model, os, to_json
    """)
    assert free_names(src) == ["open", "p", "KeyError", "count", "build"]


def test_lambda_body_and_defaults():
    assert free_names("f = lambda v, q=qq: v + w\nf(1)") == ["qq", "w"]


def test_syntax_error_names_the_line():
    with pytest.raises(CaptureError, match="line 2"):
        free_names("x = 1\nfor\n")


# -- resolving against a namespace ----------------------------------------------------------


def test_modules_become_import_lines():
    import json as js
    import os.path as osp
    import xml.etree.ElementTree as ET

    ns = {"js": js, "os": os, "ET": ET, "osp": osp}
    ctx = resolve_cell("js.dumps(os.sep, ET, osp)", ns)
    assert ctx.imports == (
        "import json as js",
        "import os",
        "import xml.etree.ElementTree as ET",
        f"import {osp.__name__} as osp",
    )
    assert ctx.carried_names == ("ET", "js", "os", "osp")
    assert ctx.params == {} and ctx.carried == {} and ctx.definitions == ()


def test_library_objects_become_from_imports():
    from json import dumps as to_json

    ns = {"dedent": dedent, "to_json": to_json, "OrderedDict": OrderedDict}
    ctx = resolve_cell("dedent(to_json(OrderedDict()))", ns)
    assert ctx.imports == (
        "from textwrap import dedent",
        "from json import dumps as to_json",
        "from collections import OrderedDict",
    )


def test_notebook_helper_from_history_with_transitive_needs():
    ns, history = notebook(
        "import math\nfactor = 0.5\n",
        """
        def scale(v):
            return math.sqrt(v) * factor
        """,
        """
        import functools

        @functools.lru_cache(maxsize=None)
        def train_step(v):
            return scale(v) + offset
        """,
        offset=3,
    )
    ctx = resolve_cell("print(train_step(4.0))", ns, history=history)
    assert [name for name, _ in ctx.definitions] == ["scale", "train_step"]  # deps first
    assert ctx.definitions[1][1].startswith("@functools.lru_cache(maxsize=None)\ndef train_step")
    assert ctx.params == {"factor": 0.5, "offset": 3}
    assert set(ctx.imports) == {"import math", "import functools"}
    assert ctx.carried_names == ("factor", "functools", "math", "offset", "scale", "train_step")
    # the generated pieces really recreate the helper
    fresh = {"__name__": "fresh"}
    exec("\n".join(ctx.imports), fresh)
    fresh.update(ctx.params)
    for _, src in ctx.definitions:
        exec(src, fresh)
    assert fresh["train_step"](4.0) == ns["train_step"](4.0)


def test_history_takes_the_last_definition():
    ns, history = notebook("def f():\n    return 1\n", "def f():\n    return 2\n")
    ctx = resolve_cell("f()", ns, history=history)
    assert ctx.definitions == (("f", "def f():\n    return 2\n"),)


def test_history_with_raw_magics_still_parses():
    ns, _ = notebook("def g():\n    return 7\n")
    history = ["%matplotlib inline\n!ls\ndef g():\n    return 7\n"]
    assert resolve_cell("g()", ns, history=history).definitions[0][0] == "g"


def test_class_defined_in_notebook_with_notebook_base():
    ns, history = notebook(
        "class Base:\n    unit = 2\n",
        "class Net(Base):\n    def forward(self, x):\n        return x * self.unit * width\n",
        width=4,
    )
    ctx = resolve_cell("Net().forward(1)", ns, history=history)
    assert [name for name, _ in ctx.definitions] == ["Base", "Net"]
    assert ctx.params == {"width": 4}


def test_lambda_and_notebook_instance_are_carried_and_load_without_the_notebook(monkeypatch):
    ns, history = notebook(
        "class Point:\n    def __init__(self, x):\n        self.x = x\n",
        "square = lambda v: v * v\norigin = Point(5)\nhidden = (64, 32)\n",
    )
    # as in a kernel, where __main__ is the notebook: plain pickle would store Point by reference
    monkeypatch.setattr(sys.modules["__main__"], "Point", ns["Point"], raising=False)
    ctx = resolve_cell("square(origin.x), hidden", ns, history=history)
    assert set(ctx.carried) == {"square", "origin", "hidden"}
    assert "hidden" not in ctx.params
    # load in a fresh interpreter, whose __main__ knows nothing of the notebook
    script = textwrap.dedent("""
        import pickle, sys
        blobs = pickle.loads(sys.stdin.buffer.read())
        v = {k: pickle.loads(b) for k, b in blobs.items()}
        print(v["square"](3), v["origin"].x, type(v["hidden"]).__name__, v["hidden"])
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(ctx.carried),
        capture_output=True,
        check=True,
    )
    assert out.stdout.decode().split() == ["9", "5", "tuple", "(64,", "32)"]


def test_uncarriable_objects_reported_together(tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_TRAINER_MAX_CARRY_BYTES", "1000")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    with open(data) as fh:
        ns = {"fh": fh, "lock": threading.Lock(), "blob": b"x" * 2000, "ok": (1, 2)}
        with pytest.raises(CaptureError) as info:
            resolve_cell("fh.read(); lock.acquire(); len(blob), ok", ns)
    msg = str(info.value)
    assert "3 notebook objects" in msg
    assert f"fh (read by the cell): an open file {str(data)!r}" in msg
    assert "open or load it inside the cell" in msg
    assert "lock (read by the cell): a threading.Lock cannot be pickled" in msg
    assert "blob (read by the cell): bytes value of 2.0 KiB, over the 1000 bytes carry limit" in msg
    assert "--source folder" in msg
    assert "ok (read" not in msg


def test_carry_limit_default_and_explicit(monkeypatch):
    monkeypatch.delenv("JUPYTER_TRAINER_MAX_CARRY_BYTES", raising=False)
    ns = {"blob": b"x" * (DEFAULT_MAX_CARRY_BYTES + 1)}
    with pytest.raises(CaptureError, match="8.0 MiB carry limit"):
        resolve_cell("blob", ns)
    assert resolve_cell("blob", ns, max_carry_bytes=DEFAULT_MAX_CARRY_BYTES * 2).carried


def test_helper_problem_names_the_helper():
    ns, history = notebook("def load():\n    return source.read()\n")
    ns["source"] = io.StringIO("x")
    with pytest.raises(CaptureError, match="source \\(read by the notebook definition 'load'\\)"):
        resolve_cell("load()", ns, history=history)


def test_generator_cannot_be_carried():
    with pytest.raises(CaptureError, match="generator cannot be pickled"):
        resolve_cell("next(gen)", {"gen": (i for i in range(3))})


def test_overrides_beat_notebook_values_and_are_always_included():
    ns = {"lr": 0.1, "epochs": 10, "model": threading.Lock()}
    ctx = resolve_cell(
        "model; lr * epochs", ns, overrides={"lr": 0.5, "model": "resnet", "extra": [1]}
    )
    assert ctx.params == {"epochs": 10, "lr": 0.5, "model": "resnet", "extra": [1]}
    assert ctx.carried == {}
    assert ctx.carried_names == ("epochs",)


def test_override_must_be_json():
    with pytest.raises(SpecError, match="not a JSON value"):
        resolve_cell("x", {}, overrides={"x": (1, 2)})


def test_hostile_strings_round_trip_exactly():
    ns = {"cmd": HOSTILE, "opts": {"a'b": [HOSTILE, None, True]}}
    ctx = resolve_cell("cmd, opts, tag", ns, overrides={"tag": HOSTILE + "!"})
    assert ctx.params == {
        "cmd": HOSTILE,
        "opts": {"a'b": [HOSTILE, None, True]},
        "tag": HOSTILE + "!",
    }
    assert json.loads(json.dumps(ctx.params)) == ctx.params


def test_large_json_is_carried_not_a_parameter():
    ns = {"table": list(range(50_000)), "small": [1, 2]}
    ctx = resolve_cell("table, small", ns)
    assert ctx.params == {"small": [1, 2]}
    assert pickle.loads(ctx.carried["table"]) == ns["table"]


def test_ipython_internals_dunders_and_absent_names_are_ignored():
    ns = {
        "In": [""],
        "Out": {},
        "_": 1,
        "_3": 2,
        "_i3": "x",
        "_oh": {},
        "__file__": "x",
        "get_ipython": print,
        "print": print,
    }
    ctx = resolve_cell("print(In, Out, _, _3, _i3, _oh, __file__, len, missing)", ns)
    assert ctx.carried_names == ("print",)  # a shadowed builtin is the user's
    assert ctx.imports == ("from builtins import print",)


def test_magics_in_the_cell_are_rejected_with_the_line():
    cell = "x = 1\nget_ipython().system('nvidia-smi')\n"
    with pytest.raises(
        CaptureError,
        match=r"line 2: get_ipython\(\)\.system\('nvidia-smi'\).*"
        r"shell commands don't run inside training processes",
    ):
        resolve_cell(cell, {"get_ipython": print})


def test_context_is_frozen():
    ctx = resolve_cell("x", {"x": 1})
    assert isinstance(ctx, CellContext)
    with pytest.raises(AttributeError):
        ctx.params = {}  # type: ignore[misc]


def test_capture_imports_no_jupyter_torch_or_numpy():
    script = (
        "import sys, jupyter_trainer.capture as c\n"
        "c.resolve_cell('x', {'x': (1,)})\n"
        "bad = {'IPython', 'ipywidgets', 'torch', 'numpy', 'jupyter_server', 'tornado'}\n"
        "print(sorted(bad & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
