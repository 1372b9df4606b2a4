"""Pure edge rules: the lone-surrogate locator, tenant scoping of task names, token tenants,
and the task label mapping of the metrics."""

from __future__ import annotations

import pytest

from distrs.metrics import Metrics
from distrs.proxy import body
from distrs.proxy.auth import Principal, Role, TokenTable, public_task, scoped_task
from distrs.proxy.deps import act_as
from distrs.proxy.errors import ApiError


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("ok", None),
        ("\ud800", "body"),
        ({"a": ["x", {"b": "y\udfff"}]}, "a.1.b"),
        ({"requests": [{"p": {}}, {"p": {"c": "\ud83d"}}]}, "requests.1.p.c"),
        ({"k\ud800": 1}, "body"),
        ({"a": {"b\udc00": 1}}, "a"),
        ({"emoji": "\U0001f600"}, None),  # a proper pair is fine
    ],
)
def test_surrogate_path(value: object, path: str | None) -> None:
    assert body.surrogate_path(value) == path


@pytest.mark.parametrize(
    ("raw", "status", "code"),
    [
        (b'{"a": "\\ud800"}', 422, "invalid_string"),
        (b'{"a": ', 400, "malformed_json"),
        (b'{"a": "\\ud83d\\ude00"}', None, None),
        (b"\xff", 400, "malformed_json"),
        (b"[" * 100_000, 400, "malformed_json"),
    ],
)
def test_loads(raw: bytes, status: int | None, code: str | None) -> None:
    if status is None:
        assert body.loads(raw) == {"a": "\U0001f600"}
        return
    with pytest.raises(ApiError) as e:
        body.loads(raw)
    assert (e.value.status, e.value.code) == (status, code)


def test_scoped_names_round_trip_and_never_collide() -> None:
    assert scoped_task("tenant-a", "t1") == "tenant-a/t1" == Principal(Role.TRAINER, "tenant-a").scope("t1")
    assert public_task("tenant-a/t1") == "t1" and public_task("legacy") == "legacy"
    # the names a squatter could pick map to its own tenant, never to the victim's task
    assert Principal(Role.TRAINER, "b").scope("openrlhf.a") != Principal(Role.TRAINER, "a").scope("openrlhf")


def test_act_as() -> None:
    trainer, admin = Principal(Role.TRAINER, "a"), Principal(Role.ADMIN, "default")
    assert act_as(trainer, None) is trainer and act_as(trainer, "a") is trainer
    assert act_as(admin, "a") == Principal(Role.ADMIN, "a")
    for who, tenant, status in ((trainer, "b", 403), (admin, "x/y", 422)):
        with pytest.raises(ApiError) as e:
            act_as(who, tenant)
        assert e.value.status == status and e.value.details["field"] == "tenant"


@pytest.mark.parametrize("spec", ["t:trainer:a/b", "t:trainer:a b", "t:trainer:"])
def test_tenant_names_follow_the_id_rule(spec: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        TokenTable.parse_inline(spec)
    assert TokenTable.parse_inline("t:metrics")["t"] == Principal(Role.METRICS, "default")


@pytest.mark.parametrize(("tenant_labels", "label"), [(False, "all"), (True, "a/t1")])
def test_task_labels(tenant_labels: bool, label: str) -> None:
    m = Metrics(tenant_labels=tenant_labels)
    m.queue_depth.labels("compile", "a/t1").inc(2)
    m.batch_extra_delay.labels("a/t1").observe(0.5)
    r = m.registry
    assert r.get_sample_value("distrs_queue_depth", {"stage": "compile", "task": label}) == 2.0
    assert r.get_sample_value("distrs_batch_extra_delay_seconds_count", {"task": label}) == 1.0
