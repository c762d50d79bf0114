"""Each claim's language: an ISO 639-1 code and the detector's confidence, or ``und`` and why.

A claim (a debate sentence, a tweet) is reduced to its words first (:func:`words_of`: links,
@mentions, the ``#`` of hashtags and HTML entities of tweets would otherwise be read as
language), then identified by py3langid, a maintained naive-Bayes identifier of 140 languages that
ships its model in its wheel (no download). It was chosen on the project's train files against
lingua-language-detector: as accurate there, 3 to 15 times faster, a twelfth of the memory (docs/data.md,
"Languages"; ``bench/bench_language_id.py``). A text is ``und`` (ISO 639-2's "undetermined"), with
the reason, when it has no words, when py3langid finds no linguistic content in it, or when no
language reaches :data:`MIN_CONFIDENCE`.
"""

from __future__ import annotations

import html
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from operator import itemgetter
from typing import Any

__all__ = ["UND", "DetectedLanguage", "EMPTY_AFTER_NORMALISATION", "detect", "direction", "unreadable",
           "visible", "words_of"]

#: the code of a text in no detectable language (ISO 639-2 "undetermined")
UND = "und"
#: why a text is ``und``
NO_WORDS = "no words: only links, mentions, numbers or symbols"
#: below this probability no language stands out: ``und`` (on the bench's 2,100 texts of train
#: files no right answer fell below 0.3; 4 of the 28 wrong ones fell below 0.2)
MIN_CONFIDENCE = 0.2
#: py3langid's label for text with no linguistic content
_NO_CONTENT = "zxx"
#: py3langid's labels with no ISO 639-1 code of their own whose macrolanguage has one; its other
#: labels without one (e.g. ``ext``, Extremaduran) are left out of the identifier
_MACROLANGUAGE = {"arz": "ar", "ary": "ar", "yue": "zh", "wuu": "zh", "uzs": "uz", "gug": "gn",
                  "sdh": "ku", "kik": "ki", "fuv": "ff"}

#: the languages of py3langid's written right to left (Arabic, Persian, Urdu, Pashto, Sindhi,
#: Uyghur, Hebrew, Yiddish, Divehi)
RIGHT_TO_LEFT = frozenset({"ar", "fa", "ur", "ps", "sd", "ug", "he", "yi", "dv"})

_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_MENTION = re.compile(r"(?<!\w)@\w+")
_HASH = re.compile(r"(?<!\w)#(?=\w)")


@dataclass(frozen=True)
class DetectedLanguage:
    """One text's language: ``code`` is ISO 639-1 (``en``, ``ar``, ...) or :data:`UND`;
    ``confidence`` the detector's probability of that language (0 for ``und``); ``reason`` says
    why a text is ``und`` (empty otherwise)."""

    code: str
    confidence: float
    reason: str = ""

    def __post_init__(self) -> None:
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must lie in [0, 1], got {self.confidence!r}")
        if (self.code == UND) != bool(self.reason):
            raise ValueError(f"a reason is given for und and only for und (code {self.code!r}, "
                             f"reason {self.reason!r})")


#: why a text that :func:`visible` empties is refused (one line, after the file, line and field)
EMPTY_AFTER_NORMALISATION = ("empty after normalisation: only white space and invisible characters "
                             "(zero-width spaces, direction marks, control characters)")


#: scripts that are written together within one word (Japanese, Korean, Chinese with phonetics)
_WRITTEN_TOGETHER = (frozenset({"HAN", "HIRAGANA", "KATAKANA"}), frozenset({"HAN", "HANGUL"}),
                     frozenset({"HAN", "BOPOMOFO"}))


def unreadable(text: str) -> str | None:
    """Why no language can be read in ``text``, or None: it has no words (only links, @mentions,
    numbers or symbols), or a word is a homograph: its letters of a second script all look like
    everyday letters of the word's main script (``Tрump`` with a Cyrillic ``р``, ``CОVID`` with a Cyrillic
    ``О``), which the identifier, the embedding, the kNN and a reader each read differently.
    Words that mix scripts as people write them (``COVID-ваксина``, ``لـCNN``, kanji with kana)
    are readable. Scripts and look-alikes are Unicode's, from ``confusable-homoglyphs``."""

    words = words_of(text)
    if not any(ch.isalpha() for ch in words):
        return f"no detectable language ({NO_WORDS})"
    for word in words.split():
        if word.isascii():  # every ASCII letter is Latin: one script
            continue
        letters = [(ch, _script(ch)) for ch in word if ch.isalpha()]
        scripts = {s for _, s in letters} - {"COMMON", "INHERITED"}
        if len(scripts) < 2 or any(scripts <= together for together in _WRITTEN_TOGETHER):
            continue
        in_word = Counter(t for _, t in letters)
        in_text = Counter(_script(ch) for ch in words if ch.isalpha())
        main = max(sorted(scripts), key=lambda s: (in_word[s], in_text[s]))  # a tie: the text's, then A-Z
        foreign = {ch for ch, s in letters if s not in (main, "COMMON", "INHERITED")}
        if all(_look_alikes(ch, main) for ch in foreign):
            shown = ", ".join(f"{ch!r} ({_script(ch).lower()})" for ch in sorted(foreign))
            return (f"mixed scripts: the word {word!r} is {main.lower()} but for the look-alike "
                    f"letters {shown}; retype them in {main.lower()}")
    return None


