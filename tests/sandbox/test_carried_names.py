"""Which carried variables a call's code may read (`episode._global_names`).

A call unpickles, and waits for the previous save of, only the carried variables its code may
read, so this set must never miss a name the code can read before assigning it. The analysis
reads bytecode units itself; these cases pin it on the shapes that break a naive reading:
loads before stores, branches, loops, `try`, `del`, functions, comprehensions, `global`, and
name indexes over 255 (EXTENDED_ARG).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import beacon.sandbox

CASES = {
    "crop = image.crop((1, 2, 3, 4))\nsmall = crop.resize((2, 2))\nsmall.show()": ["image"],
    "x = x + 1": ["x"],
    "x += 1": ["x"],
    "a, b = b, a": ["a", "b"],
    # a store under a branch may not run: the name after it may be last call's
    "if c:\n    x = 1\nprint(x)": ["c", "print", "x"],
    # `x`, assigned before the first jump, stays assigned; `y`, assigned after it, does not
    "x = 1\nif c:\n    y = x\nprint(x, y)": ["c", "print", "y"],
    "try:\n    a = 1\nexcept Exception:\n    pass\nprint(a)": ["Exception", "a", "print"],
    "with open(p) as f:\n    t = f.read()\nprint(t)": ["f", "open", "p", "print", "t"],
    "x = 1\nfor i in range(3):\n    x = x + i\nprint(x, i)": ["i", "print", "range"],
    "assert ok\nm = 1\nprint(m)": ["m", "ok", "print"],
    "a = 1\ndel a\nprint(a)": ["print"],
    "del old\nprint(1)": ["old", "print"],
    # a function may run before the assignment below it: what it reads counts
    "def f():\n    return crop\nimg = f()\ncrop = 2": ["crop"],
    "lam = lambda: crop\nprint(lam())": ["crop", "print"],
    "z = [v * k for v in vals]\nprint(z)": ["k", "print", "vals"],
    "global g\ng = 1\nprint(g, h)": ["h", "print"],
    "global q\nprint(w)\nprint(q)": ["print", "q", "w"],  # LOAD_GLOBAL at the top level
    "import os\nprint(os, q)": ["print", "q"],
    "\n".join(f"v{i} = {i}" for i in range(300)) + "\nprint(v299, w)": ["print", "w"],
}

PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import episode
cases = json.loads(sys.stdin.read())
print(json.dumps([sorted(episode._global_names(compile(c, "<code>", "exec"))) for c in cases]))
"""


def test_names_a_call_may_read_from_carried_variables() -> None:
    folder = os.path.dirname(beacon.sandbox.__file__)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, folder],
        input=json.dumps(list(CASES)),
        capture_output=True,
        text=True,
        check=True,
    )
    got = dict(zip(CASES, json.loads(out.stdout), strict=True))
    assert got == CASES
