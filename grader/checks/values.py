"""Values as the worker describes them (plain JSON data), read and shown on the judge's side."""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any] | None:
    """A returned dict's string-keyed entries, or None when the value was not a dict."""
    if isinstance(value, dict) and "__dict__" in value:
        return {str(k): v for k, v in value["__dict__"] if isinstance(k, str)}
    return None


def as_list(value: Any) -> list[Any] | None:
    if isinstance(value, dict):
        found = value.get("__list__", value.get("__tuple__"))
        return found if isinstance(found, list) else None
    return None


def show(value: Any) -> str:
    """A returned value the way a student would print it."""
    if isinstance(value, dict):
        if "__list__" in value or "__tuple__" in value:
            return "[" + ", ".join(show(v) for v in value.get("__list__", value.get("__tuple__"))) + "]"
        if "__dict__" in value:
            return "{" + ", ".join(f"{show(k)}: {show(v)}" for k, v in value["__dict__"]) + "}"
        if "__object__" in value:
            return f"{value.get('repr')} ({value['__object__']})"
        if "__float__" in value:
            return str(value["__float__"])
        return repr(value)
    return repr(value)
