"""Multiple-choice tasks read from their files: HellaSwag, ARC-Easy/Challenge, CMMLU and YAML-defined tasks.

Every loader returns :class:`~smallinit.eval.mc_scoring.MCItem` s, scored by log-likelihood as lm-evaluation-harness
does (acc, acc_norm, acc_bytes, partial scoring, few-shot prompts: :mod:`smallinit.eval.mc_scoring`).

``limit`` keeps the first N items of each file (CMMLU: of each subject, like lm-evaluation-harness's
subtasks).

Files (under the data directory; prompts follow lm-evaluation-harness):

* ``hellaswag/hellaswag_val.jsonl``: JSON Lines, fields ``activity_label``, ``ctx_a``, ``ctx_b``,
  ``endings`` (list of 4 strings), ``label`` (index, int or string "0".."3"). Prompt
  ``"{activity_label}: {ctx_a} {ctx_b.capitalize()}"``, continuations ``" " + ending``, both cleaned
  as the harness does (" [title]" -> ". ", "[...]" removed, double spaces collapsed).
* ``arc/arc_easy_val.jsonl``, ``arc/arc_challenge_val.jsonl``: JSON Lines, fields ``question``,
  ``choices`` = {``text``: [...], ``label``: [...]}, ``answerKey`` (one of the labels).
  Prompt ``"Question: {question}\\nAnswer:"``, continuations ``" " + text``.
* ``cmmlu/test/<subject>.csv`` (+ optional ``cmmlu/dev/<subject>.csv`` few-shot pool): CSV with header
  ``,Question,A,B,C,D,Answer`` (Answer a letter). Prompt ``"{Question}\\nA. {A}\\nB. {B}\\nC. {C}\\nD. {D}\\n答案："``,
  continuations ``" A"`` .. ``" D"`` (the harness's format; acc_norm equals acc here).
* A YAML task (any ``*.yaml``/``*.yml`` path given as a task name)::

      name: my_quiz                  # optional; default: the YAML file's stem
      file: quiz.jsonl               # .jsonl, .json (a list) or .csv; relative to the YAML's folder
      fewshot_file: quiz_dev.jsonl   # optional few-shot pool; default: the same file minus the item
      question: "Question: {question}\\nAnswer:"   # str.format template over the record's fields
      choices: choices               # a field holding a list of strings, or a list of fields [A, B, C, D];
                                     # dotted paths reach nested fields (choices.text)
      fixed_choices: [A, B, C, D]    # instead of `choices`: the same continuations for every item
      choice_prefix: " "             # the harness's target_delimiter: put between context and continuation
                                     # (default one space; not counted in acc_norm's length)
      label: answer                  # field with the gold answer: an index (int or "2"), or one of
      labels: [A, B, C, D]           # `labels` (a list, or a field path such as choices.label), or the
                                     # text of a choice

  Partial scoring (the choice changes the *context*; one shared continuation), WinoGrande-style: give
  ``context_choices`` (a list of templates, one per choice, or a field holding a list of contexts) and
  ``target`` (the template of the shared continuation) instead of ``choices``; ``question`` is then optional
  (a prefix put before every context). ``blank: FIELD`` splits that field at its first ``_`` into
  ``{FIELD_before}`` and ``{FIELD_after}`` (the latter stripped, as the harness does), so raw WinoGrande
  records (sentence, option1, option2, answer) need no preprocessing::

      name: winogrande
      file: winogrande_dev.jsonl
      blank: sentence
      context_choices: ["{sentence_before}{option1}", "{sentence_before}{option2}"]
      target: "{sentence_after}"
      label: answer
      labels: ["1", "2"]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from smallinit.core.errors import DataError
from smallinit.eval.data import Row, read_csv, read_jsonl, read_records
from smallinit.eval.mc_scoring import MCItem

HELLASWAG_FILE = "hellaswag/hellaswag_val.jsonl"
HELLASWAG_FORMAT = "JSON Lines with fields activity_label, ctx_a, ctx_b, endings (list of strings), label (index)"
ARC_FILES = {"arc_easy": "arc/arc_easy_val.jsonl", "arc_challenge": "arc/arc_challenge_val.jsonl"}
ARC_FORMAT = "JSON Lines with fields question, choices {text: [...], label: [...]}, answerKey"
CMMLU_DIR = "cmmlu"
CMMLU_FORMAT = "a folder cmmlu/test/ of CSV files with header ',Question,A,B,C,D,Answer' (optional cmmlu/dev/ alike)"
YAML_FORMAT = (
    "a YAML mapping with keys file, question, choices (or fixed_choices, or context_choices + target), "
    "label [, labels, fewshot_file, name, choice_prefix, blank]"
)


# ----------------------------------------------------------------------------- HellaSwag


def _hellaswag_clean(text: str) -> str:
    """lm-evaluation-harness's HellaSwag preprocessing."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _index(value: Any, n: int, row: Row, fmt: str) -> int:
    try:
        i = int(value)
    except (TypeError, ValueError):
        raise DataError(f"{row.where}: label {value!r} is not an index; expected {fmt}") from None
    if not 0 <= i < n:
        raise DataError(f"{row.where}: label {i} out of range for {n} choices; expected {fmt}")
    return i


