"""The editor configurations of the README, as the editor tests run them (so the README cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def editor_config(name: str) -> str:
    """The fenced block after `<!-- editor-config: NAME -->` in the README."""
    found = re.search(rf"<!-- editor-config: {re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", README.read_text(), re.S)
    assert found, f"README.md has no editor-config block {name!r}"
    return found.group(1) + "\n"
