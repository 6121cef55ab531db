"""The task text an agent receives: the issue (in the session's language) wrapped in a short brief."""

from __future__ import annotations

from factory.db import Repo

_EN = """You are working in a checkout of the repository {repo} ({language}) at the commit where the
GitHub issue below was filed. Resolve the issue by changing the code in this repository: find the
cause, make the fix, and add or update tests where it makes sense. Do not ask questions; work on your own.
{setup}
Issue #{number}: {title}

{body}
"""

_KO = """지금 작업 중인 디렉터리는 {repo} 저장소({language})를 아래 GitHub 이슈가 등록된 시점의 커밋으로
체크아웃한 것입니다. 이 저장소의 코드를 수정해서 이슈를 해결하세요. 원인을 찾아 고치고, 필요하면 테스트를
추가하거나 수정하세요. 질문하지 말고 스스로 판단해서 진행하세요.
{setup}
이슈 #{number}: {title}

{body}
"""

_SETUP = {"en": "Setup hint: {hint}\n", "ko": "설치/테스트 방법: {hint}\n"}
# The repository's own test command (repos.yaml `test:`), the one the session's outcome is measured with:
# a real contributor is told how the project runs its tests.
_TEST = {"en": "Run the tests with: {test}\n", "ko": "테스트 실행 방법: {test}\n"}


def build_task(lang: str, repo: Repo, number: int, title: str, body: str) -> str:
    """The task of issue `number` of `repo`, its `title` and `body` already in `lang` (a translation's)."""
    template = _KO if lang == "ko" else _EN
    setup = _SETUP.get(lang, _SETUP["en"]).format(hint=repo.setup_hint) if repo.setup_hint else ""
    if repo.test_command:
        setup += _TEST.get(lang, _TEST["en"]).format(test=repo.test_command)
    return template.format(
        repo=repo.name,
        language=repo.language,
        setup=setup,
        number=number,
        title=title.strip(),
        body=body.strip(),
    )