def _strings(row: Row, key: str, value: Any, fmt: str, many: bool = False) -> None:
    """DataError unless ``value`` is a string (``many``: a non-empty list of strings)."""
    ok = (
        (isinstance(value, list) and value and all(isinstance(v, str) for v in value))
        if many
        else isinstance(value, str)
    )
    if not ok:
        raise DataError(
            f"{row.where}: '{key}' must be {'a non-empty list of strings' if many else 'text'}, "
            f"got {value!r:.60}; expected {fmt}"
        )


def load_hellaswag(path: Path, limit: int | None = None) -> list[MCItem]:
    items = []
    for row in read_jsonl(path, HELLASWAG_FORMAT, limit):
        g = lambda k: row.get(k, HELLASWAG_FORMAT)  # noqa: E731
        for k in ("ctx_a", "ctx_b", "activity_label"):
            _strings(row, k, g(k), HELLASWAG_FORMAT)
        ctx = g("ctx_a") + " " + str(g("ctx_b")).capitalize()
        endings = g("endings")
        if not isinstance(endings, list) or not endings:
            raise DataError(f"{row.where}: 'endings' must be a non-empty list; expected {HELLASWAG_FORMAT}")
        _strings(row, "endings", endings, HELLASWAG_FORMAT, many=True)
        items.append(
            MCItem(
                _hellaswag_clean(f"{g('activity_label')}: {ctx}"),
                [_hellaswag_clean(e) for e in endings],
                _index(g("label"), len(endings), row, HELLASWAG_FORMAT),
            )
        )
    return items


# ----------------------------------------------------------------------------- ARC


def load_arc(path: Path, limit: int | None = None) -> list[MCItem]:
    items = []
    for row in read_jsonl(path, ARC_FORMAT, limit):
        texts, labels = row.get("choices.text", ARC_FORMAT), row.get("choices.label", ARC_FORMAT)
        key = row.get("answerKey", ARC_FORMAT)
        if not isinstance(texts, list) or not isinstance(labels, list) or len(texts) != len(labels) or not texts:
            raise DataError(
                f"{row.where}: choices.text and choices.label must be lists of equal length; expected {ARC_FORMAT}"
            )
        _strings(row, "choices.text", texts, ARC_FORMAT, many=True)
        if key not in labels:
            raise DataError(f"{row.where}: answerKey {key!r} not among labels {labels}; expected {ARC_FORMAT}")
        meta = {"id": row.data["id"]} if "id" in row.data else {}
        items.append(
            MCItem(f"Question: {row.get('question', ARC_FORMAT)}\nAnswer:", list(texts), labels.index(key), meta)
        )
    return items


# ----------------------------------------------------------------------------- CMMLU

_LETTERS = ["A", "B", "C", "D"]


def load_cmmlu_file(path: Path, limit: int | None = None) -> list[MCItem]:
    items = []
    for row in read_csv(path, CMMLU_FORMAT, required=("Question", "A", "B", "C", "D", "Answer"), limit=limit):
        d = row.data
        ans = d["Answer"].strip()
        if ans not in _LETTERS:
            raise DataError(f"{row.where}: Answer {ans!r} is not one of A-D; expected {CMMLU_FORMAT}")
        prompt = f"{d['Question'].strip()}\nA. {d['A']}\nB. {d['B']}\nC. {d['C']}\nD. {d['D']}\n答案："
        items.append(MCItem(prompt, list(_LETTERS), _LETTERS.index(ans), {"subject": path.stem}))
    return items


