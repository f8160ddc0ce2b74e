"""What a user writes in ``%%environment NAME``: parsed, validated, normalised, hashed.

A definition is checked here, once, before anything is stored or resolved, so a typo in a
key, a YAML ``3.10`` read as the number 3.1, a ``conda:`` section or a malformed requirement
fails in the cell that wrote it, with the key and the fix in the message. Nothing is
silently ignored: an unknown key is an error, not a no-op.

The *version* of a definition is a hash of its normalised content, so defining the same
content twice gives the same version, and any change gives a new one. A variable that holds
a secret (``core.redact``: ``HF_TOKEN``, a ``DATABASE_URL`` with a password) is part of the
content redacted, with its name under ``secrets``: the stored definition, which a workspace's
team reads, never holds its value, and a new value alone is no new version. The definer's
values are kept owner-only beside their locks (``registry``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import EnvError
from ..core.redact import holds_secret, redact

KEYS = ("python", "pip", "env", "inherit", "image")
RESERVED_NAMES = ("list", "show", "export", "build", "help")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_PYTHON_RE = re.compile(r"3\.\d{1,2}(\.\d{1,3})?")
_VAR_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PROJECT = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REQUIREMENT_RE = re.compile(
    rf"(?P<name>{_PROJECT})\s*(?P<extras>\[[^\]]*\])?\s*"
    r"(?:(?P<url>@\s*\S+)|(?P<specs>[^;@]*))\s*(?P<marker>;.*)?",
    re.S,
)
_SPEC_RE = re.compile(r"\s*(===|==|~=|!=|<=|>=|<|>)\s*(\S+?)\s*")
_VERSION_RE = re.compile(
    r"(\d+!)?\d+(\.\d+)*((a|b|c|rc|alpha|beta|pre|preview)\.?\d*)?(\.?post\d*)?(\.?dev\d*)?"
    r"(\+[a-z0-9]+(\.[a-z0-9]+)*)?",
    re.I,
)
# Variables every rank gets from the launcher or from jupyter_trainer itself.
_LAUNCHER_VARS = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "ROLE_RANK",
    "PYTHONUNBUFFERED",
}
_IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")


def _fail(name: str, message: str) -> EnvError:
    return EnvError(f"environment {name!r}: {message}")


def validate_name(name: object) -> str:
    """An environment name is a safe path segment and not one of the magic's sub-commands."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise EnvError(
            f"invalid environment name {name!r}: use 1-64 letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    if name in RESERVED_NAMES:
        raise EnvError(
            f"{name!r} cannot name an environment: it is a sub-command of "
            f"%environment ({', '.join(RESERVED_NAMES)}); choose another name"
        )
    return name


