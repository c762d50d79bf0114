"""Gemma 3 270M (base model, GGUF Q4_K_M de-quantised to fp32) scoring claims in-process on CPU.

Why it is shaped like this:

* The model is a BASE model, so the prompt ends with the pre-fill ``{"confidence_score": `` and we
  decode only the number: stop at ``,``, ``}``, newline, EOS, ``max_new_tokens`` or once the number
  has ``max_decimals`` decimals (default 2, the precision of the few-shot examples: a further digit
  would cost a whole decode step to move the score by < 0.01). The justification is never
  generated: it would cost ~30 more decode steps per claim on 2 CPU cores.
* The prompt prefix (role, criteria, task, examples) is the same for every claim: its KV cache is
  computed once per scorer and shared by every batch. A custom attention function
  (:mod:`checkworthy.scorers.prefix_attention`) attends to that single copy, so the prefix is never
  copied per row and its one KV head is never repeated per query head; each row's cache holds only
  its own suffix and answer tokens.
* Suffixes are LEFT-padded, with explicit position ids and boolean masks built from true token
  positions (so padding changes nothing, also for the sliding-window layers on claims long enough
  to pass Gemma 3's 512-token window). Every row ends with the pre-fill and a teacher-forced ``0.``,
  so one forward pass yields (a) the distribution of the first answer token, (b) the one after
  ``0`` and (c) the one after ``0.``. (a)+(c) give the ``token_prob`` score; (a)-(c) also give the
  first three sampled tokens of the verbalised answer for every row whose sample agrees with the
  forced ``0.`` (nearly all), so decoding needs only 1-2 further steps. A row whose sample departs
  from ``0.`` masks out the forced slots it did not take, so its context stays exact.
* Sampling draws from a per-claim ``torch.Generator`` seeded from (seed, claim text): a claim's
  score does not depend on which other claims share its batch. Rows that have finished are dropped
  from the batch at once.
* Scorers that differ only in how they sample (the paper's T = 0.8 and the ablation's T = 0.1) need
  the same forward passes: :meth:`EmbeddedGemmaScorer.score_alongside` runs each batch's once for
  all of them, each sampling from its own copy of the batch's cache, so each gets exactly the
  scores it gets alone. The forward pass on the suffix is ~85% of a claim's cost: the two passes
  together cost ~60% of the two apart.

The weights are the packaged GGUF de-quantised once (:mod:`checkworthy.scorers.gguf_weights`); the
attention kernel is :mod:`checkworthy.scorers.prefix_attention`, switched on when the model loads.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from checkworthy.scorers.base import NOT_A_NUMBER, OK, Score
from checkworthy.scorers.gguf_weights import load_model
from checkworthy.scorers.prefix_attention import use_shared_prefix_attention
from checkworthy.scorers.prompt import (
    DEFAULT_GUIDELINES,
    PREFILL,
    SCORE_TERMINATORS,
    build_prefix,
    build_suffix,
    load_guidelines,
    parse_score,
    prompt_version,
)
from checkworthy.scorers.sampling_presets import PAPER_SAMPLING, Sampling

if TYPE_CHECKING:
    from transformers import DynamicCache

SPEC = "embedded:gemma3-270m"
#: bump when the token_prob formula changes
TOKEN_PROB_FORMULA = "ev1-midpoint"

Progress = Callable[[int, int], None]
_DECIMALS = re.compile(r"\s*[+-]?\d+\.(\d+)")
#: the paper's Ollama settings for Gemma 3 270M (the default: reproduce the paper)
PAPER = PAPER_SAMPLING["270m"]


@dataclass(frozen=True)
class GemmaOptions:
    """How the embedded scorer scores: sampling and decoding (``sampling``, ``seed``,
    ``max_new_tokens``, ``max_decimals``), ``token_prob_only`` (no decoding at all),
    ``min_digit_mass`` (below it ``token_prob`` is ``not_a_number``), ``max_claim_tokens`` (a
    longer claim is truncated) and ``batch_size`` (the one option that changes no score)."""

    sampling: Sampling = PAPER
    seed: int = 0
    max_new_tokens: int = 8
    max_decimals: int | None = 2
    batch_size: int = 16
    token_prob_only: bool = False
    min_digit_mass: float = 0.05
    max_claim_tokens: int = 1024


def claim_seed(seed: int, text: str) -> int:
    """A per-claim RNG seed: depends only on (seed, claim), never on batch composition."""
    digest = hashlib.sha256(f"{seed}\x1f{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def sample_token(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> int:
    """One token from a 1-D logits row: top-k, then temperature, then top-p (nucleus)."""
    if sampling.temperature <= 0:
        return int(torch.argmax(logits))
    k = sampling.top_k if 0 < sampling.top_k < logits.numel() else logits.numel()
    values, indices = torch.topk(logits, k)
    probs = torch.softmax(values / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        keep = (torch.cumsum(probs, dim=-1) - probs) < sampling.top_p
        probs, indices = probs[keep], indices[keep]
    return int(indices[torch.multinomial(probs, 1, generator=generator)])


@dataclass
class _Row:
    """Decoding state of one claim in a batch."""

    generator: torch.Generator
    suffix_len: int
    tokens: list[int] = field(default_factory=list)
    done: bool = False


@dataclass
class _KV:
    """A batch's KV cache plus, per cache slot, its token position and whether it may be attended."""

    cache: DynamicCache
    pos: torch.Tensor  # (batch, slots) true token positions
    valid: torch.Tensor  # (batch, slots) False for padding and for forced tokens a row did not take

    def append(self, pos: torch.Tensor, valid: torch.Tensor) -> None:
        self.pos, self.valid = torch.cat([self.pos, pos], dim=1), torch.cat([self.valid, valid], dim=1)

    def copy(self) -> _KV:
        """An independent copy: decoding appends to and selects from its own cache only."""
        return _KV(copy.deepcopy(self.cache), self.pos.clone(), self.valid.clone())

    def select(self, rows: list[int]) -> None:
        index = torch.tensor(rows)
        self.cache.batch_select_indices(index)
        self.pos, self.valid = self.pos[index], self.valid[index]


