"""Model specs to scorers: ``embedded:gemma3-270m``, ``ollama:gemma3:1b``, ``openai:<deployment>``,
``classifier:<name>``, ``file:<path>``.

``make_scorer`` returns the scorer and its prompt identity ``(version, guidelines text,
template version)``; scorers that use no prompt get version ``"none"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkworthy.scorers.base import Scorer

PromptInfo = tuple[str, str, str]
NO_PROMPT: PromptInfo = ("none", "", "")


def prompt_info(guidelines_path: str | Path | None = None) -> PromptInfo:
    """The prompt version of a guidelines file, with its text, for the store."""
    from checkworthy.scorers import prompt

    path = Path(guidelines_path or prompt.DEFAULT_GUIDELINES)
    return prompt.prompt_version(path), path.read_text(encoding="utf-8"), prompt.TEMPLATE_VERSION


def make_scorer(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """Build the scorer a spec names; ``options`` come from params.yaml (unknown ones ignored)."""
    kind, _, name = spec.partition(":")
    guidelines = options.get("guidelines")
    if kind == "embedded":
        from checkworthy.scorers.embedded_gemma import EmbeddedGemmaScorer

        if name != "gemma3-270m":
            raise ValueError(f"unknown embedded model {name!r} (available: gemma3-270m)")
        from checkworthy.scorers.embedded_gemma import GREEDY, PAPER, Sampling

        kwargs: dict[str, Any] = {k: options[k] for k in ("batch_size", "seed") if k in options}
        kwargs["token_prob_only"] = options.get("mode") == "token_prob"
        temperature = options.get("temperature")
        if temperature is None and options.get("sampling") not in (None, "paper"):
            from checkworthy.scorers.ollama_backend import paper_sampling

            temperature = paper_sampling("gemma3:270m", options["sampling"])[0].temperature  # same presets
        if temperature is not None:
            kwargs["sampling"] = GREEDY if temperature == 0 else Sampling(
                temperature=float(temperature), top_k=PAPER.top_k, top_p=PAPER.top_p)
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return EmbeddedGemmaScorer(progress=False, **kwargs), prompt_info(guidelines)
    if kind == "ollama":
        from checkworthy.scorers.ollama_backend import OllamaScorer

        kwargs = _pick(options, "host", "mode", "sampling", "temperature", "top_k", "top_p", "seed",
                       "num_predict", "num_ctx", "structured", "stream", "concurrency", "timeout",
                       "connect_timeout", "keep_alive")
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return OllamaScorer(name, retry=_retry_policy(options), **kwargs), prompt_info(guidelines)
    if kind == "openai":
        from checkworthy.scorers.openai_backend import OpenAIScorer

        kwargs = _pick(options, "api", "api_version", "base_url", "temperature", "top_p", "seed",
                       "max_tokens", "reasoning_effort", "response_format", "stream", "concurrency",
                       "timeout")
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return OpenAIScorer(name or None, retry=_retry_policy(options), **kwargs), prompt_info(guidelines)
    if kind == "classifier":
        from checkworthy.scorers.classifier import ClassifierScorer

        if not name:
            raise ValueError("classifier: needs an artefact name, e.g. classifier:minilm-lr[@<version>]")
        return ClassifierScorer(name, **_pick(options, "root", "batch_size")), NO_PROMPT
    if kind == "file":
        from checkworthy.scorers.file_scorer import FileScorer

        if not name:
            raise ValueError("file: needs a CSV path, e.g. file:scores/gpt.csv")
        return FileScorer(name, **_pick(options, "score_kind", "score_column")), NO_PROMPT
    raise ValueError(f"unknown model spec {spec!r}: expected embedded:, ollama:, openai:, classifier: "
                     "or file:")


def _pick(options: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The options a backend understands (params.yaml may hold settings meant for other backends)."""
    return {k: options[k] for k in keys if options.get(k) is not None}


def _retry_policy(options: dict[str, Any]) -> Any:
    """A ``RetryPolicy`` from ``max_retries``, ``backoff``, ``backoff_max``, ``max_retry_after``."""
    from checkworthy.scorers.ollama_backend import RetryPolicy

    return RetryPolicy(**_pick(options, "max_retries", "backoff", "backoff_max", "max_retry_after"))
