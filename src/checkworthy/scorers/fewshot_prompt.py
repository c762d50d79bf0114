"""The few-shot prompt for a base model: labelled sentences, then the claim, then ``Check-worthy:``.

A base model continues text; it does not follow instructions. So this prompt shows it what the
task looks like: a two-line header from the guidelines' criteria (the first three tiers are
check-worthy, the rest not), then demonstrations ``Sentence: ...`` / ``Check-worthy: Yes|No``, and
the claim in the same frame. The score is read from one forward pass: ``P(" Yes") / (P(" Yes") +
P(" No"))`` for the next token. The demonstrations are the guidelines' examples (a score of 0.5 or
more is ``Yes``) after those of ``guidelines/demonstrations.yaml``: sentences picked from the
project's leakage-free training texts by ``checkworthy demonstrations`` (that file names the
command and the groups left out). Classes alternate, the last one ``Yes``, so neither label is
favoured by recency.

Claims are data: :func:`checkworthy.scorers.prompt.neutralise_claim` first, then any
``Check-worthy: Yes`` of the claim's own is removed (a base model copies the answer it has read).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from checkworthy.scorers.prompt import DEFAULT_GUIDELINES, load_guidelines, neutralise_claim

#: bump when the rendering below changes (the two files are hashed separately)
TEMPLATE_VERSION = "1"
DEFAULT_DEMONSTRATIONS = Path(__file__).parent / "guidelines" / "demonstrations.yaml"
#: the line after the claim; the model's next token is the answer
ANSWER_KEY = "Check-worthy:"
YES, NO = " Yes", " No"
#: guideline examples at or above this score are shown as check-worthy
EXAMPLE_THRESHOLD = 0.5
#: how many of the guidelines' tiers (highest first) count as check-worthy
CHECK_WORTHY_TIERS = 3
_OWN_ANSWER = re.compile(r"check[\s_-]*worth\w*\s*[:=]?\s*(?:yes|no)\b", re.IGNORECASE)
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Demonstrations:
    """Labelled sentences for the prompt, and where they came from (stored with every score)."""

    shots: tuple[tuple[str, int], ...]
    excluded: tuple[str, ...]
    made_by: str


def load_demonstrations(path: str | Path = DEFAULT_DEMONSTRATIONS) -> Demonstrations:
    """Read and check a demonstrations file: ``made_by``, ``excluded`` groups and ``shots``
    (``text``, ``label`` 0/1)."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not {"made_by", "excluded", "shots"} <= data.keys():
        raise ValueError(f"{path}: needs the keys made_by, excluded and shots")
    shots = []
    for i, shot in enumerate(data["shots"] or [], start=1):
        if (not isinstance(shot, dict) or shot.get("label") not in (0, 1)
                or not str(shot.get("text", "")).strip()):
            raise ValueError(f"{path}: shot {i} needs a text and a label 0 or 1")
        shots.append((fewshot_claim(shot["text"]), int(shot["label"])))
    return Demonstrations(tuple(shots), tuple(map(str, data["excluded"] or ())), str(data["made_by"]))


def prompt_version(guidelines_path: str | Path = DEFAULT_GUIDELINES,
                   demonstrations_path: str | Path = DEFAULT_DEMONSTRATIONS) -> str:
    """Template version + sha256 of both files' bytes: any edit gives a new version."""
    digest = hashlib.sha256(Path(guidelines_path).read_bytes() + b"\0"
                            + Path(demonstrations_path).read_bytes())
    return f"f{TEMPLATE_VERSION}-{digest.hexdigest()[:16]}"


def fewshot_claim(text: str) -> str:
    """A claim as it stands in the prompt: neutralised, without an answer of its own, one line."""
    return _WHITESPACE.sub(" ", _OWN_ANSWER.sub(" ", neutralise_claim(text))).strip()


def build_prefix(guidelines_path: str | Path = DEFAULT_GUIDELINES,
                 demonstrations_path: str | Path = DEFAULT_DEMONSTRATIONS) -> str:
    """Header and demonstrations, ending where the claim goes."""
    guidelines = load_guidelines(guidelines_path)
    tiers = [c.description for c in guidelines.criteria]
    shots = list(load_demonstrations(demonstrations_path).shots)
    shots += [(e.statement, int(e.score >= EXAMPLE_THRESHOLD)) for e in guidelines.examples]
    header = ("Sentences from political debates and speeches, each marked whether it is check-worthy: "
              "a factual claim the public would want a fact-checker to verify.\n"
              f"Check-worthy: {'; '.join(tiers[:CHECK_WORTHY_TIERS])}.\n"
              f"Not check-worthy: {'; '.join(tiers[CHECK_WORTHY_TIERS:])}.\n\n")
    body = "".join(f"Sentence: {text}\n{ANSWER_KEY}{YES if label else NO}\n\n"
                   for text, label in alternate(shots))
    return header + body + "Sentence:"


def build_suffix(claim: str) -> str:
    """The per-claim part: the claim and the answer key."""
    return f" {fewshot_claim(claim)}\n{ANSWER_KEY}"


def alternate(shots: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The shots with classes alternating (No, Yes, ...), in their order within each class; the
    larger class's remainder goes first, so the last shot is ``Yes`` when there is one."""
    yes = [s for s in shots if s[1] == 1]
    no = [s for s in shots if s[1] == 0]
    n = min(len(yes), len(no))
    rest = yes[: len(yes) - n] + no[: len(no) - n]
    return rest + [s for pair in zip(no[len(no) - n:], yes[len(yes) - n:], strict=True) for s in pair]


def demonstration_params(path: str | Path = DEFAULT_DEMONSTRATIONS) -> dict[str, Any]:
    """What a score made with these demonstrations records: the groups none of them came from."""
    demos = load_demonstrations(path)
    return {"n_demonstrations": len(demos.shots), "excluded": list(demos.excluded),
            "demonstrations_made_by": demos.made_by}