@dataclass(frozen=True)
class EnvDefinition:
    """One validated environment definition. Build with ``from_mapping`` or ``from_yaml``."""

    name: str
    python: str | None = None  # "3.11" or "3.11.7"; None: the kernel's Python
    pip: tuple[str, ...] = ()  # requirement lines, in the order given
    env: Mapping[str, str] = field(default_factory=dict)  # variables set for every rank
    inherit: bool = False  # layer on the kernel's own packages
    image: str | None = None  # a container image, for targets that run them
    requirements_file: str | None = None  # where ``pip`` came from, if a file (not hashed)
    secrets: tuple[str, ...] = ()  # variables whose values are kept apart (more are found)
    # the hash an older release stored for a definition whose file holds secret values
    # (checked against that content by ``legacy_version`` before it is given)
    stored_version: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        validate_name(self.name)
        object.__setattr__(self, "pip", tuple(self.pip))
        object.__setattr__(self, "env", dict(self.env))
        found = {k for k, v in self.env.items() if holds_secret(v, k)}
        kept = sorted((set(self.secrets) | found) & set(self.env))
        object.__setattr__(self, "secrets", tuple(kept))

    def recorded_env(self) -> dict[str, str]:
        """The variables as every record shows them: the secret ones redacted."""
        return {k: (redact(v, k) if k in self.secrets else v) for k, v in sorted(self.env.items())}

    def secret_values(self) -> dict[str, str]:
        """The secret variables' values this definition holds (none when it was read from a
        stored definition, which records them redacted)."""
        return {k: self.env[k] for k in self.secrets if holds_secret(self.env[k], k)}

    def content(self) -> dict[str, Any]:
        """What the version hashes and the stored definition records: everything that
        changes what a run gets, its secret values redacted."""
        content: dict[str, Any] = {
            "python": self.python,
            "pip": list(self.pip),
            "env": self.recorded_env(),
            "inherit": self.inherit,
            "image": self.image,
        }
        if self.secrets:
            content["secrets"] = list(self.secrets)
        return content

    @property
    def version(self) -> str:
        return self.stored_version or _hash(self.content())

    def legacy_version(self) -> str:
        """The version an older release gave this content: its variables as they are."""
        content = self.content()
        content.pop("secrets", None)
        return _hash({**content, "env": dict(sorted(self.env.items()))})

    def to_yaml(self) -> str:
        """The definition as the YAML body of a ``%%environment`` cell (for ``show``)."""
        import yaml

        data: dict[str, Any] = {}
        if self.python is not None:
            data["python"] = self.python
        data["inherit"] = self.inherit
        if self.pip:
            data["pip"] = list(self.pip)
        if self.env:
            data["env"] = self.recorded_env()
        if self.image is not None:
            data["image"] = self.image
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)

    @classmethod
    def from_yaml(cls, name: str, text: str, base_dir: Path | None = None) -> EnvDefinition:
        """Parse the body of a ``%%environment NAME`` cell."""
        import yaml

        validate_name(name)
        try:
            data = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as exc:
            raise _fail(name, f"the cell is not valid YAML: {exc}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise _fail(
                name,
                "the cell must be a YAML mapping of keys "
                f'({", ".join(KEYS)}), for example `python: "3.11"`',
            )
        return cls.from_mapping(name, data, base_dir)

    @classmethod
    def from_mapping(
        cls, name: str, data: Mapping[Any, Any], base_dir: Path | None = None
    ) -> EnvDefinition:
        """Validate every key of ``data``; an unknown key is an error naming the valid ones."""
        validate_name(name)
        _check_keys(name, data)
        pip, req_file = _parse_pip(name, data.get("pip"), base_dir)
        image = data.get("image")
        if image is not None and (not isinstance(image, str) or not _IMAGE_RE.fullmatch(image)):
            raise _fail(
                name,
                f"image: {image!r} is not a container image reference; write "
                "for example `image: pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime`",
            )
        inherit = data.get("inherit", False)
        if not isinstance(inherit, bool):
            raise _fail(name, f"inherit: {inherit!r} must be true or false (without quotes)")
        return cls(
            name=name,
            python=_parse_python(name, data.get("python")),
            pip=pip,
            env=_parse_env(name, data.get("env")),
            inherit=inherit,
            image=image,
            requirements_file=req_file,
        )


def _hash(content: dict[str, Any]) -> str:
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _check_keys(name: str, data: Mapping[Any, Any]) -> None:
    if "conda" in data or ("dependencies" in data and "channels" in data):
        raise _fail(
            name,
            "conda is not supported: no conda channel is reachable from this "
            "machine and no conda is installed. List the packages under `pip:` "
            "instead (most exist on PyPI under the same name), and use `image:` "
            "for system libraries on a target that runs containers",
        )
    for key in data:
        if key in KEYS:
            continue
        if key == "requirements":
            raise _fail(
                name,
                "`requirements:` goes under `pip:`: write `pip: {requirements: "
                "path/to/requirements.txt}`",
            )
        close = difflib.get_close_matches(str(key), KEYS, n=1)
        hint = f"did you mean `{close[0]}:`? " if close else ""
        raise _fail(name, f"unknown key `{key}:`; {hint}the keys are {', '.join(KEYS)}")


