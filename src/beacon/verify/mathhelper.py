"""Main module of a math-verify helper process: `python -m beacon.verify.mathhelper`.

It exists so that the pool (`beacon.verify.mathworker`) and the check it runs
(`beacon.verify.symbolic`) do not import each other: symbolic imports the pool, and only this
entry point imports both.
"""

from __future__ import annotations

from beacon.verify.mathworker import serve
from beacon.verify.symbolic import compare_in_process, parse_math

if __name__ == "__main__":
    serve(compare_in_process, warm_up=lambda: parse_math("x^2"))
