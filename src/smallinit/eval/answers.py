"""Answer extraction and normalization for the generation benchmarks (GSM8K, MATH500).

Pure string functions, no model, so that they can be tested on tricky cases.

GSM8K (``extract_gsm8k_answer``): the final number of a generation, in this order of preference:
  1. the number after ``####`` (the dataset's own answer marker);
  2. the number after the last "answer is" (e.g. "The answer is $1,234.");
  3. the last number in the text.
Numbers may carry a sign (``-`` or the Unicode minus), a ``$``, thousands commas (``1,234``), a
decimal part and a trailing period; ``canonical_number`` maps them to one spelling
(``"$1,234.50."`` -> ``"1234.5"``, ``"5.0"`` -> ``"5"``, ``"-.5"`` -> ``"-0.5"``) so that exact match is a
string comparison.

MATH (``last_boxed`` + ``normalize_math_answer`` + ``math_equal``): the content of the last
``\\boxed{...}`` (nested braces allowed; also ``\\fbox{}`` and ``\\boxed 5``), normalized by
removing what does not change the value: ``$``, spaces, ``\\left``/``\\right``, ``\\!``/``\\,``/``\\;``,
degree marks (``^\\circ``, ``degrees``), trailing units (``5\\text{ cm}^2`` -> ``5``), ``\\text{X}`` -> X,
``\\dfrac``/``\\tfrac`` -> ``\\frac``, short forms (``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` -> ``\\sqrt{2}``),
``a/b`` -> ``\\frac{a}{b}`` for integers, thousands separators, a trailing ``.``, a leading
``x =`` (one variable name), ``(C)`` -> ``C``. Two answers are equal when their normalized strings are
equal, or when both are plain numbers (decimals or integer fractions, e.g. ``0.5`` and ``\\frac12``)
whose values agree to 1e-9 relative. This is this project's definition (close to Hendrycks et al.'s
``is_equiv`` and Minerva's normalization, without symbolic algebra).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# ----------------------------------------------------------------------------- GSM8K

# a number: optional sign and $, thousands-grouped or plain digits, optional decimals; or ".5"
_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?\s?[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)|(?<![\w.])[-+]?\$?\.\d+")


def canonical_number(s: str) -> str | None:
    """One spelling per value: drop ``$``, spaces, thousands commas and a trailing period; ``5.0`` -> ``5``.

    Returns None when ``s`` is not a number.
    """
    t = s.strip().replace("\u2212", "-").replace("$", "").replace(",", "").replace(" ", "")
    t = t.rstrip(".")
    if t.startswith("+"):
        t = t[1:]
    try:
        d = Decimal(t)
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    out = format(d.normalize(), "f")
    if "." in out:
        out = out.rstrip("0").rstrip(".")
    return "0" if out in ("-0", "") else out


def _numbers(text: str) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(text.replace("\u2212", "-"))]


def extract_gsm8k_answer(text: str) -> str | None:
    """The final numeric answer of a GSM8K solution or generation, canonicalized (see module doc)."""
    text = text.replace("\u2212", "-")
    if "####" in text:
        nums = _numbers(text.split("####", 1)[1])
        if nums:
            return canonical_number(nums[0])
    parts = re.split(r"answer is", text, flags=re.IGNORECASE)
    if len(parts) > 1:
        nums = _numbers(parts[-1])
        if nums:
            return canonical_number(nums[0])
    nums = _numbers(text)
    return canonical_number(nums[-1]) if nums else None


def gsm8k_equal(pred: str | None, gold: str | None) -> bool:
    """Exact match of canonical numbers (None never matches)."""
    if pred is None or gold is None:
        return False
    return canonical_number(pred) == canonical_number(gold)


# ----------------------------------------------------------------------------- MATH


def _brace_group(s: str, start: int) -> tuple[str, int] | None:
    """The content of the balanced ``{...}`` that opens at ``s[start]``, and the index after it."""
    if start >= len(s) or s[start] != "{":
        return None
    depth = 0
    for i in range(start, len(s)):
        c = s[i]
        if c == "\\":  # skip escaped characters such as \{ and \}
            continue
        if c == "{" and (i == 0 or s[i - 1] != "\\"):
            depth += 1
        elif c == "}" and (i == 0 or s[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return s[start + 1 : i], i + 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text``; None if none."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    j = idx + (len("\\boxed") if text.startswith("\\boxed", idx) else len("\\fbox"))
    if j < len(text) and text[j] == " ":  # "\boxed 5": the token up to whitespace or '$'
        m = re.match(r"\s+([^\s$]+)", text[j:])
        return m.group(1) if m else None
    group = _brace_group(text, j)
    return group[0] if group else None


def extract_math_answer(text: str) -> str | None:
    """The answer of a MATH solution or generation: the last ``\\boxed{}``, else Minerva's
    "final answer is X" phrase, else None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = re.findall(r"[Ff]inal [Aa]nswer is:?\s*\$?(.+?)\$?(?:\.\s|\.?$|\n| I hope)", text)
    return m[-1].strip() if m else None


