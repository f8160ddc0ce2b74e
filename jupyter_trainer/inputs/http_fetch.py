"""``http(s)://`` URL inputs, with the standard library: what the server says the content
is (for the download cache), and the download itself, within a ``Transfer``'s limits.

Credentials are sent as a client like curl or requests sends them, and never recorded:

- ``https://user:token@host/...``: the user and password go as Basic authentication, not
  as part of the host name; without them in the URL, ``~/.netrc`` (or ``$NETRC``) is asked
  for the host, as curl ``-n`` and requests do;
- that header goes on redirects to the same scheme, host and port only, never to another
  host (a presigned redirect target must not see the origin's password);
- a query token (a presigned URL) is part of the URL the server is asked for.

Every message names the URL redacted (``urls.redact``), and any text a library adds (an
error quoting the URL) is scrubbed of its secrets.

A presigned URL is signed for GET only, so a HEAD request is refused (403); the facts are
then asked for with a one-byte ``Range`` GET, which a presigned URL allows.
"""

from __future__ import annotations

import base64
import http.client
import netrc
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..core.urls import scrub, secrets_in, without_userinfo
from .limits import Transfer

READ_TIMEOUT_S = 60.0  # no byte for this long: the server has stalled
_CHUNK = 1 << 20
_FACTS = ("Content-Length", "ETag", "Last-Modified")


def http_facts(url: str, transfer: Transfer) -> dict[str, Any]:
    """Size, ETag and Last-Modified of ``url`` ({} when the server says none of them: then
    it is downloaded every time)."""
    try:
        with _open(url, "HEAD", transfer) as answer:
            headers = answer.headers
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 405, 501):  # no HEAD (a presigned GET URL): a one-byte GET
            return _range_facts(url, transfer)
        raise _failure(exc, url, transfer) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, transfer) from None
    return {k: headers.get(k) for k in _FACTS if headers.get(k)}


def _range_facts(url: str, transfer: Transfer) -> dict[str, Any]:
    try:
        with _open(url, "GET", transfer, {"Range": "bytes=0-0"}) as answer:
            headers = answer.headers
            total = headers.get("Content-Length")
            if answer.status == 206:
                match = re.fullmatch(r"bytes\s+0-0/(\d+)", headers.get("Content-Range") or "")
                total = match.group(1) if match else None
    except urllib.error.HTTPError as exc:
        if exc.code in (403, 405, 416, 501):  # not even that: downloaded every time
            return {}
        raise _failure(exc, url, transfer) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, transfer) from None
    found = {
        "Content-Length": total,
        "ETag": headers.get("ETag"),
        "Last-Modified": headers.get("Last-Modified"),
    }
    return {k: v for k, v in found.items() if v}


def http_download(url: str, dest: Path, transfer: Transfer) -> None:
    """``url`` into the file ``dest``, within ``transfer``'s size and time."""
    try:
        with _open(url, "GET", transfer) as answer:
            length = answer.headers.get("Content-Length", "")
            expected = int(length) if length.isdigit() else None
            transfer.expect(expected)  # over the limit or the free space: nothing written
            with open(dest, "wb") as out:
                while chunk := answer.read1(_CHUNK):
                    transfer.add(len(chunk))
                    out.write(chunk)
    except SpecError:
        raise
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise _failure(exc, url, transfer) from None
    transfer.check_time()  # a connection shut by the watchdog ends like a complete one
    if expected is not None and transfer.bytes != expected:
        raise SpecError(
            f"downloading the data input {transfer.name} ({transfer.shown}) failed: "
            f"the server sent {transfer.bytes} of the {expected} bytes it announced"
        )


def _failure(exc: BaseException, url: str, transfer: Transfer) -> SpecError:
    """One line for what went wrong, the URL redacted, any quoted secret scrubbed."""
    if transfer.expired or transfer.left() <= 0:
        return transfer.timeout_error()
    what = f"the data input {transfer.name} ({transfer.shown})"
    if isinstance(exc, urllib.error.HTTPError):
        hint = "check the URL"
        if exc.code in (401, 403) and (secrets_in(url) or _credentials(url)):
            hint = (
                "the server refused its credentials: check them, or sign the URL again "
                "if it is a presigned one that has expired"
            )
        elif exc.code == 401:
            hint = (
                "it needs credentials: give them in the URL (https://user:token@host/...), "
                "as a presigned URL, or in ~/.netrc"
            )
        return SpecError(
            f"cannot fetch {what}: HTTP {exc.code} {scrub(str(exc.reason), url)}; {hint}"
        )
    if isinstance(exc, _RefusedRedirect):
        return SpecError(f"cannot fetch {what}: {exc.reason}")
    reason = getattr(exc, "reason", None) or exc
    if isinstance(reason, TimeoutError):
        return SpecError(
            f"{what} sent nothing for {_read_timeout(transfer):g} s; check the URL and the server"
        )
    return SpecError(
        f"cannot reach {what}: {scrub(str(reason), url)}; check the URL and the network"
    )


def _credentials(url: str) -> tuple[str, str] | None:
    """The Basic authentication for ``url``: its own user and password, else ``~/.netrc``'s
    (``$NETRC``) entry for its host."""
    _, auth = without_userinfo(url)
    if auth is not None:
        return auth
    host = urllib.parse.urlsplit(url).hostname
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    if not host or not os.path.isfile(path):
        return None
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (netrc.NetrcParseError, OSError):  # as requests does: a bad file is no credential
        return None
    return (entry[0] or "", entry[2] or "") if entry else None


def _read_timeout(transfer: Transfer) -> float:
    return max(0.001, min(READ_TIMEOUT_S, transfer.left()))


def _open(
    url: str, method: str, transfer: Transfer, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    transfer.check_time()
    bare, _ = without_userinfo(url)
    request = urllib.request.Request(bare, method=method, headers=headers or {})
    auth = _credentials(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_unredirected_header("Authorization", f"Basic {token}")
    return _opener(transfer).open(request, timeout=_read_timeout(transfer))


def _watched(
    base: type[http.client.HTTPConnection], transfer: Transfer
) -> type[http.client.HTTPConnection]:
    """``base`` whose socket the transfer's watchdog shuts down when the time is up."""

    class Watched(base):  # type: ignore[valid-type, misc]
        def connect(self) -> None:
            super().connect()
            transfer.watch(self.sock)

    return Watched


def _opener(transfer: Transfer) -> urllib.request.OpenerDirector:
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(_watched(http.client.HTTPConnection, transfer), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(_watched(http.client.HTTPSConnection, transfer), req)

    return urllib.request.build_opener(Http, Https, _SameOriginAuth)


class _RefusedRedirect(urllib.error.URLError):
    """The server redirected to a URL that is not http(s)."""


class _SameOriginAuth(urllib.request.HTTPRedirectHandler):
    """A redirect goes to http(s) only (urllib would follow one to ``ftp://``), and keeps
    the Authorization header only to the same scheme, host and port (urllib drops an
    unredirected header on every redirect; requests does the same as here)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        target = urllib.parse.urlsplit(newurl)
        if target.scheme.lower() not in ("http", "https"):
            raise _RefusedRedirect(
                f"the server redirected it (HTTP {code}) to {target.scheme or 'no scheme'}:// "
                f"on {target.hostname or 'no host'}, and a data input follows redirects "
                "to http:// and https:// only; give the URL of the file itself"
            )
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        auth = req.get_header("Authorization")
        if new is not None and auth and _origin(new.full_url) == _origin(req.full_url):
            new.add_unredirected_header("Authorization", auth)
        return new


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), parts.hostname, parts.port or default
