"""Shared pytest configuration: fixture plugins used across test directories."""

pytest_plugins = ["tests.fixtures.redis_server"]