_UNIT_WORDS = (
    "degrees|degree|cm|mm|km|meters|meter|inches|inch|feet|foot|ft|yards|units|unit|dollars|"
    "cents|hours|hour|minutes|seconds|mph|miles|pounds|sq|grams|kg|liters|days|years|points"
)
_TRAILING_TEXT_UNIT = re.compile(r"^(.*?[\d}\)])\s*\\text\{\s*[A-Za-z ]+\}\s*(?:\^\{?[23]\}?)?$")
_TRAILING_WORD_UNIT = re.compile(r"^(.*?[\d}])\s*(?:" + _UNIT_WORDS + r")(?:\^\{?[23]\}?)?$")


def _unwrap(s: str, command: str) -> str:
    """Replace every ``\\command{X}`` by X (balanced braces)."""
    out, i, tag = [], 0, "\\" + command + "{"
    while True:
        j = s.find(tag, i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        group = _brace_group(s, j + len(tag) - 1)
        if group is None:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j])
        out.append(group[0])
        i = group[1]


def normalize_math_answer(answer: str) -> str:
    """Normalize a MATH answer string (the rules are listed in the module docstring)."""
    s = answer.strip().replace("\n", "")
    boxed = last_boxed(s) if s.startswith(("\\boxed", "\\fbox")) else None
    if boxed is not None:
        s = boxed
    # spacing commands, sizing, math-mode markers
    s = re.sub(r"(?<!\\)\\[!,;: ]", "", s)
    s = s.replace("~", " ").replace("\\displaystyle", "")
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)\b", "", s)
    s = s.replace("\\$", "").replace("$", "")
    s = s.replace("\\%", "").replace("%", "")
    s = s.replace("{,}", "")
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:mbox|textrm|textbf|mathrm|mathbf|textnormal|operatorname)\{", r"\\text{", s)
    # degrees
    s = re.sub(r"\^\s*\{?\s*\\circ\s*\}?", "", s)
    s = s.replace("\\circ", "").replace("\u00b0", "").replace("\\degree", "")
    s = s.strip()
    # trailing units: "5\text{ cm}^2" -> "5", "30 degrees" -> "30"
    for _ in range(2):
        m = _TRAILING_TEXT_UNIT.match(s) or _TRAILING_WORD_UNIT.match(s)
        if m and m.group(1).strip():
            s = m.group(1).strip()
    s = _unwrap(s, "text")
    s = s.replace(" ", "")
    s = s.rstrip(".")
    # a leading "x =" / "y=" / "x \in" (one variable name)
    s = re.sub(r"^[A-Za-z](?:_\{?\w+\}?)?(?:=|\\in)(?=.)", "", s)
    # short forms
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}\\(\w+)", r"\\frac{\1}{\\\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    # integer a/b -> \frac{a}{b}
    m = re.fullmatch(r"(-?)(\d+)/(\d+)", s)
    if m:
        s = f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}"
    # thousands separators in a lone number
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    # leading zero: ".5" -> "0.5"
    s = re.sub(r"(?<![\d}])\.(\d)", r"0.\1", s)
    # "(C)" -> "C" (multiple-choice letters)
    m = re.fullmatch(r"\(([A-Ea-e])\)", s)
    if m:
        s = m.group(1).upper()
    num = canonical_number(s) if re.fullmatch(r"-?\d+(?:\.\d+)?", s) else None
    return num if num is not None else s


def _numeric_value(s: str) -> float | None:
    """The value of a normalized answer that is a plain decimal or an integer fraction, else None."""
    if re.fullmatch(r"-?\d+(?:\.\d+)?", s):
        return float(s)
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", s)
    if m and float(m.group(3)) != 0:
        v = float(m.group(2)) / float(m.group(3))
        return -v if m.group(1) else v
    return None


def math_equal(pred: str | None, gold: str | None) -> bool:
    """True when two MATH answers are the same after ``normalize_math_answer`` (or numerically equal)."""
    if pred is None or gold is None:
        return False
    a, b = normalize_math_answer(pred), normalize_math_answer(gold)
    if a == b:
        return True
    va, vb = _numeric_value(a), _numeric_value(b)
    return va is not None and vb is not None and abs(va - vb) <= 1e-9 * max(1.0, abs(vb))
