"""Label Studio's file formats for the review queue: tasks to import, and annotations to read back.

Tasks follow Label Studio's JSON task format (a list of ``{"data": {...}}``) for the labelling
configuration :data:`LABEL_CONFIG` (a ``Text`` named ``text`` and single ``Choices`` named
``checkworthy``: Yes/No). No pre-annotation is sent, so the model's guess does not anchor the
person; theta, the priority and the reason travel in ``data`` for sorting in the Data Manager.

Answers are read from Label Studio's JSON export (tasks with ``annotations``), its JSON-MIN export
(one flat object per task, the choice under ``checkworthy``), a CSV (``id,dataset,label``, other
columns ignored, ``label`` 0/1 or Yes/No), or one annotation a webhook delivers. An unanswered
task or row is skipped; a task whose annotations disagree, an unknown choice or a task without its
claim is refused, naming the file, the task (row) and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkworthy.data.label_files import REQUIRED
from checkworthy.data.language import direction
from checkworthy.data.user_csv import read_rows, require_filled
from checkworthy.errors import DataError

#: the labelling configuration the tasks are made for (paste it into the project's settings); each
#: paragraph of a claim is laid out in its own direction (CSS ``unicode-bidi: plaintext``), so a
#: claim written right to left (Arabic, Hebrew, ...) reads from the right and aligns right
LABEL_CONFIG = """<View>
  <Style>.claim * { unicode-bidi: plaintext; text-align: start; }</Style>
  <Header value="Is this claim worth fact-checking?"/>
  <View className="claim">
    <Text name="text" value="$text"/>
  </View>
  <Choices name="checkworthy" toName="text" choice="single" showInline="true">
    <Choice value="Yes"/>
    <Choice value="No"/>
  </Choices>
</View>"""
FROM_NAME = "checkworthy"
CHOICES = {"yes": 1, "no": 0, "1": 1, "0": 0}
#: the task fields that name the claim
CLAIM_FIELDS = ("source_id", "dataset")


@dataclass(frozen=True)
class Answer:
    """A person's label for a claim, with who gave it; ``row``: its task or line in the file (None
    for an annotation a webhook delivered)."""

    row: int | None
    id: str
    dataset: str
    label: int
    source: str


def tasks(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Label Studio tasks for open queue entries (``review_open`` rows, with the claim's
    ``language`` where known): the language and its writing direction (``dir``: ``rtl``, ``ltr``,
    ``auto``) go with the claim."""
    return [{"data": {"text": e["text"], "source_id": e["source_id"], "dataset": e["dataset"],
                      "claim_id": int(e["claim_id"]), "target": e["target"], "run_id": int(e["run_id"]),
                      "theta": round(float(e["theta"]), 6), "priority": round(float(e["priority"]), 6),
                      "reason": e["reason"], "language": e.get("language") or "",
                      "dir": direction(e.get("language") or None)}} for e in entries]


def _label(path: str | Path, row: int | None, field: str, value: Any) -> int:
    key = str(value).strip().lower()
    if key not in CHOICES:
        raise DataError(path, row, field, f"must be Yes or No (or 1/0), got {value!r}")
    return CHOICES[key]


def _claim(path: str | Path, row: int | None, fields: Mapping[str, Any], where: str) -> tuple[str, str]:
    out = []
    for name in CLAIM_FIELDS:
        value = fields.get(name)
        if not isinstance(value, str | int) or not str(value).strip():
            raise DataError(path, row, f"{where}{name}", "missing: export the tasks made by "
                            "'checkworthy review export --format label-studio'")
        out.append(str(value).strip())
    return out[0], out[1]


def _who(annotation: Mapping[str, Any]) -> str:
    by = annotation.get("completed_by")
    if isinstance(by, Mapping):
        by = by.get("email") or by.get("id")
    return f"label-studio:{by}" if by not in (None, "") else "label-studio"


