"""The `beacon` command line (`serve ...` in argv) with every hf engine sampling through the tests'
scripted-choice processor."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from grpo_helpers import install_choice_processor

if __name__ == "__main__":
    install_choice_processor()
    from beacon.cli import app

    sys.exit(app(sys.argv[1:]))
