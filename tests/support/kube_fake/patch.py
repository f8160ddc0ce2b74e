"""Merge patch (RFC 7386), an approximation of strategic merge patch, and JSON patch."""

from __future__ import annotations

import copy

from .store import ApiError


def _merge(target, patch, by_name: bool):
    if (
        by_name
        and isinstance(patch, list)
        and isinstance(target, list)
        and patch
        and all(isinstance(p, dict) and "name" in p for p in patch + target)
    ):
        out = [copy.deepcopy(t) for t in target]
        for item in patch:
            if item.get("$patch") == "delete":
                out = [t for t in out if t["name"] != item["name"]]
                continue
            for i, t in enumerate(out):
                if t["name"] == item["name"]:
                    out[i] = _merge(t, item, by_name)
                    break
            else:
                out.append(copy.deepcopy(item))
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value, by_name)
    return out


def merge_patch(target, patch):
    return _merge(target, patch, False)


def strategic_patch(target, patch):
    """Like a merge patch, but lists of named objects (containers, env, volumes, ports...) are
    merged item by item on ``name``, as the strategic merge patch does for those fields."""
    return _merge(target, patch, True)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(target, ops: list):
    doc = copy.deepcopy(target)
    for op in ops:
        parts = _pointer(op["path"])
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1] if parts else None
        kind = op["op"]
        try:
            if kind == "test":
                cur = parent[int(last)] if isinstance(parent, list) else parent[last]
                if cur != op["value"]:
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an "
                        f"error in our request: test failed at {op['path']}",
                    )
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind in ("add", "replace"):
                if isinstance(parent, list):
                    if last == "-":
                        parent.append(op["value"])
                    elif kind == "add":
                        parent.insert(int(last), op["value"])
                    else:
                        parent[int(last)] = op["value"]
                else:
                    parent[last] = op["value"]
            else:
                raise ApiError(400, "BadRequest", f"unsupported json patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(
                422, "Invalid", f"the server rejected our request: {kind} {op['path']}: {exc}"
            ) from None
    return doc


def apply_patch(content_type: str, target: dict, patch):
    ctype = content_type.split(";")[0].strip()
    if ctype == "application/merge-patch+json":
        return merge_patch(target, patch)
    if ctype in ("application/strategic-merge-patch+json", "application/apply-patch+yaml"):
        return strategic_patch(target, patch)
    if ctype == "application/json-patch+json":
        return json_patch(target, patch)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown "
        "format - accepted media types include: application/json-patch+json, "
        "application/merge-patch+json, application/apply-patch+yaml",
    )
