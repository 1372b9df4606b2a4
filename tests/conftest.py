"""Shared pytest configuration: fixture plugins used across test directories. The rule for skips
(tests/requirements.py) is installed for every test tree by the repository's root conftest.py."""

pytest_plugins = [
    "tests.fixtures.redis_server",
    "tests.fixtures.redis_cluster",
    "tests.fixtures.redis_sentinel",
]