def _from_task(path: str | Path, row: int | None, task: Mapping[str, Any]) -> Answer | None:
    """A full-export task's answer: its non-cancelled annotations' single choice (they must agree)."""
    data = task.get("data")
    if not isinstance(data, Mapping):
        raise DataError(path, row, "data", "missing: not a Label Studio task")
    anns = task.get("annotations") or []
    if not isinstance(anns, list):
        raise DataError(path, row, "annotations", "must be a list")
    labels: dict[int, str] = {}
    for a in anns:
        if not isinstance(a, Mapping) or a.get("was_cancelled"):
            continue
        for r in a.get("result") or []:
            if isinstance(r, Mapping) and r.get("from_name") == FROM_NAME and r.get("type") == "choices":
                chosen = (r.get("value") or {}).get("choices") or []
                if len(chosen) != 1:
                    raise DataError(path, row, "annotations.result.value.choices",
                                    f"expected one choice, got {chosen!r}")
                labels.setdefault(_label(path, row, "annotations.result.value.choices", chosen[0]),
                                  _who(a))
    if not labels:
        return None
    if len(labels) > 1:
        raise DataError(path, row, "annotations", "annotators disagree: resolve the task in Label "
                        "Studio (or keep one annotation) before importing")
    (label, who), = labels.items()
    sid, dataset = _claim(path, row, data, "data.")
    return Answer(row, sid, dataset, label, who)


def annotation_answer(task: Mapping[str, Any], annotation: Mapping[str, Any], where: str) -> Answer | None:
    """The answer one annotation gives its task (what a webhook's ``ANNOTATION_CREATED`` or
    ``ANNOTATION_UPDATED`` carries): None when it is cancelled or holds no choice; a bad choice or
    a task without its claim raises :class:`DataError` naming ``where`` and the field."""
    return _from_task(where, None, {"data": task.get("data"), "annotations": [annotation]})


def _from_min(path: Path, row: int, item: Mapping[str, Any]) -> Answer | None:
    """A JSON-MIN export row's answer (the choice under ``checkworthy``)."""
    if item.get(FROM_NAME) in (None, "", []):
        return None
    value = item[FROM_NAME]
    if isinstance(value, list):
        if len(value) != 1:
            raise DataError(path, row, FROM_NAME, f"expected one choice, got {value!r}")
        value = value[0]
    label = _label(path, row, FROM_NAME, value)
    sid, dataset = _claim(path, row, item, "")
    who = item.get("annotator")
    return Answer(row, sid, dataset, label, f"label-studio:{who}" if who else "label-studio")


def _read_json(path: Path) -> list[Answer]:
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, None, None, f"cannot read the file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"not JSON: {exc.msg}") from exc
    except RecursionError:  # arrays or objects nested past the parser's recursion limit
        raise DataError(path, None, None, "not a Label Studio export: JSON nested too deeply") from None
    if not isinstance(items, list):
        raise DataError(path, None, None, "not a Label Studio export (a JSON list of tasks)")
    out = []
    for row, item in enumerate(items, 1):
        if not isinstance(item, Mapping):
            raise DataError(path, row, None, "not a task (a JSON object)")
        full = "data" in item or "annotations" in item
        a = _from_task(path, row, item) if full else _from_min(path, row, item)
        if a is not None:
            out.append(a)
    return out


def _read_csv(path: Path) -> list[Answer]:
    _, records = read_rows(path, REQUIRED)
    out = []
    for line, rec in records:
        if not rec["label"].strip():
            continue  # not answered yet
        require_filled(str(path), line, rec, ("id", "dataset"))
        out.append(Answer(line, rec["id"].strip(), rec["dataset"].strip(),
                          _label(path, line, "label", rec["label"]),
                          (rec.get("source") or "").strip() or f"review:{path.name}"))
    return out


def read_answers(path: Path) -> list[Answer]:
    """The answered tasks or rows of a Label Studio export (``.json``) or a CSV (``.csv``); refuses
    a file with none, or one that answers a claim twice."""
    path = Path(path)
    if path.suffix.lower() not in (".json", ".csv"):
        raise DataError(path, None, None, "expected a Label Studio JSON export (.json) or a CSV (.csv)")
    if not path.is_file():
        raise DataError(path, None, None, "no such file")
    answers = _read_json(path) if path.suffix.lower() == ".json" else _read_csv(path)
    if not answers:
        raise DataError(path, None, None, "no answered task or row")
    seen: dict[tuple[str, str], int | None] = {}
    for a in answers:
        first = seen.setdefault((a.dataset, a.id), a.row)
        if first != a.row:
            raise DataError(path, a.row, None, f"claim {a.id!r} of {a.dataset!r} is answered twice "
                            f"(also row {first})")
    return answers