def load_cmmlu(root: Path, limit: int | None = None) -> dict[str, tuple[list[MCItem], list[MCItem] | None]]:
    """{subject: (test items, dev items or None)} from ``root/test/*.csv`` (the first ``limit`` of
    each) and ``root/dev/*.csv``."""
    test_dir = Path(root) / "test"
    files = sorted(test_dir.glob("*.csv")) if test_dir.is_dir() else []
    if not files:
        raise DataError(f"{test_dir}: no CSV files; expected {CMMLU_FORMAT}")
    out = {}
    for f in files:
        dev = Path(root) / "dev" / f.name
        out[f.stem] = (load_cmmlu_file(f, limit), load_cmmlu_file(dev) if dev.is_file() else None)
    return out


# ----------------------------------------------------------------------------- YAML tasks


def _check_template(path: Path, template: str) -> None:
    """A task template is plain ``{field}`` substitution: braces must pair and fields are names (no ``.x`` or
    ``[i]``), checked when the task is read, before any model is loaded."""
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise DataError(f"{path}: template {template!r}: {e} (write a literal brace as {{{{ or }}}})") from None
    bad = [f for f in fields if not f.isidentifier()]
    if bad:
        raise DataError(f"{path}: template {template!r} names {{{bad[0]}}}; fields are plain names like {{question}}")


