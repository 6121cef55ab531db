"""The target's tokenizer for the export: loaded once, and hashed for the card."""

from __future__ import annotations

import functools
import hashlib
from typing import Any


@functools.cache
def load_tokenizer(name: str) -> Any:
    # transformers is imported only when a tokenizer is asked for: it takes seconds to import, and an
    # export without one needs nothing of it. Cached: `harvest` checks the tokenizer loads before its
    # sessions and the export uses the same one (encode/decode only, never changed).
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"tokenizer {name!r} (ExportSettings.tokenizer, DFLASH_EXPORT_TOKENIZER) could not be loaded: {e}"
        ) from e


def tokenizer_sha256(tok: Any) -> str | None:
    """sha256 of the tokenizer's `tokenizer.json` form: what a reader checks their tokenizer against."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return None
    return hashlib.sha256(backend.to_str().encode()).hexdigest()
