"""Answer verification: read the final answer from a response and check it against the gold.

`verify(response, sample)` is the one entry point benchmarks call; the pieces it uses are public
so that other code (rewards, data filters) can use the same rules:

- `extract_answer` — the final answer text (`<answer>`, `\\boxed{}`, "answer is", last line);
- `extract_choice` — the option letter, with documented tie rules, or None (never a guess);
- `check_number`, `parse_number` — numbers with MathVista precision / ChartQA relaxed accuracy;
- `yesno_label`, `exact_match`, `anls` — text answers;
- `check_math` — symbolic and LaTeX answers through math-verify, thread-safe and time-bounded;
- `Judge` — the optional LLM judge with its on-disk cache.

The rules, tie-breaking and per-benchmark tolerances are written up in docs/verify.md.
"""

from beacon.verify.choice import extract_choice
from beacon.verify.extract import extract_answer
from beacon.verify.judge import Judge, JudgeResult
from beacon.verify.numbers import ParsedNumber, check_number, parse_number, parse_numbers
from beacon.verify.symbolic import check_math
from beacon.verify.text import anls, exact_match, normalize_text, yesno_label
from beacon.verify.verifier import SCORERS, ScoringHints, Verdict, verify

__all__ = [
    "SCORERS",
    "Judge",
    "JudgeResult",
    "ParsedNumber",
    "ScoringHints",
    "Verdict",
    "anls",
    "check_math",
    "check_number",
    "exact_match",
    "extract_answer",
    "extract_choice",
    "normalize_text",
    "parse_number",
    "parse_numbers",
    "verify",
    "yesno_label",
]
