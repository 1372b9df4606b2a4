"""A TRL ``reward_funcs`` callable backed by DistRS.

``GRPOTrainer(reward_funcs=[DistrsReward(url, reward_type="math")], ...)``: TRL calls it with the
step's ``prompts`` and ``completions`` plus every dataset column as a keyword list; each call is
one DistRS batch. Completions may be plain strings or conversations (the last message's content is
used). The ground truth comes from the ``answer_column`` keyword (default: the first of
``ground_truth``, ``solution``, ``answer``), code tests from ``tests``/``test_cases``, and an
optional per-row ``reward_type`` column overrides the default type. Returns ``None`` for a row the
service failed to score (``internal_error``), which TRL treats as "no reward" rather than 0.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from distrs_client.adapters.common import CODE_TYPES, payload_for, score_or_none
from distrs_client.shared import shared_client
from distrs_client.sync import RewardClient

_ANSWER_COLUMNS = ("ground_truth", "solution", "answer")
_TEST_COLUMNS = ("tests", "test_cases")


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the content of the last message."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, dict):
            return str(last.get("content", ""))
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return str(completion)


class DistrsReward:
    """``f(prompts, completions, **kwargs) -> list[float | None]`` for TRL's ``reward_funcs``."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        reward_type: str = "math",
        task: str = "trl",
        answer_column: str | None = None,
        timeout: float | None = None,
        client: RewardClient | None = None,
    ) -> None:
        self._url, self._token = url, token
        self._client = client
        self.reward_type = reward_type
        self.task = task
        self.answer_column = answer_column
        self.timeout = timeout
        self._seq = itertools.count()
        self._run = uuid.uuid4().hex[:12]
        # TRL logs each reward function under its __name__.
        self.__name__ = f"distrs_{reward_type}"

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        n = len(completions)
        answers = self._column(kwargs, (self.answer_column,) if self.answer_column else _ANSWER_COLUMNS, n)
        tests = self._column(kwargs, _TEST_COLUMNS, n)
        types = kwargs.get("reward_type") or [self.reward_type] * n
        items = []
        for i, comp in enumerate(completions):
            rt = str(types[i] or self.reward_type)
            gt = tests[i] if rt in CODE_TYPES and tests[i] is not None else answers[i]
            items.append((rt, payload_for(rt, completion_text(comp), gt, None)))
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        batch_id = f"{self._run}-{next(self._seq)}" + (f"-step{step}" if step is not None else "")
        client = self._client or shared_client(self._url, self._token)
        results = client.score_many(items, task=self.task, batch_id=batch_id, timeout=self.timeout)
        return [score_or_none(r) for r in results]

    @staticmethod
    def _column(kwargs: dict[str, Any], names: tuple[str, ...], n: int) -> list[Any]:
        for name in names:
            col = kwargs.get(name)
            if isinstance(col, list) and len(col) == n:
                return col
        return [None] * n
