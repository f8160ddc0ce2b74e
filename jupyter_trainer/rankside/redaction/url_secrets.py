"""Credentials in URLs, kept out of everything that is recorded or shown.

A data input may be a presigned URL (S3's ``X-Amz-Signature``, an Azure SAS ``sig``, GCS's
``X-Goog-Signature``), a URL with a token in its query (``?token=...``), or
``https://user:token@host/...``; an index or a tracking server is a DSN
(``postgresql+psycopg://user:password@host/db``). ``redact`` replaces each secret with
``***`` and keeps the rest readable: the host, the path, the parameters that are not secret
(``se=`` says when a SAS expires). What counts as a secret:

- the password of ``user:password@``, also one written with an unencoded ``/``, ``@`` or
  ``?`` (``postgresql://u:pa/ss@h/db``, which ``urlsplit`` reads as host ``u:pa``); and for
  http(s), a user name without a password, the form ``https://TOKEN@host`` takes (for other
  schemes a lone user name is kept: it is how fsspec names an Azure container,
  ``abfs://container@account...``);
- the value of every query (or fragment) parameter whose name is a secret's
  (``secret_names.secret_name``: ``api_key``, ``access_token``, ``X-Amz-Security-Token``,
  ``X-Amz-Credential``, ``password``...) or one of the names URLs give their signatures and
  keys (``sig``, ``*-sig``, ``*signature*``, ``key``, ``session``).

``scrub`` removes the same secrets from any text (a library's error message quotes the URL
it was given). Standard library only: copied into every snapshot, and ``core.urls`` is this.
"""

from __future__ import annotations

import re
import urllib.parse

from .secret_names import secret_name

MASK = "***"
_URL_SECRET_NAME = re.compile(r"(?:^|[-_.])sig$|signature|^key$|session|^pass$|pwd", re.I)
_SCRUB_MIN = 4  # shorter "secrets" are left in free text: "t" would blank every t
_TOKEN_USER_SCHEMES = ("http", "https")
# scheme://user:password@ where the password may hold / ? # or @ unencoded: the last @ of
# the URL's first run of non-space characters ends it
_LOOSE_USERINFO = re.compile(
    r"^([A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)(\S*)@([\w.\-\[\]%]+(?::\d*)?(?:[/?#][^\s@]*)?)$"
)
_PORT_AND_PATH = re.compile(r"\d+(?:[/?#]|$)")  # host:8443/path@... is a port, not a password


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unbalanced [ in the host, say: not a URL we can take apart
        return None
    return parts if parts.scheme and parts.netloc else None


def _loose_password(url: str) -> str | None:
    """The password of a URL whose password holds an unencoded ``/``, ``?``, ``#`` or
    ``@`` (``urlsplit`` then reads a wrong host); None for any other URL."""
    match = _LOOSE_USERINFO.match(url)
    if match is None or not match.group(2) or _PORT_AND_PATH.match(match.group(2)):
        return None
    parts = _split(url)
    if parts is not None and _userinfo(parts)[1] == match.group(2):
        return None  # an ordinary URL: the structured reading is right
    return match.group(2)


def _userinfo(parts: urllib.parse.SplitResult) -> tuple[str | None, str | None, str]:
    """(user, password, host[:port]) as written in the URL (percent-encoded)."""
    info, at, host = parts.netloc.rpartition("@")
    if not at:
        return None, None, parts.netloc
    user, colon, password = info.partition(":")
    return user, (password if colon else None), host


def _params(text: str) -> list[tuple[str, str | None]]:
    """``a=1&b&c=3`` as written: (name, raw value or None), nothing decoded."""
    out: list[tuple[str, str | None]] = []
    for piece in text.split("&"):
        name, eq, value = piece.partition("=")
        out.append((name, value if eq else None))
    return out


def _secret_name(raw_name: str) -> bool:
    name = urllib.parse.unquote_plus(raw_name)
    return secret_name(name) or bool(_URL_SECRET_NAME.search(name))


def _redact_params(text: str) -> str:
    if "=" not in text:
        return text
    return "&".join(
        name if value is None else f"{name}={MASK if value and _secret_name(name) else value}"
        for name, value in _params(text)
    )


def secrets_in(url: str) -> list[str]:
    """The secret parts of ``url`` as written in it (percent-encoded); empty when none."""
    loose = _loose_password(url)
    if loose is not None:
        return [loose]
    parts = _split(url)
    if parts is None:
        return []
    found = []
    user, password, _ = _userinfo(parts)
    if password:
        found.append(password)
    elif user and parts.scheme.lower() in _TOKEN_USER_SCHEMES:
        found.append(user)
    for text in (parts.query, parts.fragment):
        if "=" in text:
            found += [value for name, value in _params(text) if value and _secret_name(name)]
    return found


def redact(url: str) -> str:
    """``url`` with every secret replaced by ``***``; unchanged when it holds none."""
    if _loose_password(url) is not None:
        return _LOOSE_USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@{m.group(3)}", url)
    parts = _split(url)
    if parts is None or not secrets_in(url):
        return url
    user, password, host = _userinfo(parts)
    netloc = host
    if password is not None:
        netloc = f"{user}:{MASK if password else ''}@{host}"
    elif user is not None:
        netloc = f"{MASK if parts.scheme.lower() in _TOKEN_USER_SCHEMES else user}@{host}"
    return urllib.parse.urlunsplit(
        (
            parts.scheme,
            netloc,
            parts.path,
            _redact_params(parts.query),
            _redact_params(parts.fragment),
        )
    )


def is_redacted(url: str) -> bool:
    """Whether ``url`` is a redacted one: some secret of it reads ``***``."""
    return MASK in secrets_in(url)


def scrub(text: str, url: str) -> str:
    """``text`` (an error message, say) with ``url``'s secrets, as written and decoded,
    replaced by ``***`` (those of at least four characters: fewer would blank common words)."""
    for secret in sorted(secrets_in(url), key=len, reverse=True):
        for form in {secret, urllib.parse.unquote(secret), urllib.parse.unquote_plus(secret)}:
            if len(form) >= _SCRUB_MIN and form != MASK:
                text = text.replace(form, MASK)
    return text


def without_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@``, and that pair decoded (None when absent):
    what an HTTP client sends as Basic authentication instead of a host name."""
    parts = _split(url)
    if parts is None:
        return url, None
    user, password, host = _userinfo(parts)
    if user is None:
        return url, None
    bare = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return bare, (urllib.parse.unquote(user), urllib.parse.unquote(password or ""))