@dataclass
class YamlMCTask:
    """A multiple-choice task defined by a YAML file (format in the module docstring)."""

    name: str
    file: Path
    question: str
    choices: str | list[str] | None
    label: str
    fixed_choices: list[str] | None = None
    labels: str | list[str] | None = None
    choice_prefix: str = " "
    fewshot_file: Path | None = None
    context_choices: str | list[str] | None = None
    target: str | None = None
    blank: str | None = None

    @classmethod
    def from_yaml(cls, path: Path) -> YamlMCTask:
        import yaml

        path = Path(path)
        if not path.is_file():
            raise DataError(f"{path}: file not found; expected {YAML_FORMAT}")
        try:
            spec = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise DataError(f"{path}: malformed YAML ({' '.join(str(e).split())}); expected {YAML_FORMAT}") from None
        except UnicodeDecodeError:
            raise DataError(f"{path}: not UTF-8 text; expected {YAML_FORMAT}") from None
        if not isinstance(spec, dict):
            raise DataError(f"{path}: expected a YAML mapping; expected {YAML_FORMAT}")
        known = {
            "name",
            "file",
            "fewshot_file",
            "question",
            "choices",
            "fixed_choices",
            "choice_prefix",
            "label",
            "labels",
            "context_choices",
            "target",
            "blank",
        }
        unknown = sorted(set(spec) - known)
        if unknown:
            raise DataError(f"{path}: unknown key(s) {', '.join(unknown)}; expected {YAML_FORMAT}")
        partial = "context_choices" in spec
        for key in ("file", "label") + (("target",) if partial else ("question",)):
            if not spec.get(key):
                raise DataError(f"{path}: missing key '{key}'; expected {YAML_FORMAT}")
        if sum(k in spec for k in ("choices", "fixed_choices", "context_choices")) != 1:
            raise DataError(
                f"{path}: give exactly one of 'choices', 'fixed_choices' and 'context_choices'; expected {YAML_FORMAT}"
            )
        if "target" in spec and not partial:
            raise DataError(f"{path}: 'target' goes with 'context_choices'; expected {YAML_FORMAT}")
        for key in ("file", "fewshot_file"):
            if key in spec and not isinstance(spec[key], str):
                raise DataError(
                    f"{path}: '{key}' must be a file name, not {type(spec[key]).__name__}; expected {YAML_FORMAT}"
                )
        for key in ("choices", "labels", "context_choices", "fixed_choices"):
            v = spec.get(key)
            lists_only = key == "fixed_choices"
            if v is not None and not (
                (isinstance(v, str) and not lists_only)
                or (isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v))
            ):
                raise DataError(
                    f"{path}: '{key}' must be {'a list' if lists_only else 'a field name or a list'} "
                    f"of plain values, not {v!r}; expected {YAML_FORMAT}"
                )
        contexts = spec["context_choices"] if isinstance(spec.get("context_choices"), list) else []
        for template in [spec.get("question"), spec.get("target"), *contexts]:
            if isinstance(template, str):
                _check_template(path, template)

        def rel(p: str | None) -> Path | None:
            return None if p is None else (Path(p) if Path(p).is_absolute() else path.parent / p)

        return cls(
            name=str(spec.get("name") or path.stem),
            file=rel(spec["file"]),
            question=str(spec.get("question") or ""),
            choices=spec.get("choices"),
            label=str(spec["label"]),
            fixed_choices=spec.get("fixed_choices"),
            labels=spec.get("labels"),
            choice_prefix=str(spec.get("choice_prefix", " ")),
            fewshot_file=rel(spec.get("fewshot_file")),
            context_choices=spec.get("context_choices"),
            target=None if spec.get("target") is None else str(spec["target"]),
            blank=None if spec.get("blank") is None else str(spec["blank"]),
        )

    @property
    def fmt(self) -> str:
        return f"records with the fields named by task '{self.name}' (question template, choices, label)"

    def _fields(self, row: Row) -> dict[str, Any]:
        data = dict(row.data)
        if self.blank:
            text = row.get(self.blank, self.fmt)
            if not isinstance(text, str) or "_" not in text:
                raise DataError(
                    f"{row.where}: field '{self.blank}' (blank) has no '_' to split at; expected {self.fmt}"
                )
            i = text.index("_")
            data[f"{self.blank}_before"], data[f"{self.blank}_after"] = text[:i], text[i + 1 :].strip()
        return data

    def _format(self, template: str, data: dict[str, Any], row: Row, what: str) -> str:
        try:
            return template.format_map(data)
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as e:
            raise DataError(
                f"{row.where}: {what} template names field {e} which the record lacks; expected {self.fmt}"
            ) from None

    def item(self, row: Row) -> MCItem:
        fmt = self.fmt
        data = self._fields(row)
        prompt = self._format(self.question, data, row, "question") if self.question else ""
        contexts = None
        if self.context_choices is not None:
            if isinstance(self.context_choices, list):
                contexts = [self._format(str(t), data, row, "context_choices") for t in self.context_choices]
            else:
                contexts = row.get(str(self.context_choices), fmt)
                if not isinstance(contexts, list) or not contexts:
                    raise DataError(
                        f"{row.where}: field '{self.context_choices}' is not a non-empty list; expected {fmt}"
                    )
                contexts = [str(c) for c in contexts]
            texts = contexts
        elif self.fixed_choices is not None:
            texts = [str(c) for c in self.fixed_choices]
        elif isinstance(self.choices, list):
            texts = [str(row.get(c, fmt)) for c in self.choices]
        else:
            texts = row.get(str(self.choices), fmt)
            if not isinstance(texts, list) or not texts:
                raise DataError(f"{row.where}: field '{self.choices}' is not a non-empty list; expected {fmt}")
            texts = [str(t) for t in texts]
        value = row.get(self.label, fmt)
        labels = self.labels
        if isinstance(labels, str):
            labels = row.get(labels, fmt)
        gold: int | None = None
        if labels is not None and str(value) in [str(x) for x in labels]:
            gold = [str(x) for x in labels].index(str(value))
        elif isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
            gold = int(value)
        elif str(value) in texts:
            gold = texts.index(str(value))
        if gold is None or not 0 <= gold < len(texts):
            raise DataError(f"{row.where}: label {value!r} matches no choice of {len(texts)}; expected {fmt}")
        if contexts is not None:
            return MCItem(
                prompt,
                contexts,
                gold,
                delimiter=self.choice_prefix,
                contexts=contexts,
                target=self._format(self.target or "", data, row, "target"),
            )
        return MCItem(prompt, texts, gold, delimiter=self.choice_prefix)

    def load(self) -> tuple[list[MCItem], list[MCItem] | None]:
        items = [self.item(r) for r in read_records(self.file, self.fmt)]
        pool = [self.item(r) for r in read_records(self.fewshot_file, self.fmt)] if self.fewshot_file else None
        return items, pool
