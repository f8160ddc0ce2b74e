"""Secrets kept out of every record and message: one rule for what a secret is, used for a
run's params and environment variables, the locals a failing rank saves, a framework's
arguments, a sweep's state and the messages that quote a URL.

A value is a secret by its name or by its shape:

- by name (``secret_names``): ``hf_token``, ``wandb_api_key``, ``DB_PASSWORD``,
  ``passphrase``, ``client_secret``, ``credentials``, ``auth``, ``dsn``; not ``tokenizer``,
  ``max_tokens``, ``num_keys``, ``monkey`` or ``pad_token``. Every string under such a name
  (in a dict, a list, an object's fields) is a secret too;
- a URL (whatever its name: ``DATABASE_URL``, ``db_url``, a value inside a message) keeps
  its host and path and loses its password and secret query parameters (``url_secrets``);
- in any text: ``Bearer``/``Basic``/``Token`` credentials, ``NAME=value`` and
  ``'NAME': 'value'`` pairs whose NAME is a secret's (``password=...`` in a libpq DSN,
  ``Namespace(hf_token='...')``), a PEM private key, and the token shapes of the common
  services (``hf_...``, ``sk-...``, ``ghp_...``, ``xoxb-...``, ``AKIA...``, JWTs).

Numbers, booleans and None are never secrets: ``max_tokens=512`` stays as it is. Containers
are walked at any depth (dicts, lists, tuples, sets; ``argparse.Namespace``, dataclasses and
other objects through their fields), with a cap against cycles and hostile nesting.
Standard library only: copied into every snapshot; ``core.redact`` is this.
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
import threading
from typing import Any

from .secret_names import secret_name, words
from .url_secrets import MASK
from .url_secrets import redact as redact_url

__all__ = [
    "MASK",
    "holds_secret",
    "redact",
    "redact_object",
    "redact_text",
    "redact_url",
    "secret_name",
    "words",
]

MAX_DEPTH = 64  # deeper than any real config: what lies below is masked whole
_NAME = r"[A-Za-z_][\w.-]*"
# NAME=value, NAME: value, 'NAME': 'value', "NAME"="value", with the value quoted or bare
_PAIR = re.compile(
    rf"(?P<name>{_NAME})(?P<sep>['\"]?\s*[:=]\s*)"
    r"(?:(?P<q>['\"])(?P<quoted>(?:\\.|(?!(?P=q)).)*)(?P=q)|(?P<bare>[^\s&;,'\")\]}]+))"
)
_SCHEME_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_SCHEMES = (
    re.compile(r"(?i)\b(Bearer|Basic|Token|Digest)(\s+)[A-Za-z0-9._~+/=:-]{6,}"),
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
    ),
)
_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_\w{20,}|glpat-[\w-]{20,}|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_-]{35}|eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,})"
)
# bare words that stand where a secret's value would, and are not one
_NOT_SECRETS = frozenset({"None", "null", "Bearer", "Basic", "Token", "Digest", "bearer", "basic"})
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def redact_text(text: str) -> str:
    """``text`` (a message, a ``repr``, a variable's value) with every secret it shows, by
    shape or as a ``NAME=value`` pair, replaced by ``***``."""
    if not text:
        return text
    text = _SCHEME_URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _SCHEMES[0].sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    text = _SCHEMES[1].sub(MASK, text)
    text = _SHAPES.sub(MASK, text)
    return _PAIR.sub(_masked_pair, text)


def _masked_pair(match: re.Match[str]) -> str:
    name = match.group("name")
    if not secret_name(name):
        return match.group(0)
    quote, value = match.group("q"), match.group("quoted")
    if quote is None:
        value = match.group("bare")
    if not value or value == MASK or _NUMBER.fullmatch(value) or value in _NOT_SECRETS:
        return match.group(0)
    shown = f"{quote}{MASK}{quote}" if quote else MASK
    return f"{name}{match.group('sep')}{shown}"


def redact(value: Any, name: str | None = None) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every secret replaced by
    ``***``; ``name`` is what the value is called (a param's, a variable's or a dict key's).
    A new value: ``value`` itself is left as it is. Never raises on hostile nesting."""
    return _redact(value, name, 0, set())


def holds_secret(value: Any, name: str | None = None) -> bool:
    """Whether ``redact`` would change ``value``: it holds a secret by name or by shape."""
    shown = redact(value, name)
    return shown is not value and shown != value


def _redact(value: Any, name: str | None, depth: int, seen: set[int], hidden: bool = False) -> Any:
    """``hidden``: ``value`` lies under a secret's name, so every string in it is one."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    hidden = hidden or (name is not None and secret_name(name))
    if isinstance(value, str):
        return (MASK if value else value) if hidden else redact_text(value)
    if isinstance(value, bytes):
        return MASK if hidden else value
    if depth >= MAX_DEPTH or id(value) in seen:
        return MASK
    seen.add(id(value))
    try:
        if isinstance(value, dict):
            return {
                k: _redact(v, k if isinstance(k, str) else None, depth + 1, seen, hidden)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [_redact(v, None, depth + 1, seen, hidden) for v in value]
            return items if isinstance(value, list) else type(value)(items)
        return value
    finally:
        seen.discard(id(value))


def redact_object(value: Any, name: str | None = None) -> Any:
    """Like ``redact``, for any Python object (a failing rank's local variable): an
    ``argparse.Namespace``, a dataclass or another object whose fields hold a secret is
    replaced by a stand-in whose ``repr`` shows its fields with the secrets masked; objects
    that hold none come back as they are, so their own ``repr`` is kept."""
    return _object(value, name, 0, _Walk(), False)


MAX_OBJECTS = 20_000  # objects one call looks into: a rank's local can reach a whole model


class _Walk(set):
    """The objects on the path being walked (a cycle is masked), what each object already
    looked into became (an object a wide graph shares is looked into once), and how many
    more may be: past that, objects come back as they are, their ``repr`` left to
    ``redact_text`` as every shown value is."""

    def __init__(self) -> None:
        super().__init__()
        self.done: dict[tuple[int, bool], Any] = {}
        self.left = MAX_OBJECTS


_short = reprlib.Repr()
_short.maxstring, _short.maxother = 300, 300


class Shown:
    """A stand-in for an object whose fields held secrets: ``Type(field=..., token='***')``."""

    def __init__(self, type_name: str, fields: dict[str, Any]) -> None:
        self.type_name, self.fields = type_name, fields

    def __repr__(self) -> str:
        # A stand-in's fields may hold stand-ins an object graph shares many times over:
        # three levels of them, and 20 fields of each, are shown at the most.
        level = getattr(_shown_level, "n", 0)
        if level >= 3:
            return f"{self.type_name}(...)"
        _shown_level.n = level + 1
        try:
            fields = list(self.fields.items())
            inside = ", ".join(f"{k}={_short.repr(v)}" for k, v in fields[:20])
        finally:
            _shown_level.n = level
        more = ", ..." if len(fields) > 20 else ""
        return f"{self.type_name}({inside}{more})"


_shown_level = threading.local()  # how many stand-ins' reprs are being written, nested


def _fields(value: Any) -> dict[str, Any] | None:
    """An object's fields as a dict, or None for one that has none to look into."""
    if isinstance(value, type):
        return None
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    found = getattr(value, "__dict__", None)
    if isinstance(found, dict) and type(value).__module__ in ("argparse", "types"):
        return dict(found)  # Namespace, SimpleNamespace
    if isinstance(found, dict) and type(value).__repr__ is object.__repr__:
        return None  # its repr shows no fields: nothing to hide
    return dict(found) if isinstance(found, dict) and len(found) <= 200 else None


def _object(value: Any, name: str | None, depth: int, seen: _Walk, hidden: bool) -> Any:
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return _redact(value, name, depth, seen, hidden)
    hidden = hidden or (name is not None and secret_name(name))
    if depth >= MAX_DEPTH or id(value) in seen:
        return MASK
    key = (id(value), hidden)
    if key in seen.done:
        return seen.done[key]
    if seen.left <= 0:
        return value
    seen.left -= 1
    seen.add(id(value))
    try:
        found = seen.done[key] = _look_into(value, depth, seen, hidden)
        return found
    finally:
        seen.discard(id(value))


def _look_into(value: Any, depth: int, seen: _Walk, hidden: bool) -> Any:
    try:
        if isinstance(value, dict):
            out = {
                k: _object(v, k if isinstance(k, str) else None, depth + 1, seen, hidden)
                for k, v in value.items()
            }
            return value if _same(out, value) else out
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [_object(v, None, depth + 1, seen, hidden) for v in value]
            if _same(items, list(value)):
                return value
            return items if isinstance(value, list) else tuple(items)
        fields = _fields(value)
        if fields:
            shown = {k: _object(v, k, depth + 1, seen, hidden) for k, v in fields.items()}
            if not _same(shown, fields):
                return Shown(type(value).__name__, shown)
        return value
    except Exception:  # a hostile __dict__ or __eq__: show nothing of it
        return MASK


def _same(new: Any, old: Any) -> bool:
    """Whether redaction changed nothing: the same objects, element by element."""
    if isinstance(new, dict):
        return new.keys() == old.keys() and all(_kept(new[k], old[k]) for k in new)
    return len(new) == len(old) and all(_kept(a, b) for a, b in zip(new, old))


def _kept(new: Any, old: Any) -> bool:
    return new is old or (isinstance(old, (str, bytes)) and type(new) is type(old) and new == old)
