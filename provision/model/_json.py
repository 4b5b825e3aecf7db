"""Reading a JSON object into a record: each field checked once, bad input naming its key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.errors import BadInput

REGENERATE = "regenerate it with `provision plan`"


def bad(where: str, what: str) -> BadInput:
    return BadInput(f"{where} is not {what}", REGENERATE)


def obj(doc: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(doc, Mapping):
        raise bad(where, "an object")
    return doc


def opt_obj(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = doc.get(key)
    return None if value is None else obj(value, f"{where}.{key}")


def text(doc: Mapping[str, Any], key: str, where: str) -> str:
    """A key that holds text ("" where absent: the older, hand-written locks omit some)."""
    value = doc.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad(f"{where}.{key}", "text")
    return value


def opt_text(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(f"{where}.{key}", "text or null")
    return value


def opt_int(doc: Mapping[str, Any], key: str, where: str) -> int | None:
    value = doc.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise bad(f"{where}.{key}", "an integer or null")
    return value


def texts(doc: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad(f"{where}.{key}", "a list of text")
    return tuple(value)
