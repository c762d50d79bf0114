"""Model specs to scorers: ``embedded:gemma3-270m``, ``embedded:gemma3-270m-fewshot``,
``ollama:gemma3:1b``, ``openai:<deployment>``, ``classifier:<name>``, ``ensemble:<name>+<name>``
(trained classifiers together), ``file:<path>``.

``make_scorer`` returns the scorer and its prompt identity ``(version, guidelines text,
template version)``; scorers that use no prompt get version ``"none"``. ``configured_scorer``
builds one from a params.yaml ``models:`` entry, named by its identity (its ``name:``, else
``spec#sampling``): the one place scorer options are merged.
Backends are imported when a spec names them: each pulls in a heavy library (torch and
transformers, the Ollama or OpenAI client), and start-up stays fast without them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from checkworthy.config import model_name
from checkworthy.scorers import fewshot_prompt, prompt
from checkworthy.scorers.base import Scorer
from checkworthy.scorers.classifier import (
    ADAPTER_TYPES,
    ARTEFACT_ROOT,
    CROSSFIT,
    ClassifierScorer,
    model_type,
)
from checkworthy.scorers.ensemble import EnsembleScorer
from checkworthy.scorers.file_scorer import FileScorer
from checkworthy.scorers.http_retry import RetryPolicy
from checkworthy.scorers.sampling_presets import GREEDY, Sampling, paper_sampling

PromptInfo = tuple[str, str, str]
NO_PROMPT: PromptInfo = ("none", "", "")
ScorerFactory = Callable[..., tuple[Scorer, PromptInfo]]
#: model kinds (the ``kind`` of ``kind:name``) added at run time, beside the built-in ones
FACTORIES: dict[str, ScorerFactory] = {}


def prompt_info(guidelines_path: str | Path | None = None) -> PromptInfo:
    """The prompt version of a guidelines file, with its text, for the store."""
    path = Path(guidelines_path or prompt.DEFAULT_GUIDELINES)
    return prompt.prompt_version(path), path.read_text(encoding="utf-8"), prompt.TEMPLATE_VERSION


def model_entry(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``models:`` entry called ``name`` (:func:`checkworthy.config.model_name`); a spec no entry
    is called is an entry of its own, with no options (``score --model SPEC``)."""
    for entry in params.get("models") or []:
        if model_name(entry) == name:
            return dict(entry)
    return {"spec": name}


