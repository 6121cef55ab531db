"""The words of the brain's turns: short reasoning in the task's language, drawn to a token length."""

from __future__ import annotations

import random

from rehearsal.tokenizer import count

_EN = (
    "The issue points at the code path that handles this input.",
    "Before changing anything I want to see how the module is laid out.",
    "The tests should tell us whether the behaviour matches what the report describes.",
    "This function is called from the command line entry point, so the fix belongs there.",
    "An edge case is not covered: empty input and a missing column take the same branch.",
    "I will keep the change small and covered by the existing tests.",
    "The error message in the report comes from this check.",
    "Reading the surrounding code first avoids a fix in the wrong place.",
)
_KO = (
    "이슈가 가리키는 코드 경로를 먼저 확인하겠습니다.",
    "수정하기 전에 모듈 구조를 살펴보겠습니다.",
    "테스트로 보고된 동작이 재현되는지 확인할 수 있습니다.",
    "이 함수는 명령줄 진입점에서 호출되므로 그쪽을 고쳐야 합니다.",
    "빈 입력과 없는 열이 같은 분기를 타는 경계 사례가 있습니다.",
    "변경은 작게 유지하고 기존 테스트로 검증하겠습니다.",
    "보고된 오류 메시지는 이 검사에서 나옵니다.",
    "엉뚱한 곳을 고치지 않도록 주변 코드를 먼저 읽겠습니다.",
)


def filler(rng: random.Random, tokens: int, korean: bool, lead: str = "") -> str:
    """Sentences of the task's language until about `tokens` tokens (the lead first)."""
    pool = _KO if korean else _EN
    parts = [lead] if lead else []
    total = count(lead)
    while total < tokens:
        parts.append(rng.choice(pool))
        total += count(parts[-1]) + 1
    return " ".join(parts)


def thought(rng: random.Random, tokens: int, korean: bool, why: str) -> str:
    lead = f"다음 단계: {why}." if korean else f"Next: {why}."
    return filler(rng, tokens, korean, lead)


def final_text(rng: random.Random, tokens: int, korean: bool, turns: int) -> str:
    lead = (
        f"{turns}번의 단계를 거쳐 작업을 마쳤습니다. 변경 사항과 테스트 결과를 정리합니다."
        if korean
        else f"Done after {turns} steps. Summary of the change and the test results follows."
    )
    return filler(rng, tokens, korean, lead)
