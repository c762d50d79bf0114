"""Ollama backend (the production backend): Gemma 3 and any other model an Ollama server holds.

Why it is shaped like this:

* Same prompt as every other LLM scorer (``prompt.build_prompt``), so the stored prompt version is
  right. Chat/instruction models get the prompt without the trailing pre-fill and write the whole
  JSON answer (``mode="chat"`` via ``/api/chat``, ``mode="generate"`` via ``/api/generate`` with the
  model's template); ``mode="raw"`` sends the exact prompt with the pre-fill, bypassing the
  template, and reads only the number (a few tokens per claim: the cheapest mode; ``Score.raw``
  then holds the continuation after the pre-fill).
* Generation parameters default to the paper's (Gemma 3 270M T=0.8; 1B/4B T=1.0; top_k 64,
  top_p 0.95); ``sampling="t0.1"`` is the paper's low-temperature ablation. Every parameter that
  changes the output (and the model digest the server reports) is in ``params()``, hence in the
  store's cache key; the host URL is not (the same model scores the same anywhere).
* Structured output: a JSON schema in ``format`` when the server is >= 0.5.0, plain ``"json"``
  before that (probed once via ``/api/version``); the parser never trusts it anyway.
* Failures are split in two. The service failing (timeouts, connection errors, 429/5xx, an error
  line mid-stream) is retried with exponential backoff and, if it persists, raises
  :class:`BackendError`, so nothing is stored for the chunk and a rerun resumes. A model *answer*
  that is not a score in [0, 1] is a stored failure with its raw text (``base`` statuses).

The helpers shared with the OpenAI-compatible backend (answer parsing, retry policy, bounded
concurrency) live here too.

Environment: ``OLLAMA_HOST`` (read by the official client; default ``127.0.0.1:11434``) and
``OLLAMA_API_KEY`` (optional bearer token, also read by the client).
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import ollama

from checkworthy.scorers.base import NOT_A_NUMBER, UNPARSEABLE, Score, check_score
from checkworthy.scorers.prompt import (
    DEFAULT_GUIDELINES,
    PREFILL,
    SCORE_TERMINATORS,
    Guidelines,
    build_prompt,
    load_guidelines,
    parse_score,
    prompt_version,
)

T = TypeVar("T")

SCORE_KIND = "verbalised"

#: the answer object every chat model is asked for; ``confidence_score`` first, so an answer
#: truncated inside the justification still carries its score. No minimum/maximum: not every
#: server's grammar supports them, and the parser checks the range itself.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "confidence_score": {"type": "number"},
        "justification": {"type": "string"},
    },
    "required": ["confidence_score", "justification"],
    "additionalProperties": False,
}

# --------------------------------------------------------------------------- shared LLM helpers


class BackendError(RuntimeError):
    """The service kept failing after all retries: nothing is stored for the chunk (worth retrying
    later; the flows' ``retry_model`` retries a ``RuntimeError``)."""


class BackendConfigError(BackendError, ValueError):
    """The service refuses the request itself (unknown model, bad key, unsupported option): retrying
    cannot help, so it is also a ``ValueError`` (which the flows do not retry)."""


def chat_prompt(claim: str, guidelines: Guidelines) -> str:
    """The prompt for a model that writes the whole JSON answer: ``build_prompt`` minus the pre-fill.

    Built from ``build_prompt`` itself, so the claim goes through the same neutralisation and the
    same statement slot as for the embedded model.
    """
    full = build_prompt(claim, guidelines)
    if not full.endswith(PREFILL):
        raise AssertionError("prompt.build_prompt no longer ends with PREFILL")
    return full.removesuffix(PREFILL).rstrip()


_SCORE_KEY = re.compile(r'"confidence_score"\s*:\s*')
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse_answer(raw: str) -> tuple[float | None, str]:
    """The score in a model's JSON answer; never invents one.

    1. The whole answer (code fences removed) or the object starting at its first ``{`` parsed as
       JSON: ``confidence_score`` must be a JSON number (not a string, bool or null) in [0, 1].
    2. Otherwise (truncated or malformed JSON) the value after the *first* ``"confidence_score":``
       is read with :func:`prompt.parse_score` (same rules as the pre-filled embedded model).
    3. No such key: ``unparseable``.
    Only the first answer object counts: JSON-looking text later in the output (say a claim quoted
    in the justification) cannot override it.
    """
    text = _FENCE.sub("", raw.strip())
    obj = _first_object(text)
    if obj is not None and "confidence_score" in obj:
        return check_value(obj["confidence_score"])
    match = _SCORE_KEY.search(text)
    if match:
        return parse_score(text[match.end():])
    return None, UNPARSEABLE


def _first_object(text: str) -> dict[str, Any] | None:
    start = text.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except (json.JSONDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def check_value(value: Any) -> tuple[float | None, str]:
    """A decoded JSON value as a score: a finite number in [0, 1], else the failure status."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None, NOT_A_NUMBER
    return check_score(float(value))


def clean_raw(text: str) -> str:
    """Raw output as storable text (Postgres text cannot hold NUL)."""
    return text.replace("\x00", "\ufffd")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry a failing service call.

    Exponential backoff ``backoff * 2**attempt`` (halved at random, capped at ``backoff_max``)
    unless the server says how long to wait (``Retry-After``); a wait longer than
    ``max_retry_after`` (a spent daily quota, say) is not waited for: the call fails.
    """

    max_retries: int = 4
    backoff: float = 0.5
    backoff_max: float = 30.0
    max_retry_after: float = 120.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return max(0.0, retry_after)
        base = min(self.backoff_max, self.backoff * 2**attempt)
        return base * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class Retry:
    """A retryable failure and the wait the server asked for, if any."""

    reason: str
    retry_after: float | None = None


class Gate:
    """A pause shared by all workers: one 429 with ``Retry-After`` holds back every request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until = 0.0

    def hold(self, seconds: float) -> None:
        with self._lock:
            self._until = max(self._until, time.monotonic() + seconds)

    def wait(self) -> None:
        while (left := self._until - time.monotonic()) > 0:
            time.sleep(left)


def call_with_retries(
    fn: Callable[[], T],
    classify: Callable[[BaseException], Retry | None],
    policy: RetryPolicy,
    gate: Gate,
    what: str,
) -> tuple[T, int]:
    """``fn()`` and the number of attempts it took; :class:`BackendError` once retries are spent.

    ``classify`` maps an exception to a :class:`Retry` (transient) or ``None`` (re-raised as is).
    """
    for attempt in range(policy.max_retries + 1):
        gate.wait()
        try:
            return fn(), attempt + 1
        except Exception as exc:  # noqa: BLE001 - classify decides
            retry = classify(exc)
            if retry is None:
                raise
            if retry.retry_after is not None and retry.retry_after > policy.max_retry_after:
                raise BackendError(f"{what}: {retry.reason}; server asks to wait "
                                   f"{retry.retry_after:.0f} s (> {policy.max_retry_after:.0f} s)") from exc
            if attempt == policy.max_retries:
                raise BackendError(f"{what}: {retry.reason} (gave up after {attempt + 1} attempts)") from exc
            wait = policy.delay(attempt, retry.retry_after)
            if retry.retry_after is not None:
                gate.hold(wait)
            else:
                time.sleep(wait)
    raise AssertionError("unreachable")


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``retry-after`` (seconds or an HTTP date)."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def run_bounded(fn: Callable[[Any], T], items: Sequence[Any], concurrency: int) -> list[T]:
    """``[fn(x) for x in items]`` with at most ``concurrency`` calls in flight, order kept.

    The first exception cancels the calls not yet started and is raised.
    """
    if concurrency <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items)), thread_name_prefix="scorer") as pool:
        futures = [pool.submit(fn, x) for x in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            for f in futures:
                f.cancel()
            raise


# --------------------------------------------------------------------------- Ollama


@dataclass(frozen=True)
class Sampling:
    """Ollama sampling options."""

    temperature: float
    top_k: int
    top_p: float


#: the paper's Ollama settings (size tag -> sampling); other models get ``DEFAULT_SAMPLING``
PAPER_SAMPLING = {
    "270m": Sampling(0.8, 64, 0.95),
    "1b": Sampling(1.0, 64, 0.95),
    "4b": Sampling(1.0, 64, 0.95),
}
#: Gemma's recommended settings (= the paper's 1B/4B), recorded explicitly for any other model so
#: the scores never depend on a server-side Modelfile default
DEFAULT_SAMPLING = Sampling(1.0, 64, 0.95)
#: the paper's appendix ablation
ABLATION_T01 = Sampling(0.1, 64, 0.95)
_GEMMA3 = re.compile(r"^(?:[\w.-]+/)*gemma3:(270m|1b|4b)(?:-[\w.-]+)?$")

MODES = ("chat", "generate", "raw")
#: Ollama accepted JSON schemas in ``format`` from this version on
SCHEMA_SINCE = (0, 5, 0)


def paper_sampling(model: str, preset: str = "paper") -> tuple[Sampling, str]:
    """The sampling a model gets under a preset, and the preset name actually applied."""
    if preset == "t0.1":
        return ABLATION_T01, "t0.1"
    if preset != "paper":
        raise ValueError(f"unknown sampling preset {preset!r} (paper, t0.1)")
    match = _GEMMA3.match(model)
    if match:
        return PAPER_SAMPLING[match.group(1)], "paper"
    return DEFAULT_SAMPLING, "default"


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", version.split("-")[0])[:3]
    return tuple(int(p) for p in parts) if parts else (0,)


class OllamaScorer:
    """Verbalised check-worthiness scores from a model served by Ollama (``ollama:<model>``)."""

    score_kinds = (SCORE_KIND,)

    def __init__(
        self,
        model: str,
        *,
        host: str | None = None,
        mode: str = "chat",
        sampling: str = "paper",
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int | None = 0,
        num_predict: int | None = None,
        num_ctx: int | None = None,
        structured: str = "auto",
        stream: bool = False,
        concurrency: int = 4,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        keep_alive: str | float | None = None,
        guidelines_path: str | Path = DEFAULT_GUIDELINES,
    ) -> None:
        if not model:
            raise ValueError("ollama: needs a model name, e.g. ollama:gemma3:1b")
        if mode not in MODES:
            raise ValueError(f"ollama: unknown mode {mode!r} ({', '.join(MODES)})")
        if structured not in ("auto", "schema", "json", "none"):
            raise ValueError(f"ollama: structured must be auto, schema, json or none, not {structured!r}")
        self.model = model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"
        self.spec = f"ollama:{model}"
        self.mode = mode
        preset, self.sampling_preset = paper_sampling(self.model, sampling)
        self.sampling = Sampling(
            preset.temperature if temperature is None else float(temperature),
            preset.top_k if top_k is None else int(top_k),
            preset.top_p if top_p is None else float(top_p),
        )
        if (temperature, top_k, top_p) != (None, None, None):
            self.sampling_preset += "+override"
        self.seed = seed
        self.num_predict = num_predict if num_predict is not None else (8 if mode == "raw" else 256)
        self.num_ctx = num_ctx
        self.structured = "none" if mode == "raw" else structured
        self.stream = bool(stream)
        self.concurrency = max(1, int(concurrency))
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()
        self.keep_alive = keep_alive
        self.guidelines = load_guidelines(guidelines_path)
        self.prompt_version = prompt_version(guidelines_path)
        self._client = ollama.Client(host=host, timeout=httpx.Timeout(self.timeout, connect=connect_timeout))
        self._gate = Gate()
        self._server: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # ---- identity -----------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        """Server version, whether it takes JSON schemas, and the model's digest (asked once)."""
        with self._lock:
            if self._server is None:
                self._server = self._probe()
            return self._server

    def _probe(self) -> dict[str, Any]:
        def version() -> str:
            return str(self._client._request_raw("GET", "/api/version").json().get("version", ""))

        retry, gate = self.retry, self._gate
        server_version, _ = call_with_retries(version, _classify, retry, gate, "ollama /api/version")
        tags, _ = call_with_retries(self._client.list, _classify, retry, gate, "ollama /api/tags")
        entry = next((m for m in tags.models if m.model == self.model), None)
        if entry is None:
            names = ", ".join(sorted(m.model or "?" for m in tags.models)) or "none"
            raise BackendConfigError(f"model {self.model!r} is not on the Ollama server (it has: {names}); "
                               f"run `ollama pull {self.model}`")
        details = entry.details
        return {
            "version": server_version,
            "schema": _version_tuple(server_version) >= SCHEMA_SINCE,
            "digest": entry.digest or "",
            "quantization": (details.quantization_level if details else None) or "",
        }

    def _format(self) -> str | dict[str, Any] | None:
        if self.structured == "none":
            return None
        if self.structured == "json" or (self.structured == "auto" and not self.server_info()["schema"]):
            return "json"
        return ANSWER_SCHEMA

    def params(self) -> dict[str, Any]:
        """What determines the scores (not host, concurrency, timeouts, streaming or keep-alive)."""
        info = self.server_info()
        fmt = self._format()
        params: dict[str, Any] = {
            "backend": "ollama",
            "model": self.model,
            "model_digest": info["digest"],
            "quantization": info["quantization"],
            "mode": self.mode,
            "format": "none" if fmt is None else ("json" if fmt == "json" else "json_schema"),
            "temperature": self.sampling.temperature,
            "top_k": self.sampling.top_k,
            "top_p": self.sampling.top_p,
            "seed": self.seed,
            "num_predict": self.num_predict,
            "num_ctx": self.num_ctx,
            "sampling_preset": self.sampling_preset,
            "prompt_version": self.prompt_version,
        }
        if self.mode == "raw":
            params["prefill"] = PREFILL
            params["stop"] = list(SCORE_TERMINATORS)
        return params

    # ---- scoring ------------------------------------------------------------------------------

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Score texts with at most ``concurrency`` requests in flight; output order = input order."""
        self.server_info()
        return [{SCORE_KIND: s} for s in run_bounded(self.score_one, list(texts), self.concurrency)]

    def options(self) -> dict[str, Any]:
        """The ``options`` object sent with every request."""
        opts: dict[str, Any] = {
            "temperature": self.sampling.temperature,
            "top_k": self.sampling.top_k,
            "top_p": self.sampling.top_p,
            "num_predict": self.num_predict,
        }
        if self.seed is not None:
            opts["seed"] = int(self.seed)
        if self.num_ctx is not None:
            opts["num_ctx"] = int(self.num_ctx)
        if self.mode == "raw":
            opts["stop"] = list(SCORE_TERMINATORS)
        return opts

    def score_one(self, claim: str) -> Score:
        """One request, retried while the service fails; the answer parsed, never invented."""
        (text, final), attempts = call_with_retries(
            lambda: self._request(claim), _classify, self.retry, self._gate, f"ollama {self.model}"
        )
        usage = {
            "prompt_eval_count": final.get("prompt_eval_count"),
            "eval_count": final.get("eval_count"),
            "total_duration_ns": final.get("total_duration"),
            "done_reason": final.get("done_reason"),
            "attempts": attempts,
        }
        score, status = parse_score(text) if self.mode == "raw" else parse_answer(text)
        return Score(score, status, clean_raw(text), usage)

    def _request(self, claim: str) -> tuple[str, dict[str, Any]]:
        """(generated text, final response fields) of one call, streamed or not."""
        common: dict[str, Any] = {"options": self.options(), "stream": self.stream}
        if self.keep_alive is not None:
            common["keep_alive"] = self.keep_alive
        if self.mode == "chat":
            messages = [{"role": "user", "content": chat_prompt(claim, self.guidelines)}]
            result = self._client.chat(self.model, messages, format=self._format(), **common)
        elif self.mode == "generate":
            result = self._client.generate(self.model, chat_prompt(claim, self.guidelines),
                                           format=self._format(), **common)
        else:
            result = self._client.generate(self.model, build_prompt(claim, self.guidelines), raw=True,
                                           **common)
        parts: Iterable[Any] = result if self.stream else [result]
        pieces: list[str] = []
        final: dict[str, Any] = {}
        deadline = time.monotonic() + self.timeout
        for part in parts:
            pieces.append(_piece(part))
            if part.done:
                final = part.model_dump()
            if self.stream and time.monotonic() > deadline:
                raise _Incomplete(f"stream still running after {self.timeout:.0f} s")
        if not final:
            raise _Incomplete("response ended before done=true")
        return "".join(pieces), final


def _piece(part: Any) -> str:
    message = getattr(part, "message", None)
    if message is not None:
        return message.content or ""
    return getattr(part, "response", None) or ""


class _Incomplete(Exception):
    """A (streamed) response that ended or stalled before ``done``."""


_RETRY_STATUS = {408, 429, 500, 502, 503, 504}


def _classify(exc: BaseException) -> Retry | None:
    """Transient Ollama failures: timeouts, lost connections, 429/5xx, errors mid-stream."""
    if isinstance(exc, httpx.TimeoutException):
        return Retry(f"timeout ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError | ConnectionError):
        return Retry(f"connection failed ({exc})")
    if isinstance(exc, _Incomplete):
        return Retry(str(exc))
    if isinstance(exc, json.JSONDecodeError):
        return Retry(f"garbled response line ({exc})")
    if isinstance(exc, ollama.ResponseError):
        if exc.status_code == -1 or exc.status_code in _RETRY_STATUS:
            return Retry(f"HTTP {exc.status_code}: {exc.error}")
        raise BackendConfigError(f"ollama refused the request: HTTP {exc.status_code}: {exc.error}") from exc
    return None
