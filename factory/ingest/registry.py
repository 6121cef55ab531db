"""`repos.yaml`: the repositories the factory harvests issues from.

The file is validated with pydantic; any error names the entry and the field, e.g.
``repos.yaml: repos[12] (psf/requests).license: 'MIT2' is not an SPDX id this project knows``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from factory.errors import FactoryError

# SPDX identifiers accepted in repos.yaml (the ones open-source repositories actually use).
SPDX_IDS = frozenset(
    [
        "0BSD",
        "AFL-3.0",
        "AGPL-3.0-only",
        "AGPL-3.0-or-later",
        "Apache-2.0",
        "Artistic-2.0",
        "BSD-2-Clause",
        "BSD-3-Clause",
        "BSD-3-Clause-Clear",
        "BSL-1.0",
        "BUSL-1.1",
        "CC0-1.0",
        "CC-BY-4.0",
        "CC-BY-SA-4.0",
        "curl",
        "ECL-2.0",
        "EPL-1.0",
        "EPL-2.0",
        "EUPL-1.2",
        "GPL-2.0-only",
        "GPL-2.0-or-later",
        "GPL-3.0-only",
        "GPL-3.0-or-later",
        "HPND",
        "ISC",
        "LGPL-2.1-only",
        "LGPL-2.1-or-later",
        "LGPL-3.0-only",
        "LGPL-3.0-or-later",
        "MIT",
        "MIT-0",
        "MPL-2.0",
        "MS-PL",
        "NCSA",
        "OFL-1.1",
        "OSL-3.0",
        "PHP-3.01",
        "PostgreSQL",
        "PSF-2.0",
        "Unlicense",
        "UPL-1.0",
        "Vim",
        "WTFPL",
        "Zlib",
    ]
)
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "repos.yaml"
_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")


class RegistryError(FactoryError, ValueError):
    """repos.yaml is unreadable or invalid; the message names the entry and field."""


class IssueFilter(BaseModel):
    """Which issues of a repository become tasks. Every field is optional in an override."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["open", "closed", "all"] = "all"
    labels: list[str] = Field(default_factory=list, description="require all of these labels")
    exclude_labels: list[str] = Field(default_factory=list)
    min_body_chars: int = Field(default=80, ge=0)
    max_body_chars: int = Field(default=8000, ge=1)
    max_issues: int = Field(default=30, ge=0, description="newest N issues kept per repository")


class RepoEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    language: str = Field(min_length=1)
    license: str
    issues: dict[str, object] | None = Field(default=None, description="overrides of defaults.issues")
    setup: str | None = Field(default=None, description="hint for the agent: how to install / test")
    # The command whose outcome a session records before the agent and after its patch; it wins over the
    # test steps of `setup:` and over detection from the build files (sandboxes/detect.py).
    test: str | None = Field(default=None, description="the repository's test command (baseline and after)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not an owner/repo name")
        return v

    @field_validator("test")
    @classmethod
    def _test(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or "\n" in v):
            raise ValueError("a test command is one non-empty line (join steps with &&)")
        return v.strip() if v is not None else None

    @field_validator("license")
    @classmethod
    def _license(cls, v: str) -> str:
        if v not in SPDX_IDS:
            raise ValueError(
                f"{v!r} is not an SPDX id this project knows ({', '.join(sorted(SPDX_IDS)[:6])}, …)"
            )
        return v

    @property
    def owner(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def repo(self) -> str:
        return self.name.split("/", 1)[1]


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    issues: IssueFilter = Field(default_factory=lambda: IssueFilter())


class Registry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    defaults: Defaults = Field(default_factory=Defaults)
    repos: list[RepoEntry] = Field(min_length=1)

    def filter_for(self, entry: RepoEntry) -> IssueFilter:
        """The effective issue filter for one repository (defaults + its overrides)."""
        merged = self.defaults.issues.model_dump() | (entry.issues or {})
        return IssueFilter.model_validate(merged)

    def by_name(self) -> dict[str, RepoEntry]:
        return {r.name.lower(): r for r in self.repos}


def _loc(data: object, loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location, naming the repository where there is one."""
    parts: list[str] = []
    node = data
    for i, key in enumerate(loc):
        if isinstance(key, int):
            parts[-1] += f"[{key}]"
            if isinstance(node, list) and 0 <= key < len(node):
                node = node[key]
                if i == 1 and isinstance(node, dict) and isinstance(node.get("name"), str):
                    parts[-1] += f" ({node['name']})"
            continue
        parts.append(str(key))
        node = node.get(key) if isinstance(node, dict) else None
    return ".".join(parts)


def parse(data: object, source: str = "repos.yaml") -> Registry:
    try:
        reg = Registry.model_validate(data)
    except ValidationError as exc:
        lines = [f"{source}: {_loc(data, e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise RegistryError("\n".join(lines)) from None
    seen: dict[str, int] = {}
    for i, r in enumerate(reg.repos):
        key = r.name.lower()
        if key in seen:
            raise RegistryError(f"{source}: repos[{i}] ({r.name}).name: duplicate of repos[{seen[key]}]")
        seen[key] = i
        try:
            reg.filter_for(r)
        except ValidationError as exc:
            e = exc.errors()[0]
            field = ".".join(str(p) for p in e["loc"])
            raise RegistryError(f"{source}: repos[{i}] ({r.name}).issues.{field}: {e['msg']}") from None
    return reg


def load(path: str | Path | None = None) -> Registry:
    p = Path(path) if path else DEFAULT_PATH
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise RegistryError(f"{p}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RegistryError(f"{p}: not valid YAML: {exc}") from None
    return parse(data, source=p.name)
