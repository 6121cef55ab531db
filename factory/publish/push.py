"""Upload an exported dataset folder to the Hugging Face Hub (resumable `upload_large_folder`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def files_to_push(folder: Path) -> list[tuple[str, int]]:
    """(path relative to the folder, bytes) of everything that would go; hidden files stay home."""
    out = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            out.append((rel.as_posix(), p.stat().st_size))
    return out


def push(
    folder: Path,
    repo_id: str,
    *,
    dry_run: bool = False,
    private: bool = False,
    token: str | None = None,
    api: Any = None,
) -> list[tuple[str, int]]:
    files = files_to_push(folder)
    if not (folder / "README.md").is_file():
        raise FileNotFoundError(f"{folder} has no README.md: run `python -m factory export` first")
    if dry_run:
        return files
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    api.upload_large_folder(repo_id=repo_id, folder_path=str(folder), repo_type="dataset")
    return files
