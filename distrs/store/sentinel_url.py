"""The URL that names a Sentinel-managed Redis (``DISTRS_REDIS_MODE=sentinel``).

    redis+sentinel://[[user]:password@]host1:26379[,host2:26379,...]/MASTER[/DB]
    rediss+sentinel://...[?ssl_ca_certs=PATH&ssl_cert_reqs=required|optional|none
                           &ssl_certfile=PATH&ssl_keyfile=PATH]   (TLS to Sentinels and nodes)

Why one URL rather than several settings: every other mode is configured by ``DISTRS_REDIS_URL``
(and ``--redis``) alone, a Kubernetes Secret can hold it whole, and the Sentinels, the name of
the primary they watch and the password belong together. The user and password are those of the
Redis nodes; Sentinels that require a password of their own get it from
``DISTRS_REDIS_SENTINEL_PASSWORD``. Percent-encode characters of the password that a URL
reserves (``@ : / ? #``).

Pure parsing (no I/O): the settings validate the URL with it at start-up, and the connection
(``store/redis/sentinel.py``) is built from what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}  # scheme -> TLS
DEFAULT_SENTINEL_PORT = 26379
FORM = "redis+sentinel://[[user]:password@]host:26379[,host:26379...]/MASTER[/DB]"
# Query parameters a rediss+sentinel:// URL may carry: redis-py's TLS options, as a rediss:// URL
# of the other modes takes them.
TLS_OPTIONS = ("ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_keyfile")
CERT_REQS = ("none", "optional", "required")


@dataclass(frozen=True)
class SentinelTarget:
    """What a sentinel URL names."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    tls_options: tuple[tuple[str, str], ...] = ()


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def _host_port(item: str) -> tuple[str, int]:
    """``host[:port]`` or ``[v6]:port`` of one Sentinel; the port defaults to 26379."""
    try:
        parts = urlsplit(f"//{item}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ValueError(f"bad Sentinel address {item!r}: {exc}") from None
    if not host:
        raise ValueError(f"bad Sentinel address {item!r}: no host")
    return host, port or DEFAULT_SENTINEL_PORT


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The Sentinels, the primary's name and the credentials a sentinel URL names; ValueError
    with what is wrong otherwise (the message says the expected form)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError(f"a Sentinel URL starts with redis+sentinel:// or rediss+sentinel:// ({FORM})")
    rest, _, query = rest.split("#", 1)[0].partition("?")
    tls = SCHEMES[scheme.lower()]
    tls_options = _tls_options(query, tls)
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon and pw else None
    items = [h.strip() for h in hosts.split(",") if h.strip()]
    if not items:
        raise ValueError(f"a Sentinel URL names at least one Sentinel host ({FORM})")
    sentinels = tuple(_host_port(h) for h in items)
    segments = [unquote(s) for s in path.split("/") if s]
    if not segments:
        raise ValueError(f"a Sentinel URL names the primary's name after the hosts ({FORM})")
    if len(segments) > 2:
        raise ValueError(f"a Sentinel URL's path is /MASTER or /MASTER/DB ({FORM})")
    db = 0
    if len(segments) == 2:
        if not segments[1].isdigit():
            raise ValueError(f"database {segments[1]!r} is not a number ({FORM})")
        db = int(segments[1])
    return SentinelTarget(
        sentinels=sentinels,
        master=segments[0],
        db=db,
        username=username,
        password=password,
        tls=tls,
        tls_options=tls_options,
    )


def _tls_options(query: str, tls: bool) -> tuple[tuple[str, str], ...]:
    """The URL's TLS options (``TLS_OPTIONS``); anything else is refused, never ignored."""
    out: list[tuple[str, str]] = []
    for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if name not in TLS_OPTIONS:
            raise ValueError(f"unknown URL parameter {name!r}; a Sentinel URL takes {', '.join(TLS_OPTIONS)}")
        if not tls:
            raise ValueError(f"URL parameter {name!r} needs TLS: rediss+sentinel://")
        if name == "ssl_cert_reqs" and value not in CERT_REQS:
            raise ValueError(f"ssl_cert_reqs={value!r} is not one of {', '.join(CERT_REQS)}")
        out.append((name, value))
    return tuple(out)
