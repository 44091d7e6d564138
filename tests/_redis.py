"""The shared Redis server the tests talk to (a real connection, never a mock)."""

from __future__ import annotations

import pytest
import redis

SHARED_URL = "redis://127.0.0.1:6379/0"


def require_redis(url: str = SHARED_URL) -> str:
    """``url`` once it answers a PING; otherwise the test fails saying how to start one."""
    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(
            f"these tests need a Redis server at {url} ({exc}); start one with: "
            "redis-server --port 6379 --save ''"
        )
    return url
