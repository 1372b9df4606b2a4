"""Sentinel mode's settings: the ``redis+sentinel://`` URL, its validation against the mode, the
connection options built from it, and when acknowledged writes send WAIT (no Redis here)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from distrs.config import RedisMode, StoreSettings
from distrs.store.redis.client import keepalive_options
from distrs.store.redis.replicas import SHORT_OF_REPLICAS_S, ReplicaWait
from distrs.store.redis.sentinel import sentinel_options
from distrs.store.sentinel_url import SentinelTarget, parse_sentinel_url


@pytest.mark.parametrize(
    ("url", "want"),
    [
        (
            "redis+sentinel://s1:26379,s2:26380,s3/mymaster",
            SentinelTarget(sentinels=(("s1", 26379), ("s2", 26380), ("s3", 26379)), master="mymaster"),
        ),
        (
            "rediss+sentinel://app:p%40ss%3Aword@[::1]:5000/main/3",
            SentinelTarget(
                sentinels=(("::1", 5000),),
                master="main",
                db=3,
                username="app",
                password="p@ss:word",
                tls=True,
            ),
        ),
        (
            "rediss+sentinel://s1/m?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required",
            SentinelTarget(
                sentinels=(("s1", 26379),),
                master="m",
                tls=True,
                tls_options=(("ssl_ca_certs", "/etc/ca.pem"), ("ssl_cert_reqs", "required")),
            ),
        ),
        (
            "redis+sentinel://:secret@s1/m/",
            SentinelTarget(sentinels=(("s1", 26379),), master="m", password="secret"),
        ),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_primary_and_the_credentials(
    url: str, want: SentinelTarget
) -> None:
    assert parse_sentinel_url(url) == want


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://s1:26379/m", "starts with redis+sentinel://"),
        ("redis+sentinel:///m", "at least one Sentinel host"),
        ("redis+sentinel://s1:26379", "primary's name"),
        ("redis+sentinel://s1/m/x", "is not a number"),
        ("redis+sentinel://s1/m/0/extra", "/MASTER or /MASTER/DB"),
        ("redis+sentinel://s1:notaport/m", "bad Sentinel address"),
        ("rediss+sentinel://s1/m?socket_timeout=1", "unknown URL parameter 'socket_timeout'"),
        ("redis+sentinel://s1/m?ssl_ca_certs=/ca.pem", "needs TLS: rediss+sentinel://"),
        ("rediss+sentinel://s1/m?ssl_cert_reqs=maybe", "is not one of none, optional, required"),
    ],
)
def test_a_bad_sentinel_url_is_refused_with_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_sentinel_url(url)
    assert says in str(err.value)


def test_settings_refuse_a_bad_url_in_sentinel_mode_naming_the_setting_without_its_password() -> None:
    with pytest.raises(ValidationError) as err:
        StoreSettings(redis_url="redis+sentinel://:hunter2@s1:26379", redis_mode="sentinel")
    text = str(err.value)
    assert "DISTRS_REDIS_URL" in text and "primary's name" in text
    assert "hunter2" not in text


def test_settings_refuse_a_sentinel_url_outside_sentinel_mode() -> None:
    with pytest.raises(ValidationError, match="set DISTRS_REDIS_MODE=sentinel"):
        StoreSettings(redis_url="redis+sentinel://s1/m")
    with pytest.raises(ValidationError, match="DISTRS_REDIS_URL"):
        StoreSettings(redis_url="redis://s1:6379/0", redis_mode="sentinel")
    ok = StoreSettings(redis_url="redis+sentinel://s1/m", redis_mode="sentinel")
    assert ok.redis_mode is RedisMode.SENTINEL


def test_settings_read_the_mode_and_the_sentinel_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DISTRS_REDIS_URL", "redis+sentinel://s1,s2/m")
    monkeypatch.setenv("DISTRS_REDIS_MODE", "sentinel")
    monkeypatch.setenv("DISTRS_REDIS_SENTINEL_PASSWORD", "sentinel-secret")
    s = StoreSettings()
    assert s.redis_mode is RedisMode.SENTINEL
    assert s.redis_sentinel_password is not None
    assert s.redis_sentinel_password.get_secret_value() == "sentinel-secret"
    assert "sentinel-secret" not in repr(s)


def test_connection_options_carry_credentials_tls_and_the_standalone_socket_options() -> None:
    s = StoreSettings(
        redis_url="rediss+sentinel://u:pw@s1/m/2?ssl_ca_certs=/ca.pem",
        redis_mode="sentinel",
        redis_sentinel_password="sp",
        redis_connect_timeout_s=2.5,
        redis_keepalive_s=20,
    )
    assert s.redis_url is not None
    node, sentinel = sentinel_options(parse_sentinel_url(s.redis_url), s)
    assert (node["username"], node["password"], node["db"], node["ssl"]) == ("u", "pw", 2, True)
    assert node["decode_responses"] is True
    for opts in (node, sentinel):
        assert opts["socket_connect_timeout"] == 2.5
        assert opts["socket_keepalive"] is True
        assert opts["socket_keepalive_options"] == keepalive_options(20)
    # the Sentinels get their own password (never the nodes'), TLS, and a read timeout
    assert (sentinel["password"], sentinel["ssl"], sentinel["socket_timeout"]) == ("sp", True, 2.5)
    assert node["ssl_ca_certs"] == sentinel["ssl_ca_certs"] == "/ca.pem"
    # a Sentinel that is down is asked once, then the next one (redis-py's default: 3 retries
    # with backoff of seconds each, for every new connection during a failover)
    assert sentinel["retry"].get_retries() == 0
    plain = StoreSettings(redis_url="redis+sentinel://s1/m", redis_mode="sentinel")
    assert plain.redis_url is not None
    node, sentinel = sentinel_options(parse_sentinel_url(plain.redis_url), plain)
    assert "password" not in sentinel and "ssl" not in sentinel and "ssl" not in node
    assert node["password"] is None


def test_acknowledged_writes_wait_until_a_wait_comes_back_short_then_skip_it_for_a_while() -> None:
    w = ReplicaWait(replicas=1, timeout_ms=500)
    assert w.command(now=10.0) == ("WAIT", 1, 500)
    w.answered(1, now=10.0)
    assert w.command(now=10.1) == ("WAIT", 1, 500)
    w.answered(0, now=11.0)  # the replica is gone: do not wait in vain
    assert w.command(now=11.0 + SHORT_OF_REPLICAS_S - 0.01) is None
    assert w.command(now=11.0 + SHORT_OF_REPLICAS_S) == ("WAIT", 1, 500)
    assert ReplicaWait(replicas=0, timeout_ms=500).command(now=0.0) is None
