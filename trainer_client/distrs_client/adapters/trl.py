"""A TRL ``reward_funcs`` callable backed by DistRS.

``GRPOTrainer(reward_funcs=[DistrsReward(url, reward_type="math")], ...)``: TRL calls it with the
step's ``prompts`` and ``completions`` plus every dataset column as a keyword list; each call is
one DistRS batch. Completions may be plain strings or conversations (the last message's content is
used). The ground truth comes from the ``answer_column`` keyword (default: the first of
``ground_truth``, ``solution``, ``answer``), code tests from ``tests``/``test_cases``, and an
optional per-row ``reward_type`` column overrides the default type.

It never raises into TRL's training step: a row it cannot score gets ``None``, which TRL treats as
"no reward" rather than 0 - a row whose reward type the service does not serve (asked once with
``GET /v1/reward-types``) or whose payload cannot be built is left out of the batch before anything
is sent, so it costs no waiting; a row the service judged ``invalid`` is ``None`` too. A row the
service failed on (``internal_error``: its fault, not the model's) is retried ``fault_retries``
times (default 2, the cause logged once) and is ``None`` if it still fails - never a 0
(``adapters/faults.py``). If the service cannot be reached at all, every row is ``None`` and the
error is logged.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any

from distrs_client.adapters.common import CODE_TYPES, payload_for
from distrs_client.adapters.faults import FAULT_RETRIES, score_retrying
from distrs_client.models import RewardResult
from distrs_client.shared import shared_client
from distrs_client.sync import RewardClient

log = logging.getLogger(__name__)

_ANSWER_COLUMNS = ("ground_truth", "solution", "answer")
_TEST_COLUMNS = ("tests", "test_cases")
# Statuses that say nothing about the completion: no reward rather than 0.
_UNSCORED = ("invalid", "internal_error")


def row_score(result: RewardResult) -> float | None:
    """The score, or None when the row could not be scored (bad row or service failure)."""
    return None if result.status in _UNSCORED else result.score


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
        fault_retries: int = FAULT_RETRIES,
    ) -> None:
        self._url, self._token = url, token
        self._client = client
        self.reward_type = reward_type
        self.task = task
        self.answer_column = answer_column
        self.timeout = timeout
        self.fault_retries = fault_retries
        self._seq = itertools.count()
        self._served_types: frozenset[str] | None = None
        self._run = uuid.uuid4().hex[:12]
        # TRL logs each reward function under its __name__.
        self.__name__ = f"distrs_{reward_type}"

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        try:
            return self._score(completions, kwargs)
        except Exception:  # TRL's training step must go on; a None row is "no reward"
            log.exception("DistRS reward call failed; %d rows get no reward", len(completions))
            return [None] * len(completions)

    def _score(self, completions: list[Any], kwargs: dict[str, Any]) -> list[float | None]:
        n = len(completions)
        answers = self._column(kwargs, (self.answer_column,) if self.answer_column else _ANSWER_COLUMNS, n)
        tests = self._column(kwargs, _TEST_COLUMNS, n)
        types = self._column(kwargs, ("reward_type",), n)
        client = self._client or shared_client(self._url, self._token)
        served = self._served(client)
        rows: list[int] = []
        items = []
        for i, comp in enumerate(completions):
            rt = str(types[i] or self.reward_type)
            if served is not None and rt not in served:
                continue  # the service would refuse it: no reward, and nothing to wait for
            gt = tests[i] if rt in CODE_TYPES and tests[i] is not None else answers[i]
            try:
                payload = payload_for(rt, completion_text(comp), gt, None)
            except (TypeError, ValueError):
                continue
            rows.append(i)
            items.append((rt, payload))
        out: list[float | None] = [None] * n
        if not items:
            return out
        state = kwargs.get("trainer_state")
        step = getattr(state, "global_step", None)
        batch_id = f"{self._run}-{next(self._seq)}" + (f"-step{step}" if step is not None else "")
        results, _ = score_retrying(
            lambda its, bid: client.score_many(its, task=self.task, batch_id=bid, timeout=self.timeout),
            items,
            batch_id,
            task=self.task,
            retries=self.fault_retries,
        )
        for i, r in zip(rows, results, strict=True):
            out[i] = row_score(r)
        return out

    def _served(self, client: RewardClient) -> frozenset[str] | None:
        """The service's reward types, asked once; None (no filtering) if it cannot say."""
        if self._served_types is None:
            try:
                self._served_types = frozenset(client.reward_types())
            except Exception:  # an older service without the endpoint: let it judge each row
                log.warning("cannot list the service's reward types; sending every row", exc_info=True)
                return None
        return self._served_types

    @staticmethod
    def _column(kwargs: dict[str, Any], names: tuple[str, ...], n: int) -> list[Any]:
        for name in names:
            col = kwargs.get(name)
            if isinstance(col, list) and len(col) == n:
                return col
        return [None] * n
