import pytest

from factory.ingest import registry
from factory.ingest.registry import RegistryError, parse


def test_bundled_repos_yaml_is_valid_and_large():
    reg = registry.load()
    assert len(reg.repos) >= 600
    names = [r.name.lower() for r in reg.repos]
    assert len(names) == len(set(names))
    langs = {r.language for r in reg.repos}
    assert {"Python", "TypeScript", "Go", "Rust", "Java", "C++"} <= langs
    # weighted toward code: no documentation-only licenses dominate
    assert sum(r.license.startswith("CC-") for r in reg.repos) == 0


def test_overrides_merge_with_defaults():
    reg = parse(
        {
            "defaults": {"issues": {"max_issues": 10, "min_body_chars": 50}},
            "repos": [
                {"name": "a/b", "language": "Python", "license": "MIT", "issues": {"labels": ["bug"]}},
                {"name": "c/d", "language": "Go", "license": "Apache-2.0"},
            ],
        }
    )
    f = reg.filter_for(reg.repos[0])
    assert f.labels == ["bug"]
    assert f.max_issues == 10
    assert f.min_body_chars == 50
    assert reg.filter_for(reg.repos[1]).labels == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "a/b", "language": "Python", "license": "MIT2"}, "repos[0] (a/b).license"),
        ({"name": "no-slash", "language": "Python", "license": "MIT"}, "repos[0] (no-slash).name"),
        ({"name": "a/b", "license": "MIT"}, "repos[0] (a/b).language"),
        ({"name": "a/b", "language": "Python", "license": "MIT", "stars": 3}, "repos[0] (a/b).stars"),
        (
            {"name": "a/b", "language": "Python", "license": "MIT", "issues": {"max_issues": -1}},
            "repos[0] (a/b).issues.max_issues",
        ),
        (
            {"name": "a/b", "language": "Python", "license": "MIT", "issues": {"colour": 1}},
            "repos[0] (a/b).issues.colour",
        ),
    ],
)
def test_errors_name_the_entry_and_field(entry, message):
    with pytest.raises(RegistryError) as ei:
        parse({"repos": [entry]})
    assert message in str(ei.value)


def test_duplicates_are_rejected():
    with pytest.raises(RegistryError, match=r"repos\[1\] \(A/B\).name: duplicate of repos\[0\]"):
        parse(
            {
                "repos": [
                    {"name": "a/b", "language": "Python", "license": "MIT"},
                    {"name": "A/B", "language": "Python", "license": "MIT"},
                ]
            }
        )


def test_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(RegistryError, match="cannot read"):
        registry.load(tmp_path / "nope.yaml")
    p = tmp_path / "r.yaml"
    p.write_text("repos: [\n")
    with pytest.raises(RegistryError, match="not valid YAML"):
        registry.load(p)
