"""`UserError`: a mistake the user can fix, shown by the command line as one line, no traceback.

Raise it (or a subclass) for bad input found at run time — a missing file, a folder that cannot
be written, a run folder made with other settings — with a message that says what is wrong and
what to do (STYLE.md §6). `beacon.cli.main` prints ``error: <message>`` and exits with status 2.
Anything else that escapes a command is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input the user can fix; the message names the value and the fix."""
