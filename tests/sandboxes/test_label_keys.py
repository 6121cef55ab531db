"""Every Docker label key the sandboxes use is spelled once, in `sandboxes/labels.py` (issue 36): a key
re-spelled elsewhere drifts, and `gc` then misses what it should remove."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = re.compile(r"""["']dflash\.(sandbox|env)[."']""")


def test_label_keys_are_spelled_only_by_their_owner() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in ("sandboxes", "factory", "proxy", "trainer", "serving", "records")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "sandboxes" / "labels.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if KEY.search(line)
    ]
    assert found == []
