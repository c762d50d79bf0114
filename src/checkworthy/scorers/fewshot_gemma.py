"""Gemma 3 270M as a few-shot classifier: ``P(Yes) / (P(Yes) + P(No))`` after the few-shot prompt.

The embedded scorer's machinery (:class:`checkworthy.scorers.embedded_gemma.EmbeddedGemmaScorer`:
the shared prefix cache computed once, left-padded suffixes batched by length, masks from true
positions) with :mod:`checkworthy.scorers.fewshot_prompt` instead of the scoring prompt, and no
decoding: one forward pass per batch, two rows of the LM head. The score kind is ``p_yes``; it has
no sampling, so it does not depend on the batch, the seed or the temperature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from checkworthy.scorers.base import OK, Score
from checkworthy.scorers.embedded_gemma import EmbeddedGemmaScorer, GemmaOptions
from checkworthy.scorers.fewshot_prompt import (
    DEFAULT_DEMONSTRATIONS,
    NO,
    YES,
    build_prefix,
    build_suffix,
    demonstration_params,
    prompt_version,
)
from checkworthy.scorers.prompt import DEFAULT_GUIDELINES

SPEC = "embedded:gemma3-270m-fewshot"
P_YES = "p_yes"


class FewShotGemmaScorer(EmbeddedGemmaScorer):
    """Scores claims with the base Gemma 3 270M shown labelled sentences; yields ``p_yes``."""

    spec = SPEC

    def __init__(self, options: GemmaOptions | None = None, *,
                 demonstrations_path: str | Path = DEFAULT_DEMONSTRATIONS,
                 guidelines_path: str | Path = DEFAULT_GUIDELINES, **loading: Any) -> None:
        """``options``: only ``batch_size`` and ``max_claim_tokens`` matter (no decoding);
        ``loading``: :class:`EmbeddedGemmaScorer`'s ``progress``, ``num_threads``, ``model_dir``."""
        self.demonstrations_path = Path(demonstrations_path)
        options = replace(options or GemmaOptions(), token_prob_only=True)
        super().__init__(options, guidelines_path=guidelines_path, **loading)
        self.score_kinds = (P_YES,)
        self.prompt_version = prompt_version(guidelines_path, demonstrations_path)
        self._answer = [self._single(YES), self._single(NO)]

    def prefix_text(self, guidelines_path: str | Path) -> str:
        """Header and demonstrations (:func:`checkworthy.scorers.fewshot_prompt.build_prefix`)."""
        return build_prefix(guidelines_path, self.demonstrations_path)

    def suffix_text(self, text: str) -> str:
        """The claim and ``Check-worthy:``."""
        return build_suffix(text)

    def params(self) -> dict[str, Any]:
        """Model file, prompt version and where the demonstrations came from."""
        return {**self._model_id, "dtype": "float32", "prompt_version": self.prompt_version,
                "score": "P(Yes)/(P(Yes)+P(No)) of the next token", "answer_tokens": [YES, NO],
                "max_claim_tokens": self.options.max_claim_tokens,
                **demonstration_params(self.demonstrations_path)}

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """One forward pass per batch of similar length; output order = input order."""
        suffixes = [self.encode_suffix(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(suffixes[i][0]))
        results: list[dict[str, Score]] = [{} for _ in texts]
        report = self._progress_reporter(len(texts))
        head = self.model.lm_head.weight[self._answer]
        with torch.inference_mode():
            for start in range(0, len(order), self.options.batch_size):
                idx = order[start : start + self.options.batch_size]
                hidden, _ = self._first_pass([suffixes[i][0] for i in idx])
                logits = self._softcap(torch.nn.functional.linear(hidden[:, 0], head))
                p_yes = torch.softmax(logits.double(), dim=-1)[:, 0].tolist()
                for i, p in zip(idx, p_yes, strict=True):
                    usage = {"prompt_tokens": len(self.prefix_ids) + len(suffixes[i][0]),
                             "truncated": suffixes[i][1]}
                    results[i] = {P_YES: Score(float(p), OK, f"{p:.6f}", usage)}
                report(len(idx))
        report(0, close=True)
        return results

    def _single(self, text: str) -> int:
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        if len(ids) != 1:
            raise ValueError(f"expected {text!r} to be one Gemma token, got {ids}")
        return int(ids[0])