class EmbeddedGemmaScorer:
    """Scores claims with Gemma 3 270M in-process; yields ``verbalised`` and ``token_prob`` scores.

    ``token_prob`` is the expected verbalised score under the model's own next-token distribution:
    ``(P(1) + P(0) * sum_d P(d | "0.") * (d/10 + 0.05)) / (P(0) + P(1))``, i.e. an answer starting
    with ``1`` counts as 1.0 and ``0.d`` as the middle of its tenth. It comes from the same forward
    pass as the first answer token, has no sampling noise, and is returned as ``not_a_number`` when
    less than ``min_digit_mass`` of the probability goes to ``0``/``1`` (the model wants to say
    something else). With ``token_prob_only=True`` no decoding is done at all (fastest mode).
    """

    spec = SPEC

    def __init__(
        self,
        options: GemmaOptions = GemmaOptions(),
        *,
        guidelines_path: str | Path = DEFAULT_GUIDELINES,
        progress: bool | Progress = True,
        num_threads: int | None = None,
        model_dir: Path | None = None,
    ) -> None:
        if num_threads:
            torch.set_num_threads(num_threads)
        self.options = options
        self.score_kinds = ("token_prob",) if options.token_prob_only else ("verbalised", "token_prob")
        self.progress = progress
        self.prompt_version = prompt_version(guidelines_path)
        self.model, self.tokenizer, self._model_id = load_model(model_dir)
        use_shared_prefix_attention(self.model)
        self._ids = _TokenIds(self.tokenizer)
        self.prefix_ids = self._encode(self.prefix_text(guidelines_path), bos=True)
        self._tail_ids = self._encode(self.suffix_text(""))
        self._prefix_kv = self._compute_prefix_kv()

    # ---- public API -------------------------------------------------------------------------

    def params(self) -> dict[str, Any]:
        """What determines the scores (not batch size or threads: results do not depend on them)."""
        o = self.options
        params: dict[str, Any] = {
            **self._model_id,
            "dtype": "float32",
            "prompt_version": self.prompt_version,
            "prefill": PREFILL,
            "token_prob_formula": TOKEN_PROB_FORMULA,
            "min_digit_mass": o.min_digit_mass,
            "token_prob_only": o.token_prob_only,
            "max_claim_tokens": o.max_claim_tokens,
        }
        if not o.token_prob_only:
            params |= {
                "temperature": o.sampling.temperature,
                "top_k": o.sampling.top_k,
                "top_p": o.sampling.top_p,
                "seed": o.seed,
                "max_new_tokens": o.max_new_tokens,
                "max_decimals": o.max_decimals,
                "sampler": "top_k>temperature>top_p, per-claim torch.Generator(sha256(seed, text))",
            }
        return params

    def score(self, texts: Sequence[str]) -> list[dict[str, Score]]:
        """Score texts (batched by suffix length; output order = input order)."""
        return self.score_alongside(texts, [])[0]

    def shares_passes(self, other: object) -> bool:
        """Whether ``other`` scores every text by this scorer's forward passes, differing only in
        how it samples the answer (sampling, seed, decode limits): the same model file, prompt and
        batching, so :meth:`score_alongside` can run each batch's forward pass once for both."""
        if not isinstance(other, EmbeddedGemmaScorer):
            return False
        decode_only = {"sampling", "seed", "max_new_tokens", "max_decimals"}
        mine, theirs = (
            {f.name: getattr(s.options, f.name) for f in dataclasses.fields(GemmaOptions)
             if f.name not in decode_only} for s in (self, other))
        return (mine == theirs and not self.options.token_prob_only and self._model_id == other._model_id
                and self.prefix_ids == other.prefix_ids and self.prompt_version == other.prompt_version)

    def score_alongside(self, texts: Sequence[str], others: Sequence[EmbeddedGemmaScorer]
                        ) -> list[list[dict[str, Score]]]:
        """The scores of this scorer and of each of ``others`` (which :meth:`shares_passes`), one
        list per scorer: each batch's forward pass runs once, and each scorer samples its answers
        from its own copy of the batch's cache, so each gets exactly what its own :meth:`score`
        gives (the same batches, the same operations in the same shapes)."""
        if not all(self.shares_passes(o) for o in others):
            raise ValueError("score_alongside: the other scorers must differ from this one in sampling only")
        suffixes = [self.encode_suffix(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(suffixes[i][0]))
        samplers = [self, *others]
        results: list[list[dict[str, Score]]] = [[{} for _ in texts] for _ in samplers]
        report = self._progress_reporter(len(texts))
        with torch.inference_mode():
            for start in range(0, len(order), self.options.batch_size):
                idx = order[start : start + self.options.batch_size]
                batches = self._score_batch([texts[i] for i in idx], [suffixes[i] for i in idx], samplers)
                for out, batch in zip(results, batches, strict=True):
                    for i, result in zip(idx, batch, strict=True):
                        out[i] = result
                report(len(idx))
        report(0, close=True)
        return results

    def variant(self, *, progress: bool | Progress | None = None, **changes: Any) -> EmbeddedGemmaScorer:
        """A scorer with other options (``changes``: :class:`GemmaOptions` fields) that shares this
        one's model and prefix cache."""
        other = copy.copy(self)
        other.options = dataclasses.replace(self.options, **changes)
        if progress is not None:
            other.progress = progress
        other.score_kinds = ("token_prob",) if other.options.token_prob_only else ("verbalised", "token_prob")
        return other

    def encode_suffix(self, text: str) -> tuple[list[int], bool]:
        """Token ids of the per-claim suffix, and whether the claim had to be truncated."""
        ids = self._encode(self.suffix_text(text))
        if len(ids) - len(self._tail_ids) <= self.options.max_claim_tokens:
            return ids, False
        claim_ids = self._encode(self.suffix_text(text).removesuffix(self.suffix_text("")))
        return claim_ids[: self.options.max_claim_tokens] + self._tail_ids, True

    def prefix_text(self, guidelines_path: str | Path) -> str:
        """The prompt before the claim, the same for every claim (its KV cache is computed once)."""
        return build_prefix(load_guidelines(guidelines_path))

    def suffix_text(self, text: str) -> str:
        """The prompt after the prefix: the neutralised claim and the tail whose answer is read."""
        return build_suffix(text)

    def answer_logits(self, texts: Sequence[str]) -> torch.Tensor:
        """Logits (batch, 3, vocab) after the pre-fill, after ``0`` and after ``0.``, via the
        batched prefix-cache path (exposed so tests can check it against a plain forward)."""
        with torch.inference_mode():
            hidden, _ = self._first_pass([self.encode_suffix(t)[0] for t in texts])
            return self._head(hidden)

    def full_sequence(self, text: str) -> list[int]:
        """Prefix + suffix + forced ``0.`` token ids of one claim (for uncached reference runs)."""
        return self.prefix_ids + self.encode_suffix(text)[0] + [self._ids.zero, self._ids.dot]

    # ---- forward passes ---------------------------------------------------------------------

    def _compute_prefix_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        from transformers import DynamicCache  # loaded with the model

        with torch.inference_mode():
            cache = DynamicCache()
            ids = torch.tensor([self.prefix_ids])
            self.model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return [(layer.keys[0].clone(), layer.values[0].clone()) for layer in cache.layers]

    def _batch_kv(self, size: int) -> _KV:
        """An empty per-row cache; slot bookkeeping starts with the (shared, never copied) prefix."""
        from transformers import DynamicCache  # loaded with the model

        n_prefix = len(self.prefix_ids)
        pos = torch.arange(n_prefix).expand(size, -1)
        return _KV(DynamicCache(), pos, torch.ones(size, n_prefix, dtype=torch.bool))

    def _forward(
        self, input_ids: torch.Tensor, pos: torch.Tensor, valid: torch.Tensor, kv: _KV
    ) -> torch.Tensor:
        """Hidden states of new tokens at true positions ``pos``; ``valid`` marks non-pad tokens.

        Masks are built from true token positions (not cache slots), so left padding between the
        prefix and a suffix changes nothing, also for sliding-window layers on long claims.
        """
        kv.append(pos, valid)
        distance = pos[:, :, None] - kv.pos[:, None, :]
        full = kv.valid[:, None, :] & (distance >= 0)
        sliding = full & (distance < self.model.config.sliding_window)
        masks = {"full_attention": full[:, None], "sliding_attention": sliding[:, None]}
        return self.model.model(
            input_ids=input_ids,
            attention_mask=masks,
            position_ids=pos,
            past_key_values=kv.cache,
            use_cache=True,
            shared_prefix=self._prefix_kv,
        ).last_hidden_state

    def _first_pass(self, suffixes: list[list[int]]) -> tuple[torch.Tensor, _KV]:
        """Run left-padded suffixes + forced ``0.`` on the shared prefix cache.

        Returns the final hidden states (batch, 3, hidden) after the pre-fill, after ``0`` and after
        ``0.``, and the cache (forced slots included).
        """
        rows = [s + [self._ids.zero, self._ids.dot] for s in suffixes]
        width, n_prefix = max(map(len, rows)), len(self.prefix_ids)
        pads = torch.tensor([width - len(r) for r in rows])[:, None]
        input_ids = torch.tensor([[self._ids.pad] * (width - len(r)) + r for r in rows])
        offsets = torch.arange(width) - pads
        kv = self._batch_kv(len(rows))
        hidden = self._forward(input_ids, offsets.clamp(min=0) + n_prefix, offsets >= 0, kv)
        return hidden[:, -3:], kv

    def _head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits (the 262k-row LM head is the costliest matmul per token)."""
        return self._softcap(torch.nn.functional.linear(hidden, self.model.lm_head.weight))

    def _digit_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the ten digit tokens only: enough for P(d | "0.") renormalised over digits."""
        return self._softcap(torch.nn.functional.linear(hidden, self.model.lm_head.weight[self._ids.digits]))

    def _softcap(self, logits: torch.Tensor) -> torch.Tensor:
        cap = self.model.config.final_logit_softcapping
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _step(self, tokens: list[int], positions: list[int], kv: _KV) -> torch.Tensor:
        """One decode step for the active rows; returns (rows, vocab) logits."""
        pos = torch.tensor(positions)[:, None]
        hidden = self._forward(torch.tensor(tokens)[:, None], pos, torch.ones_like(pos, dtype=torch.bool), kv)
        return self._head(hidden[:, -1])

    # ---- scoring ----------------------------------------------------------------------------

    def _score_batch(
        self, texts: list[str], suffixes: list[tuple[list[int], bool]], samplers: list[EmbeddedGemmaScorer]
    ) -> list[list[dict[str, Score]]]:
        """One batch's scores for each sampler (this scorer first; the others share its passes)."""
        ids = [s for s, _ in suffixes]
        hidden, kv = self._first_pass(ids)
        # token_prob needs the full vocabulary only after the pre-fill (for P(0), P(1)); sampling
        # needs it at all three positions.
        logits = None if self.options.token_prob_only else self._head(hidden)
        first = self._head(hidden[:, 0]) if logits is None else logits[:, 0]
        digits = self._digit_logits(hidden[:, 2])
        n_prefix = len(self.prefix_ids)
        token_prob = [self._token_prob(first[b], digits[b], {"prompt_tokens": n_prefix + len(suffix),
                                                              "truncated": truncated})
                      for b, (suffix, truncated) in enumerate(suffixes)]
        outs: list[list[dict[str, Score]]] = [[{"token_prob": t} for t in token_prob] for _ in samplers]
        if logits is None:
            return outs
        for n, (sampler, out) in enumerate(zip(samplers, outs, strict=True)):
            seeds = [claim_seed(sampler.options.seed, t) for t in texts]
            rows = [_Row(torch.Generator().manual_seed(sd), len(s)) for sd, s in zip(seeds, ids, strict=True)]
            # every sampler but the last decodes on a copy: decoding appends to the cache
            sampler._decode(rows, logits, kv if n == len(samplers) - 1 else kv.copy())
            for row, result in zip(rows, out, strict=True):
                raw = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
                value, status = parse_score(raw)
                usage = {**result["token_prob"].usage, "completion_tokens": len(row.tokens)}
                result["verbalised"] = Score(value, status, raw, usage)
        return outs

    def _decode(self, rows: list[_Row], logits: torch.Tensor, kv: _KV) -> None:
        """Sample each row's answer; reuse the forced ``0.`` where the sample agrees with it."""
        forced = (self._ids.zero, self._ids.dot)
        width = kv.valid.shape[1]
        for b, row in enumerate(rows):
            kept = 0
            for j in range(3):  # logits[b, j] is the distribution after j forced tokens
                row.tokens.append(sample_token(logits[b, j], self.options.sampling, row.generator))
                if self._finished(row) or j == 2 or row.tokens[-1] != forced[j]:
                    break
                kept += 1
            kv.valid[b, width - 2 + kept :] = False  # forced slots the row did not take
        active = [b for b, row in enumerate(rows) if not row.done]
        if len(active) < len(rows):
            kv.select(active)
        n_prefix = len(self.prefix_ids)
        while active:
            tokens = [rows[b].tokens[-1] for b in active]
            positions = [n_prefix + rows[b].suffix_len + len(rows[b].tokens) - 1 for b in active]
            step_logits = self._step(tokens, positions, kv)
            for i, b in enumerate(active):
                rows[b].tokens.append(sample_token(step_logits[i], self.options.sampling, rows[b].generator))
                self._finished(rows[b])
            still = [i for i, b in enumerate(active) if not rows[b].done]
            if still and len(still) < len(active):
                kv.select(still)  # finished rows stop costing compute
            active = [active[i] for i in still]

    def _finished(self, row: _Row) -> bool:
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        row.done = (
            row.tokens[-1] in self._ids.special
            or any(t in text for t in SCORE_TERMINATORS)
            or len(row.tokens) >= self.options.max_new_tokens
            or self._enough_decimals(text)
        )
        return row.done

    def _enough_decimals(self, text: str) -> bool:
        match = _DECIMALS.fullmatch(text)
        decimals = self.options.max_decimals
        return decimals is not None and match is not None and len(match[1]) >= decimals

    def _token_prob(self, head: torch.Tensor, digit_logits: torch.Tensor, usage: dict[str, Any]) -> Score:
        """Expected score from P(first token) and P(first decimal | "0.") (see class docstring)."""
        first = torch.log_softmax(head.double(), dim=-1)
        p0, p1 = float(first[self._ids.zero].exp()), float(first[self._ids.one].exp())
        digits = torch.softmax(digit_logits.double(), dim=-1)
        tenths = (torch.arange(10, dtype=torch.float64) / 10 + 0.05) @ digits
        mass = p0 + p1
        raw = json.dumps(
            {"p0": round(p0, 6), "p1": round(p1, 6), "d": [round(float(x), 5) for x in digits]},
            separators=(",", ":"),
        )
        if not mass >= self.options.min_digit_mass:
            return Score(None, NOT_A_NUMBER, raw, usage)
        return Score(round((p1 + p0 * float(tenths)) / mass, 6), OK, raw, usage)

    # ---- helpers ----------------------------------------------------------------------------

    def _encode(self, text: str, bos: bool = False) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        return [self.tokenizer.bos_token_id, *ids] if bos else ids

    def _progress_reporter(self, total: int) -> Callable[..., None]:
        if callable(self.progress):
            done = 0
            callback = self.progress

            def report(n: int, close: bool = False) -> None:
                nonlocal done
                done += n
                if n:
                    callback(done, total)

            return report
        bar = tqdm(total=total, desc=SPEC, unit="claim", disable=not self.progress)

        def report_bar(n: int, close: bool = False) -> None:
            bar.update(n)
            if close:
                bar.close()

        return report_bar


class _TokenIds:
    """Ids of the answer tokens; Gemma's tokenizer has single tokens for each digit and ``.``."""

    def __init__(self, tokenizer: Any) -> None:
        def single(text: str) -> int:
            ids = tokenizer(text, add_special_tokens=False).input_ids
            if len(ids) != 1:
                raise ValueError(f"expected {text!r} to be one token, got {ids}")
            return ids[0]

        self.digits = [single(str(d)) for d in range(10)]
        self.zero, self.one, self.dot = self.digits[0], self.digits[1], single(".")
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.special = set(tokenizer.all_special_ids)
