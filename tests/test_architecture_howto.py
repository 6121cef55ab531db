"""docs/architecture.md "How to add" names the files a change touches: every one of them exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def named_files() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## How to add", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"`([\w/.-]+\.(?:py|md))`", section)


def test_every_file_the_how_to_names_exists() -> None:
    names = named_files()
    assert len(names) >= 10  # the section was found and names the files
    missing = [n for n in names if not (ROOT / n).is_file()]
    assert missing == []