#: the everyday letters of the scripts whose letters look alike (their first Unicode blocks): a
#: look-alike outside them (Komi ``ԁ`` for ``d``) is no letter a writer of that script types
_EVERYDAY = {"LATIN": (0x41, 0x24F), "GREEK": (0x370, 0x3FF), "CYRILLIC": (0x400, 0x4FF),
             "ARMENIAN": (0x531, 0x58F)}


@cache
def _script(ch: str) -> str:
    """Unicode's script of ``ch`` (``LATIN``, ``CYRILLIC``, ``COMMON``...), looked up once a
    character: the library's lookup searches its whole table each time."""
    from confusable_homoglyphs import categories

    return str(categories.alias(ch))


@cache
def _look_alikes(ch: str, script: str) -> frozenset[str]:
    """The everyday letters of ``script`` that Unicode's confusables list says ``ch`` looks like."""
    from confusable_homoglyphs import categories, confusables

    low, high = _EVERYDAY.get(script, (0, sys.maxunicode))
    found = confusables.is_confusable(ch, greedy=True) or []
    return frozenset(h["c"] for item in found for h in item["homoglyphs"]
                     if len(h["c"]) == 1 and h["c"].isalpha() and categories.alias(h["c"]) == script
                     and low <= ord(h["c"]) <= high)


def visible(text: str) -> str:
    """What a reader sees of ``text``: NFKC-normalised, control and format characters (zero-width
    spaces and joiners, direction marks, the byte-order mark) dropped, white space collapsed. An
    empty result means there is nothing to read: such a text is refused, never stored."""
    kept = "".join(ch for ch in unicodedata.normalize("NFKC", text)
                   if unicodedata.category(ch) not in ("Cc", "Cf") or ch.isspace())
    return " ".join(kept.split())


def direction(code: str | None) -> str:
    """How a text in language ``code`` is written, as HTML's ``dir`` says it: ``rtl``, ``ltr``, or
    ``auto`` (the browser decides from the text) for ``und`` or an unknown language."""
    if code is None or code == UND:
        return "auto"
    return "rtl" if code in RIGHT_TO_LEFT else "ltr"


def words_of(text: str) -> str:
    """The text as a detector should read it: HTML entities decoded (``&amp;``), links and
    @mentions dropped, hashtags kept as words (``#coronavirus`` -> ``coronavirus``), spaces
    collapsed."""
    text = _HASH.sub("", _MENTION.sub(" ", _URL.sub(" ", html.unescape(text))))
    return " ".join(text.split())


@cache
def _identifier() -> Any:
    """py3langid's identifier (probabilities normalised) over the labels that give an ISO 639-1
    code, loaded once per process (about 2 s and 100 MB)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages([label for label in ident.labels
                         if len(label) == 2 or label in _MACROLANGUAGE or label == _NO_CONTENT])
    return ident


def detect(texts: Iterable[str]) -> list[DetectedLanguage]:
    """Each text's language (:class:`DetectedLanguage`), in the order given.

    The probabilities of a macrolanguage's varieties are added up (Egyptian and Moroccan Arabic
    count as ``ar``); the most probable code wins if it reaches :data:`MIN_CONFIDENCE`.
    """
    ident = _identifier()
    out = []
    for text in texts:
        words = words_of(text)
        if not any(ch.isalpha() for ch in words):
            out.append(DetectedLanguage(UND, 0.0, NO_WORDS))
            continue
        scores: dict[str, float] = defaultdict(float)
        for label, p in ident.rank(words):
            scores[_MACROLANGUAGE.get(label, label)] += p
        code, p = max(scores.items(), key=itemgetter(1))
        p = min(float(p), 1.0)
        if code == _NO_CONTENT:
            out.append(DetectedLanguage(UND, 0.0, f"no linguistic content (py3langid: {p:.2f})"))
        elif p < MIN_CONFIDENCE:
            out.append(DetectedLanguage(UND, 0.0, f"no language stands out (the likeliest, {code}, "
                                        f"at {p:.2f} < {MIN_CONFIDENCE})"))
        else:
            out.append(DetectedLanguage(code, p))
    return out