def model_options(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A pass's options from params (as :func:`checkworthy.config.load_params` reads them, so
    ``extends:`` holds): ``scoring:`` first, then its own ``models:`` entry on top, never another
    entry of the same spec."""
    entry = model_entry(params, name)
    return dict(params.get("scoring") or {}) | {k: v for k, v in entry.items() if k not in ("spec", "name")}


def configured_scorer(params: Mapping[str, Any], name: str, **overrides: Any) -> tuple[Scorer, PromptInfo]:
    """The scorer of the ``models:`` entry ``name`` (or of a bare spec) with its options from params,
    then ``overrides`` (e.g. guidelines)."""
    spec = model_entry(params, name)["spec"]
    options = model_options(params, name) | overrides
    factory = FACTORIES.get(spec.partition(":")[0], make_scorer)
    return factory(spec, **options)


def make_scorer(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """Build the scorer a spec names; ``options`` come from params.yaml (unknown ones ignored)."""
    kind, _, name = spec.partition(":")
    guidelines = options.get("guidelines")
    if kind == "embedded":
        if name not in ("gemma3-270m", "gemma3-270m-fewshot"):
            raise ValueError(f"unknown embedded model {name!r} (available: gemma3-270m, gemma3-270m-fewshot)")
        if name == "gemma3-270m-fewshot":
            from checkworthy.scorers.fewshot_gemma import FewShotGemmaScorer  # start-up: torch, transformers

            paths = (guidelines or prompt.DEFAULT_GUIDELINES,
                     options.get("demonstrations") or fewshot_prompt.DEFAULT_DEMONSTRATIONS)
            scorer = FewShotGemmaScorer(progress=False, guidelines_path=paths[0],
                                        demonstrations_path=paths[1],
                                        **{k: options[k] for k in ("batch_size",) if k in options})
            # the store keeps the rendered prefix: demonstrations and guidelines as the model read them
            return scorer, (fewshot_prompt.prompt_version(*paths), fewshot_prompt.build_prefix(*paths),
                            f"fewshot-{fewshot_prompt.TEMPLATE_VERSION}")
        from checkworthy.scorers.embedded_gemma import (  # start-up: torch, transformers
            PAPER,
            EmbeddedGemmaScorer,
        )

        kwargs: dict[str, Any] = {k: options[k] for k in ("batch_size", "seed") if k in options}
        kwargs["token_prob_only"] = options.get("mode") == "token_prob"
        temperature = options.get("temperature")
        if temperature is None and options.get("sampling") not in (None, "paper"):
            temperature = paper_sampling("gemma3:270m", options["sampling"])[0].temperature  # same presets
        if temperature is not None:
            kwargs["sampling"] = GREEDY if temperature == 0 else Sampling(
                temperature=float(temperature), top_k=PAPER.top_k, top_p=PAPER.top_p)
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return EmbeddedGemmaScorer(progress=False, **kwargs), prompt_info(guidelines)
    if kind == "ollama":
        from checkworthy.scorers.ollama_backend import OllamaScorer  # start-up: ollama client

        kwargs = _pick(options, "host", "mode", "sampling", "temperature", "top_k", "top_p", "seed",
                       "num_predict", "num_ctx", "structured", "stream", "concurrency", "timeout",
                       "connect_timeout", "keep_alive")
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return OllamaScorer(name, retry=_retry_policy(options), **kwargs), prompt_info(guidelines)
    if kind == "openai":
        from checkworthy.scorers.openai_backend import OpenAIScorer  # start-up: openai client

        kwargs = _pick(options, "api", "api_version", "base_url", "temperature", "top_p", "seed",
                       "max_tokens", "reasoning_effort", "response_format", "stream", "concurrency",
                       "timeout")
        if guidelines:
            kwargs["guidelines_path"] = guidelines
        return OpenAIScorer(name or None, retry=_retry_policy(options), **kwargs), prompt_info(guidelines)
    if kind == "classifier":
        if not name:
            raise ValueError("classifier: needs an artefact name, e.g. classifier:minilm-lr[@<version>]")
        kwargs = _pick(options, "root", "batch_size")
        mtype = model_type(name, Path(kwargs.get("root", ARTEFACT_ROOT)))
        if mtype in ADAPTER_TYPES:
            from checkworthy.scorers.lora_classifier import LoraClassifierScorer  # start-up: torch, peft

            if mtype == CROSSFIT:  # a lineage's adapted model: each labelled text scored out of fold
                from checkworthy.scorers.crossfit import load_crossfit  # start-up: torch, peft

                kwargs["load"] = load_crossfit
            return LoraClassifierScorer(name, **kwargs), NO_PROMPT
        return ClassifierScorer(name, **kwargs), NO_PROMPT
    if kind == "ensemble":
        refs = [r.strip() for r in name.split("+")]
        if len(refs) < 2 or not all(refs):
            raise ValueError(f"{spec!r}: an ensemble names two or more classifiers, e.g. "
                             "ensemble:minilm-lora+gemma-lora")
        members = [make_scorer(f"classifier:{r}", **options)[0] for r in refs]
        return EnsembleScorer(spec, members), NO_PROMPT
    if kind == "file":
        if not name:
            raise ValueError("file: needs a CSV path, e.g. file:scores/gpt.csv")
        return FileScorer(name, **_pick(options, "score_kind", "score_column")), NO_PROMPT
    raise ValueError(f"unknown model spec {spec!r}: expected embedded:, ollama:, openai:, classifier:, "
                     "ensemble: or file:")


def _pick(options: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The options a backend understands (params.yaml may hold settings meant for other backends)."""
    return {k: options[k] for k in keys if options.get(k) is not None}


def _retry_policy(options: dict[str, Any]) -> RetryPolicy:
    """A ``RetryPolicy`` from ``max_retries``, ``backoff``, ``backoff_max``, ``max_retry_after``."""
    return RetryPolicy(**_pick(options, "max_retries", "backoff", "backoff_max", "max_retry_after"))
