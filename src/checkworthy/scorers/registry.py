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
    from checkworthy import prompt

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
        kwargs = {k: options[k] for k in ("batch_size", "temperature", "seed", "mode") if k in options}
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return EmbeddedGemmaScorer(**kwargs), prompt_info(guidelines)
    raise ValueError(f"unknown model spec {spec!r}: expected embedded:, ollama:, openai:, classifier: or file:")