def _parse_python(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise _fail(
            name,
            f"python: {value!r} was read as a number by YAML (3.10 becomes 3.1); "
            'quote the version: `python: "3.11"`',
        )
    if not isinstance(value, str) or not _PYTHON_RE.fullmatch(value.strip()):
        raise _fail(
            name,
            f'python: {value!r} is not a Python version; write a version like "3.11" or "3.11.7"',
        )
    return value.strip()


def _parse_pip(name: str, value: Any, base_dir: Path | None) -> tuple[tuple[str, ...], str | None]:
    if value is None:
        return (), None
    if isinstance(value, dict):
        extra = set(value) - {"requirements"}
        if extra or "requirements" not in value:
            raise _fail(
                name,
                f"pip: as a mapping takes only `requirements: PATH` (got "
                f"{sorted(map(str, value))}); or give pip: a list of requirements",
            )
        path = value["requirements"]
        if not isinstance(path, str) or not path.strip():
            raise _fail(name, "pip: requirements: must be the path of a requirements file")
        return read_requirements_file(name, Path(path), base_dir), path
    if isinstance(value, str):
        raise _fail(
            name,
            "pip: must be a list, one requirement per item, for example\n"
            "pip:\n  - scikit-learn==1.7.*\n  - rich",
        )
    if not isinstance(value, list):
        raise _fail(name, f"pip: must be a list of requirements, got {type(value).__name__}")
    items = []
    for item in value:
        if not isinstance(item, str):
            raise _fail(
                name,
                f"pip: item {item!r} is not a requirement string; write "
                "`- package==1.2` (a `name: version` item becomes a mapping in YAML)",
            )
        items.append(check_requirement(name, item))
    return tuple(items), None


def read_requirements_file(name: str, path: Path, base_dir: Path | None = None) -> tuple[str, ...]:
    """The requirements of a ``requirements.txt``; its content, not its path, is versioned."""
    full = path.expanduser()
    if not full.is_absolute() and base_dir is not None:
        full = base_dir / full
    try:
        text = full.read_text()
    except OSError as exc:
        raise _fail(
            name, f"pip: requirements: cannot read {str(full)!r}: {exc.strerror or exc}"
        ) from None
    items = []
    for number, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if not line:
            continue
        if line.startswith("-"):
            raise _fail(
                name,
                f"{full} line {number}: option {line.split()[0]!r} is not supported "
                "in an environment's requirements; list the requirements themselves "
                "(an index is chosen with uv's own settings, e.g. UV_INDEX_URL)",
            )
        items.append(check_requirement(name, line))
    return tuple(items)


def check_requirement(name: str, text: str) -> str:
    """A PEP 508 requirement, checked enough to name a bad one here, before uv sees it.

    Runs of whitespace become one space, so layout never changes a version hash.
    """
    req = " ".join(text.split())
    match = _REQUIREMENT_RE.fullmatch(req)
    if not req or match is None:
        raise _fail(
            name,
            f"pip: {text!r} is not a requirement; write `name`, `name==1.2`, "
            "`name>=1.2,<2` or `name[extra]==1.2`",
        )
    specs = (match.group("specs") or "").strip()
    if specs:
        for part in specs.split(","):
            spec = _SPEC_RE.fullmatch(part)
            if spec is None:
                raise _fail(
                    name,
                    f"pip: {req!r}: {part.strip()!r} is not a version constraint; "
                    "use ==, >=, <=, ~=, !=, < or > followed by a version",
                )
            op, version = spec.groups()
            wildcard = version.endswith(".*") and op in ("==", "!=")
            if op != "===" and not _VERSION_RE.fullmatch(version[:-2] if wildcard else version):
                raise _fail(
                    name,
                    f"pip: {req!r}: {version!r} is not a version; versions are "
                    "numbers like 1.7, 1.7.2 or 1.7.* (PEP 440)",
                )
    return req


def _parse_env(name: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(
            name,
            "env: must be a mapping of variable names to values, for example\n"
            'env:\n  OMP_NUM_THREADS: "1"',
        )
    out = {}
    for key, val in value.items():
        check_variable(name, key, val)
        out[key] = str(val)
    return out


def check_variable(name: str, key: Any, value: Any) -> None:
    if not isinstance(key, str) or not _VAR_RE.fullmatch(key):
        raise _fail(name, f"env: {key!r} is not a variable name (letters, digits, '_')")
    if key.startswith("JT_") or key in _LAUNCHER_VARS:
        raise _fail(
            name,
            f"env: {key} is set by the launcher or jupyter_trainer for every "
            "rank; it cannot be set by an environment",
        )
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _fail(
            name,
            f'env: {key}: {value!r} must be a string; quote it, for example `{key}: "{value}"`',
        )


def parse_assignment(name: str, item: str) -> tuple[str, str]:
    """One ``--var K=V`` of the line form."""
    key, sep, value = item.partition("=")
    if not sep:
        raise _fail(name, f"--var {item!r}: write --var NAME=VALUE")
    check_variable(name, key, value)
    return key, value
