"""A sweep's space from a YAML file (``--sweep-file``): a short mapping of each key to an
expression or a fixed value, read with PyYAML's safe loader.

A space file is small, and reading it must stay small whatever it holds: the file is read
up to ``MAX_BYTES``; at most ``MAX_ALIASES`` aliases (``*name``) are followed; and the
document, every alias expanded, may hold at most ``MAX_NODES`` values, counted on the
composed node graph before anything is built. So a "billion laughs" file (aliases of
aliases of lists) is refused at once instead of growing into gigabytes later, when its
values are checked and written into the sweep's spec.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ...core.errors import SpecError

MAX_BYTES = 256 << 10
MAX_ALIASES = 100
MAX_NODES = 100_000  # scalars, lists and mappings, with every alias expanded
EXAMPLE = "lr: loguniform(1e-4, 1e-1) and hidden: choice(32, 64, 128) on their own lines"


class _Refused(Exception):
    """The document passes a limit: what it does, and where (a YAML mark)."""

    def __init__(self, what: str, mark: Any) -> None:
        super().__init__(f"{what} (line {mark.line + 1}, column {mark.column + 1})")


def load_space_file(given: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML file whose top level maps each key to an expression or a fixed value;
    pass the result to ``space.parse_space``."""
    import yaml

    path = Path(given)
    text = _read(path)
    loader = _space_loader()(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expanded_size(node)
        data = loader.construct_document(node) if node is not None else None
    except _Refused as exc:
        raise SpecError(
            f"the sweep space file {path} {exc}; write its values out instead of aliasing them"
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(
            f"the sweep space file {path} is not valid YAML: "
            f"{' '.join(str(exc).split())}; fix it to lines like {EXAMPLE}"
        ) from None
    except RecursionError:
        raise SpecError(
            f"the sweep space file {path} nests its values too deeply; a space "
            f"file holds lines like {EXAMPLE}"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict) or not data:
        got = "is empty" if data in (None, {}) else f"holds a {type(data).__name__}"
        raise SpecError(
            f"the sweep space file {path} {got}; it must map each key to an "
            f"expression, for example {EXAMPLE}"
        )
    return dict(data)


def _read(path: Path) -> str:
    """The file's text, read from the descriptor it was checked on: O_NONBLOCK, so a FIFO
    given in its place is refused at once instead of waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SpecError(
                    f"the sweep space file {path} is not a regular file (a FIFO, a device or "
                    f"a socket); give a YAML file, like one with lines such as {EXAMPLE}"
                )
            raw = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(
            f"the sweep space file {path} does not exist; check the path (a "
            f"relative one starts at {Path.cwd()})"
        ) from None
    except OSError as exc:
        raise SpecError(
            f"cannot read the sweep space file {path}: {exc.strerror or exc}; "
            "give a readable YAML file"
        ) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(
            f"the sweep space file {path} is larger than {MAX_BYTES >> 10} KiB; "
            f"a space file is a short mapping of keys to expressions, like {EXAMPLE}"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(
            f"the sweep space file {path} is not UTF-8 text; save it as UTF-8 YAML"
        ) from None


def _check_expanded_size(root: Any) -> None:
    """Refuse a document that holds more than ``MAX_NODES`` values once its aliases are
    expanded, or that refers to itself. Counted once per node (aliases share nodes), in
    a loop rather than by recursion, so the count costs what the file's size does."""
    counts: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        children = _children(node)
        if children_done:
            on_path.discard(id(node))
            counts[id(node)] = min(1 + sum(counts[id(c)] for c in children), MAX_NODES + 1)
            if counts[id(node)] > MAX_NODES:
                raise _Refused(
                    f"holds more than {MAX_NODES} values once its aliases (*name) are expanded",
                    node.start_mark,
                )
            continue
        if id(node) in counts:
            continue
        on_path.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in on_path:
                raise _Refused("has an alias (*name) inside the value it names", child.start_mark)
            if id(child) not in counts:
                stack.append((child, False))


def _children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _space_loader() -> type:
    """A ``yaml.SafeLoader`` that follows at most ``MAX_ALIASES`` aliases and refuses a key
    given twice (safe_load keeps the last)."""
    import yaml

    class SpaceFileLoader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise _Refused(
                        f"uses more than {MAX_ALIASES} aliases (*name)",
                        self.peek_event().start_mark,
                    )
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, str):
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice", key_node.start_mark
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return SpaceFileLoader
