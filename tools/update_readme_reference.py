"""Rewrite README.md's config reference (between the config-reference markers) from the code."""

from __future__ import annotations

import re
from pathlib import Path

from polyrl.config_reference import render_markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def main() -> None:
    text = README.read_text()
    new = re.sub(r"(<!-- config-reference:start -->\n).*?(<!-- config-reference:end -->)",
                 lambda m: m.group(1) + render_markdown() + m.group(2), text, flags=re.DOTALL)
    README.write_text(new)


if __name__ == "__main__":
    main()
