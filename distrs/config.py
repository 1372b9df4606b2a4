"""Typed settings for each process, read once at start-up and passed down.

Every field can be set from the environment with the ``DISTRS_`` prefix (e.g.
``DISTRS_REDIS_URL``); nested names are not used, so the list below *is* the env-var registry
(docs/configuration.md is generated from it by ``distrs config docs``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from distrs.core.priority import QueuePolicy
from distrs.store.sentinel_url import is_sentinel_url, parse_sentinel_url


class RedisMode(StrEnum):
    """How the Redis store runs: one primary, Redis Cluster (docs/store.md, Cluster), or one
    primary whose Sentinels name it (docs/store.md, Sentinel)."""

    STANDALONE = "standalone"
    CLUSTER = "cluster"
    SENTINEL = "sentinel"


class TenantQuota(BaseModel):
    """One tenant's own quotas (``tenant_quotas``); an unset field takes the deployment's default."""

    max_queued: int | None = Field(None, ge=0, description="Requests submitted and not finished; 0 = none.")
    max_result_bytes: int | None = Field(None, ge=0, description="JSON bytes of kept results; 0 = none.")


class _Base(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DISTRS_", extra="ignore")


class StoreSettings(_Base):
    redis_url: str | None = Field(None, description="Redis URL; unset means the in-process memory store.")
    redis_mode: RedisMode = Field(
        RedisMode.STANDALONE,
        validate_default=True,
        description="standalone: one Redis primary; cluster: Redis Cluster, redis_url naming any seed node "
        "(redis://host:port, no db); keys are grouped per task so each script touches one slot "
        "(docs/store.md, Cluster); sentinel: the primary its Sentinels name, redis_url being "
        "redis+sentinel://[[user]:password@]host:26379[,host:26379...]/MASTER[/DB] (rediss+sentinel:// "
        "for TLS; docs/store.md, Sentinel).",
    )
    redis_sentinel_password: SecretStr | None = Field(
        None,
        description="Sentinel mode: the Sentinels' own password (their requirepass), when they have one; "
        "the password in redis_url is the Redis nodes'.",
    )
    redis_wait_replicas: int = Field(
        1,
        ge=0,
        description="Cluster and sentinel modes: replicas that must have a registration, submission or "
        "completion (WAIT) before the caller is told it succeeded, so a failover loses none of them; "
        "0 = do not wait. After redis_wait_timeout_ms the call answers anyway and logs a warning.",
    )
    redis_wait_timeout_ms: int = Field(
        500,
        ge=1,
        description="Cluster and sentinel modes: the longest WAIT for replicas (redis_wait_replicas).",
    )
    history_batches: int = Field(8, ge=1, description="Finished batches kept per task as history (K).")
    queue_policy: QueuePolicy = Field(QueuePolicy.EBF, description="Queue order: ebf or fcfs.")
    default_batch_span_s: float = Field(
        600.0, gt=0, description="Assumed batch span T for a task with no history (EBF priority)."
    )
    result_ttl_s: int = Field(7 * 24 * 3600, ge=60, description="How long finished batches are kept.")
    redis_connect_timeout_s: float = Field(5.0, gt=0, description="Longest wait to open a Redis connection.")
    redis_max_connections: int = Field(
        128,
        ge=1,
        description="Redis connections one process opens at most; calls beyond them wait for a free one "
        "(up to redis_pool_timeout_s, then the store answers unavailable, 503) instead of failing at once.",
    )
    redis_pool_timeout_s: float = Field(
        5.0, gt=0, description="Longest wait for a free Redis connection when all are in use."
    )
    redis_keepalive_s: float = Field(
        10.0,
        ge=1,
        description="TCP keepalive idle time on Redis connections: a dead connection fails after "
        "about 2.5 times this (see store/redis/client.py).",
    )

    @field_validator("redis_mode")
    @classmethod
    def _sentinel_url_matches_mode(cls, mode: RedisMode, info: ValidationInfo) -> RedisMode:
        """A Sentinel URL and sentinel mode go together; a bad URL is named at start-up (checked
        here, on the mode, so that the error does not echo the URL and its password)."""
        url = info.data.get("redis_url")
        if not url:
            return mode
        if mode == RedisMode.SENTINEL:
            try:
                parse_sentinel_url(url)
            except ValueError as exc:
                raise ValueError(f"DISTRS_REDIS_URL (redis_url) in sentinel mode: {exc}") from None
        elif is_sentinel_url(url):
            raise ValueError(
                "DISTRS_REDIS_URL (redis_url) names Sentinels (redis+sentinel://): set "
                "DISTRS_REDIS_MODE=sentinel (or --redis-mode sentinel)"
            )
        return mode


class ProxySettings(StoreSettings):
    host: str = Field("127.0.0.1", description="Address the proxy listens on.")
    port: int = Field(8000, ge=0, le=65535, description="Port the proxy listens on (0 = any free port).")
    insecure: bool = Field(False, description="Accept requests without a token (local demos only).")
    tokens_file: str | None = Field(
        None, description="YAML/JSON file of tokens: [{token, role: trainer|worker|admin, tenant?}]."
    )
    tokens: str | None = Field(
        None, description="Inline tokens 'TOKEN:ROLE[:TENANT],...' (for env-based secrets)."
    )
    pipelines_file: str | None = Field(None, description="YAML overriding the built-in stages/types.")
    lease_ttl_s: float = Field(
        4.5,
        gt=0,
        description="Lease lifetime without a heartbeat. Workers are told to heartbeat every third of "
        "it (1.5 s), so a heartbeat may come up to 3 s (two periods) late without the lease expiring, "
        "and a lease whose worker stopped is requeued within this time plus reaper_interval_s; a long "
        "run stays alive by its heartbeats.",
    )
    max_attempts: int = Field(3, ge=1, description="Leases per request before it ends internal_error.")
    worker_credential_ttl_s: float = Field(
        300.0,
        gt=0,
        description="Lifetime of a per-worker credential (proxy/credentials.py); workers renew theirs "
        "with their heartbeats once half of it has passed.",
    )
    worker_credential_secret: str | None = Field(
        None,
        description="Key that signs per-worker credentials; unset: derived from the tokens, which "
        "every proxy replica of a release shares.",
    )
    max_payload_bytes: int = Field(1 << 20, ge=1024, description="Largest accepted request payload.")
    run_code_max_payload_bytes: int = Field(
        16 << 20,
        ge=1024,
        description="Largest POST /run_code request (as its judged payload). SandboxFusion sets no "
        "limit of its own; 16 MiB holds files at their 8 MiB limit (base64), a source at "
        "DISTRS_JUDGE_MAX_CODE_BYTES and several MiB of stdin.",
    )
    max_body_bytes: int = Field(64 << 20, ge=1024, description="Largest accepted HTTP body.")
    max_artifact_bytes: int = Field(16 << 20, ge=1024, description="Largest artifact set per lease.")
    max_bulk: int = Field(4096, ge=1, description="Most requests in one bulk submit.")
    max_wait_s: float = Field(60.0, gt=0, description="Longest long-poll a client may ask for.")
    reaper_interval_s: float = Field(
        0.25, gt=0, description="How often expired leases are requeued (one store call per sweep)."
    )
    compat_reward_type: str = Field(
        "math",
        description="Reward type POST /get_reward scores with unless X-DistRS-Reward-Type says otherwise.",
    )
    rollout_start_skew_s: float = Field(
        30.0,
        ge=0,
        description="How far before its registration a batch's rollout_started_at may lie; earlier "
        "(or future) values are clamped. The EBF queues rank batches by the completion time "
        "estimated from it, so an unbounded value would let a trainer backdate its way ahead of "
        "other tenants.",
    )
    compat_wait_s: float = Field(
        600.0,
        gt=0,
        description="How long /run_code and /get_reward wait for their batch, and the most an "
        "X-DistRS-Timeout header may ask for.",
    )
    compat_fault_retries: int = Field(
        2,
        ge=0,
        description="How many more times /run_code, /get_reward and /slime/reward run a request "
        "that ended internal_error (a service fault, never the model's) before reporting it.",
    )
    metrics_tenant_labels: bool = Field(
        False,
        description="Label metrics with TENANT/TASK names; off: the task label is 'all' (names no tenant).",
    )
    metrics_auth: bool = Field(
        False, description="GET /metrics needs a bearer token with role metrics or admin."
    )
    docs_enabled: bool = Field(True, description="Serve /docs and /openapi.json.")
    max_header_bytes: int = Field(
        64 << 10,
        ge=4096,
        description="Largest request line + headers; more is answered 431 and the connection closed.",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="Longest time to receive a request's headers (slow clients are closed)."
    )
    idle_timeout_s: float = Field(
        15.0, gt=0, description="An idle keep-alive connection is closed after this many seconds."
    )
    retry_after_s: int = Field(
        2, ge=1, description="Retry-After of a 503 answered while the store is unavailable."
    )
    tenant_max_queued: int = Field(
        0,
        ge=0,
        description="Most requests a tenant may have submitted and not yet finished (queued or "
        "running); a submission past it is refused whole with 429 quota_exceeded. 0 = no limit.",
    )
    tenant_max_result_bytes: int = Field(
        0,
        ge=0,
        description="Most JSON bytes of finished results a tenant may have kept in the store (they "
        "leave with their batch after result_ttl_s); while at or past it, submissions are refused "
        "with 429 quota_exceeded. 0 = no limit.",
    )
    tenant_quotas: dict[str, TenantQuota] = Field(
        default_factory=dict,
        description='Per-tenant overrides as JSON, e.g. {"alice": {"max_queued": 50000, '
        '"max_result_bytes": 0}}; a field left out takes tenant_max_queued / tenant_max_result_bytes.',
    )
    quota_retry_after_s: int = Field(
        5,
        ge=1,
        description="Retry-After of a 429 for the queued-requests quota (the result-bytes quota "
        "answers the time until the tenant's earliest kept results expire).",
    )


class WorkerSettings(_Base):
    proxy_url: str = Field("http://127.0.0.1:8000", description="Proxy the worker pulls from.")
    stage: str = Field("compile", description="Stage this worker serves.")
    token: str | None = Field(
        None,
        description="Bearer token with role worker. The worker re-executes itself without it in its "
        "environment (distrs/worker/isolation.py), so no process it starts can read it.",
    )
    token_file: str | None = Field(
        None, description="File holding the worker token (read once at start; wins over token)."
    )
    worker_id: str | None = Field(None, description="Stable id; defaults to hostname-pid.")
    wait_s: float = Field(20.0, gt=0, description="Long-poll time per lease request.")
    heartbeat_s: float = Field(
        5.0,
        gt=0,
        description="Longest heartbeat period while running a lease; a shorter one the proxy asks "
        "for in the lease (a third of its lease TTL) takes precedence.",
    )
    max_bundle: int = Field(
        32,
        ge=1,
        le=128,
        description="Most requests leased in one call (a bundle); 1 = one request per lease call.",
    )
    bundle_target_s: float = Field(
        0.25,
        gt=0,
        description="A bundle holds as many requests as run in about this time by the stage's "
        "measured mean run time (long stages: one at a time).",
    )
    reward_types: str | None = Field(
        None, description="Comma-separated reward types to serve (default: every type using the stage)."
    )
    health_port: int | None = Field(
        None, ge=0, le=65535, description="Port for /healthz, /readyz and the worker's /metrics."
    )
    gpu_health: bool = Field(
        True,
        description="On a GPU stage with a GPU device: check the GPU (NVML + a test kernel) before "
        "the first lease and after CUDA errors, and stay not ready while it is sick.",
    )
    gpu_other_memory_mb: int = Field(
        1024, ge=0, description="GPU memory other processes may hold before the GPU counts as sick (MiB)."
    )
    gpu_probe_timeout_s: float = Field(30.0, gt=0, description="Time limit of the GPU test kernel.")
    gpu_recheck_s: float = Field(60.0, gt=0, description="Period of re-checks of a sick GPU.")
    gpu_sharing: Literal["", "exclusive", "mig", "time-sliced"] = Field(
        "",
        description="How this worker's GPU is shared (results are flagged for mig and time-sliced); "
        "empty: mig for a nvidia.com/mig-* resource or a MIG- device, else exclusive.",
    )
    gpu_resource: str = Field(
        "",
        description="The extended resource the pod got its GPU as (nvidia.com/gpu, nvidia.com/mig-1g.10gb).",
    )
    pipelines_file: str | None = Field(None, description="YAML overriding the built-in stages/types.")
    execution_log: str | None = Field(
        None,
        description="File the worker appends one JSON line to as each stage run starts (task, "
        "request_id, stage, attempt, lease_id, worker_id): an audit of what actually ran, which "
        "results alone cannot show (a run whose worker died leaves no result).",
    )

    def read_token(self) -> str | None:
        """The token from ``token_file`` when set, else ``token``."""
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as f:
                return f.read().strip() or None
        return self.token


class PlannerSettings(StoreSettings):
    proxy_url: str | None = Field(None, description="Proxy to read state from when not sharing a store.")
    policy: str = Field("distrs", description="Scaling policy: distrs | history | static.")
    max_extra_delay_s: float = Field(1.0, ge=0, description="D: tolerated extra delay per batch.")
    static_replicas: int = Field(2, ge=0, description="Replicas per stage for the static policy.")
    max_replicas: int = Field(64, ge=1, description="Upper bound per stage.")
    min_replicas: int = Field(0, ge=0, description="Lower bound per stage.")
    interval_s: float = Field(5.0, gt=0, description="Re-plan period even without events.")
    scale_down_margin_s: float = Field(
        15.0,
        ge=0,
        description="Scale-down hysteresis: shrink a stage only while the plan still meets every "
        "deadline this many seconds early (about a worker's start time; 0 = off).",
    )
    scale_up_lookahead_s: float = Field(
        0.0,
        ge=0,
        description="Start new workers only when the plan keeps them busy within this many seconds; "
        "set to interval_s plus a worker's start time (0 = start every planned worker at once).",
    )
    timeout_check: Literal["enqueue", "start"] = Field(
        "enqueue",
        description="Timeout-aware rule: check LT when a request joins a queue (enqueue) or just "
        "before a waiting one starts (start, stricter).",
    )
    default_first_arrival_s: float = Field(
        30.0,
        ge=0,
        description="First-batch fallback (no history of the reward type): the first request is "
        "assumed this long after the rollout starts, the last at default_batch_span_s.",
    )
    learn_min_finished: int = Field(
        32,
        ge=0,
        description="A task's first batch (no history of its reward type) takes its stage times from "
        "the finished requests of the active first batches once this many have finished (0 = off).",
    )
    actuator: str = Field("local", description="local | kubernetes")
    namespace: str = Field("default", description="Kubernetes namespace of the worker Deployments.")
    deployment_prefix: str = Field("distrs-worker-", description="Worker Deployment name = prefix+stage.")
    metrics_port: int = Field(9101, ge=0, le=65535, description="Port of the planner's /metrics.")
    pipelines_file: str | None = Field(None, description="YAML overriding the built-in stages/types.")
    kubeconfig: str | None = Field(
        None, description="Kubeconfig path (default: in-cluster, then ~/.kube/config)."
    )
    leader_lease: str | None = Field(
        None,
        description="coordination.k8s.io Lease name for leader election (set when several planners run).",
    )
    leader_identity: str | None = Field(
        None, description="This planner's identity in the Lease (default: hostname)."
    )
    api_timeout_s: float = Field(10.0, gt=0, description="Read timeout of one Kubernetes API call.")
    metrics_tenant_labels: bool = Field(
        False, description="Export per-batch estimates labelled with TENANT/TASK names on /metrics."
    )
    store_retry_s: float = Field(
        2.0, gt=0, description="Wait between attempts while the store is unreachable (start-up included)."
    )
    leader_lease_duration_s: int = Field(
        15, ge=5, description="Lease duration; a silent leader is replaced after it."
    )


class SessionSettings(BaseSettings):
    """Stateful sessions (docs/sessions.md): the proxy's rules, the planner's pool, the workers'
    room. One class for every process, read from ``DISTRS_SESSION_*``."""

    model_config = SettingsConfigDict(env_prefix="DISTRS_SESSION_", extra="ignore")

    enabled: bool = Field(
        True, description="Serve /v1/sessions (the proxy) and run a session pool (distrs up)."
    )
    max_open_per_tenant: int = Field(
        64, ge=0, description="Sessions a tenant may have open at once; 0 = none."
    )
    tenant_max_open: dict[str, int] = Field(
        default_factory=dict,
        description='Per-tenant quota of open sessions, JSON {"tenant": n} (0 = none); others get max_open_per_tenant.',
    )
    idle_timeout_s: float = Field(600.0, gt=0, description="Default idle time after which a session ends.")
    max_idle_timeout_s: float = Field(
        3600.0, gt=0, description="Largest idle_timeout_s a caller may ask for."
    )
    max_lifetime_s: float = Field(3600.0, gt=0, description="Default lifetime of a session.")
    max_max_lifetime_s: float = Field(
        86400.0, gt=0, description="Largest max_lifetime_s a caller may ask for."
    )
    exec_timeout_s: float = Field(30.0, gt=0, description="Default timeout_s of an exec.")
    max_exec_timeout_s: float = Field(600.0, gt=0, description="Largest timeout_s of an exec.")
    create_wait_s: float = Field(
        60.0,
        gt=0,
        description="How long POST /v1/sessions waits for a worker to open it (a pool scaled to zero starts one).",
    )
    op_grace_s: float = Field(
        30.0,
        gt=0,
        description="A call's deadline past its own timeout (interrupt, kill, report; a create's jail start).",
    )
    worker_ttl_s: float = Field(
        15.0, gt=0, description="A session worker silent this long is gone: its sessions end session_lost."
    )
    closed_ttl_s: float = Field(
        3600.0, gt=0, description="How long an ended session still answers its reason (then 404)."
    )
    sweep_interval_s: float = Field(
        1.0, gt=0, description="Period of the proxy's sweep (lost workers, expiry, overdue calls)."
    )
    max_file_bytes: int = Field(
        16 << 20, ge=1024, description="Largest file read or written through the API."
    )
    max_memory_mb: int = Field(4096, ge=32, description="Largest limits.memory_mb a caller may ask for.")
    max_disk_mb: int = Field(4096, ge=1, description="Largest limits.disk_mb.")
    max_processes: int = Field(512, ge=4, description="Largest limits.max_processes.")
    max_exec_cpu_s: float = Field(600.0, gt=0, description="Largest limits.exec_cpu_s.")
    max_total_cpu_s: float = Field(86400.0, gt=0, description="Largest limits.total_cpu_s.")
    per_worker: int = Field(
        200,
        ge=1,
        description="Sessions one session worker holds (bounded by the sandbox's uid pool, uid_count).",
    )
    exec_slots_per_worker: int = Field(
        16,
        ge=1,
        description="Calls one session worker runs at once (threads); the planner sizes the pool by them too.",
    )
    min_workers: int = Field(0, ge=0, description="Session workers kept up with no session open.")
    max_workers: int = Field(8, ge=1, description="Most session workers the planner asks for.")
    headroom: float = Field(
        0.25,
        ge=0,
        description="Room kept free in the pool for sessions about to open, as a fraction of those open.",
    )
    poll_wait_s: float = Field(5.0, gt=0, description="Long-poll of a session worker (its liveness beat).")
    spares_min: int = Field(
        2, ge=0, description="Pre-opened jails a session worker keeps for creates with default limits."
    )
    spares_window_s: float = Field(
        120.0,
        gt=0,
        description="A worker keeps as many spare jails as creates it served over this window (a trainer "
        "step's burst), within its free capacity.",
    )

    def quota(self, tenant: str) -> int | None:
        """The open-session quota of ``tenant`` (None: none)."""
        n = self.tenant_max_open.get(tenant, self.max_open_per_tenant)
        return n or None
