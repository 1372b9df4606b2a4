"""distrs-client: the trainer side of the DistRS reward service.

    from distrs_client import RewardClient

    with RewardClient("http://distrs:8000", token="...") as client:
        client.start_batch("task", "step-7", size=2048, reward_type="cuda")   # rollout starts
        client.submit("task", "step-7", "req-0", "cuda", {"code": ..., "tests": [...]})  # per rollout
        results = client.results("task", "step-7")                            # in submission order

Stateful sessions for multi-turn tool calls: ``SessionClient`` / ``AsyncSessionClient``
(``distrs_client.sessions``). See the package README for the adapters (verl, TRL), the rollout
hooks and the error classes.
"""

from distrs_client.aio import AsyncRewardClient
from distrs_client.errors import (
    APIError,
    AuthenticationError,
    BadRequestError,
    ClientClosedError,
    ConflictError,
    DistrsError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ResultsTimeoutError,
    RewardFaultError,
    ServerError,
    ServiceUnavailableError,
    SessionGoneError,
)
from distrs_client.extract import build_payload, extract_code
from distrs_client.kernelbench import kernelbench_payload, load_problem
from distrs_client.models import RewardResult, StageTiming
from distrs_client.retry import RetryPolicy
from distrs_client.sessions import (
    AsyncSession,
    AsyncSessionClient,
    ExecError,
    ExecResult,
    Session,
    SessionClient,
)
from distrs_client.sync import RewardClient
from distrs_client.transport import HttpxTransport, Response, Transport

__all__ = [
    "APIError",
    "AsyncRewardClient",
    "AsyncSession",
    "AsyncSessionClient",
    "AuthenticationError",
    "BadRequestError",
    "ClientClosedError",
    "ConflictError",
    "DistrsError",
    "ExecError",
    "ExecResult",
    "HttpxTransport",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitedError",
    "Response",
    "ResultsTimeoutError",
    "RetryPolicy",
    "RewardClient",
    "RewardFaultError",
    "RewardResult",
    "ServerError",
    "ServiceUnavailableError",
    "Session",
    "SessionClient",
    "SessionGoneError",
    "StageTiming",
    "Transport",
    "build_payload",
    "extract_code",
    "kernelbench_payload",
    "load_problem",
]
__version__ = "0.1.0"
