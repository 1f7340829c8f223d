"""Which carried variables a call's code may read (`episode.read_names`).

A call unpickles only the carried variables its code may read, so this set must never miss a
name the code can read before assigning it. These cases pin it on the shapes that break a
naive reading: loads before stores, branches, loops, `try`, `with`, `del`, functions,
lambdas, comprehensions, `global`, imports and augmented assignment.
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
    "a, *rest = [1, 2]\nprint(a, rest)": ["print"],
    "a[0] = 1": ["a"],
    "a.x = 1": ["a"],
    "n: int\nprint(n)": ["int", "n", "print"],  # an annotation alone assigns nothing
    # a store under a branch may not run: the name after it may be last call's
    "if c:\n    x = 1\nprint(x)": ["c", "print", "x"],
    # `x`, assigned before the first branch, stays assigned; `y`, assigned after it, does not
    "x = 1\nif c:\n    y = x\nprint(x, y)": ["c", "print", "y"],
    "try:\n    a = 1\nexcept Exception:\n    pass\nprint(a)": ["Exception", "a", "print"],
    "with open(p) as f:\n    t = f.read()\nprint(t)": ["f", "open", "p", "print", "t"],
    "x = 1\nfor i in range(3):\n    x = x + i\nprint(x, i)": ["i", "print", "range"],
    "while w:\n    q = 1\nprint(q)": ["print", "q", "w"],
    # a failed assert ends the code, so what follows it runs only after it passed
    "assert ok\nm = 1\nprint(m)": ["ok", "print"],
    "y = a if c else b\nprint(y)": ["a", "b", "c", "print"],
    "a = 1\ndel a\nprint(a)": ["print"],
    "del old\nprint(1)": ["old", "print"],
    # a function may run before the assignment below it: what it reads counts
    "def f():\n    return crop\nimg = f()\ncrop = 2": ["crop"],
    "lam = lambda: crop\nprint(lam())": ["crop", "print"],
    "class C:\n    size = base\nprint(C)": ["base", "print"],
    # a comprehension's own variable counts too (at worst a carried `v` is loaded for nothing)
    "z = [v * k for v in vals]\nprint(z)": ["k", "print", "v", "vals"],
    "global g\ng = 1\nprint(g, h)": ["h", "print"],
    "import os\nimport PIL.Image\nfrom math import pi as p\nprint(os, PIL, p, q)": ["print", "q"],
    "from os import *\nprint(path)": ["path", "print"],
    "print(y, (y := 1))": ["print", "y"],
    "\n".join(f"v{i} = {i}" for i in range(300)) + "\nprint(v299, w)": ["print", "w"],
}

PROBE = """
import ast, json, sys
sys.path.insert(0, sys.argv[1])
import child as episode
cases = json.loads(sys.stdin.read())
print(json.dumps([sorted(episode.read_names(ast.parse(c))) for c in cases]))
"""


def test_names_a_call_may_read_from_carried_variables() -> None:
    """In a process of its own: `episode` is the jail's copy, which imports as top level."""
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
