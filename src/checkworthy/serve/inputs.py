"""What one request may hold, checked completely before anything is stored: empty or over-long
text, too many sentences, NUL characters or lone surrogates, ids beyond the store's integers.
Each check refuses with an :class:`~checkworthy.serve.refusals.ApiError` naming the field."""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checkworthy.data.language import EMPTY_AFTER_NORMALISATION, unreadable, visible
from checkworthy.serve.refusals import ApiError

BIGINT_MAX = 2**63 - 1  # the store's ids and run ids are Postgres bigints


@dataclass(frozen=True)
class Limits:
    """What one request may hold."""

    max_chars: int = 2000  # per text, after stripping
    max_batch: int = 100  # texts per request (a paragraph's sentences included)
    max_body: int = 1_000_000  # bytes of request body


def text_problem(value: str) -> str | None:
    """Why the store cannot hold ``value`` (None when it can): Postgres text refuses NUL, and a
    lone surrogate (JSON's ``"\\ud800"``) is not UTF-8."""
    if "\x00" in value:
        return "holds a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (not UTF-8 text)"
    return None


def check_param(value: str, field: str) -> str:
    """``value`` when the store can hold it, else :class:`ApiError` (422) naming ``field``."""
    problem = text_problem(value)
    if problem:
        raise ApiError(422, "bad_text", f"the value {problem}", field)
    return value


def check_strings(body: Any) -> None:
    """Every string (and key) of a parsed JSON ``body`` one the store can hold, else
    :class:`ApiError` (422) naming the first at fault by its path (``task.data.source_id``;
    ``body`` for the whole); walked without recursion."""
    todo: list[tuple[str, Any]] = [("", body)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            check_param(value, where or "body")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                check_param(str(k), where or "body")
                todo.append((f"{where}.{k}" if where else str(k), v))
        elif isinstance(value, list):
            todo.extend((f"{where}[{i}]", v) for i, v in enumerate(value))


def ascii_id(value: str) -> int | None:
    """``value`` as a positive id of the store (ASCII digits within a bigint), else None: ``"²"``
    is a digit to ``str.isdigit`` but not to ``int``, and 25 digits overflow Postgres."""
    if not (value.isascii() and value.isdigit()):
        return None
    n = int(value)
    return n if 0 < n <= BIGINT_MAX else None


def check_texts(texts: list[str], limits: Limits, field: str) -> list[str]:
    """The texts stripped, or :class:`ApiError` naming the first one at fault."""
    if not texts:
        raise ApiError(422, "empty", "no text to score", field)
    if len(texts) > limits.max_batch:
        raise ApiError(422, "too_many", f"at most {limits.max_batch} texts per request, got {len(texts)}",
                       field)
    out = []
    for i, t in enumerate(texts):
        where = f"{field}[{i}]" if field == "sentences" else field
        s = t.strip()
        if not s:
            raise ApiError(422, "empty", "empty text", where)
        if not visible(s):
            raise ApiError(422, "empty", EMPTY_AFTER_NORMALISATION, where)
        if len(s) > limits.max_chars:
            raise ApiError(422, "too_long", f"{len(s)} characters; at most {limits.max_chars}", where)
        problem = text_problem(s)
        if problem:
            raise ApiError(422, "bad_text", f"the text {problem}", where)
        unread = unreadable(s)
        if unread:
            raise ApiError(422, "no_language", unread, where)
        out.append(s)
    return out
