"""Django's Redis cache backend, with one Redis client per connection pool and tracked reads.

Django builds a new ``redis.Redis`` for every cache call, and redis-py 8 fills a table of about
170 response callbacks each time: half a millisecond, twice per page served from the cache and
on every circuit-breaker read of the agent loop. A client over a pool is thread-safe and Django
keeps one cache object per thread anyway, so one client per pool is enough.

``get_many_tracked`` serves a few hot, rarely written keys (the tools' circuit breakers, read
before every tool call) from memory, kept right by Redis itself: the connection that reads them
has ``CLIENT TRACKING`` on, so Redis pushes an invalidation to it whenever any client changes,
deletes or expires one of them (or flushes the database), and the pushes waiting on that
connection are read before every lookup. A change made anywhere is therefore seen by the next
read here, as a plain read would, less the time the push takes on the wire. redis-py's own
client-side cache does the same but refuses servers older than Redis 7.4, and Debian 12 ships
7.0 (tracking itself is Redis 6).
"""

import os
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient
from redis.exceptions import RedisError


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}
        self._tracking = None  # the tracking connection, opened on the first tracked read
        self._tracking_pid = 0
        self._tracked: dict[str, Any] = {}  # key -> value (None: no such key), while valid

    def get_client(self, key=None, *, write: bool = False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._client(connection_pool=self._get_connection_pool(write))
        return client

    # --- tracked reads ------------------------------------------------------------------------
    def get_many_tracked(self, keys: list[str]) -> dict[str, Any]:
        try:
            connection = self._tracking_connection()
            while connection.can_read():  # invalidations pushed since the last read
                connection.read_response(push_request=True)
            missing = [k for k in keys if k not in self._tracked]
            if missing:
                connection.send_command("MGET", *missing)
                # An invalidation pushed before the reply is handled on the way; one for a
                # later change comes after it, and is read before the next lookup.
                for key, value in zip(missing, connection.read_response(), strict=True):
                    self._tracked[key] = None if value is None else self._serializer.loads(value)
        except RedisError:
            # The tracking connection broke (a restart, a kill): a plain read answers this time,
            # and raises as any read would if Redis itself is away.
            self._close_tracking()
            return self.get_many(keys)
        return {k: self._tracked[k] for k in keys if self._tracked[k] is not None}

    def forget_tracked(self, keys: list[str]) -> None:
        """Drop ``keys`` from memory after this process changed them: Redis's own push to the
        tracking connection may reach it just after the write's reply."""
        for key in keys:
            self._tracked.pop(key, None)

    def _tracking_connection(self):
        if self._tracking is not None and self._tracking_pid == os.getpid():
            return self._tracking
        self._tracked.clear()
        pool = self._get_connection_pool(False)
        # RESP3: the invalidations arrive on the connection that reads the keys.
        connection = pool.connection_class(**{**pool.connection_kwargs, "protocol": 3})
        connection.connect()
        # The hook redis-py's own client-side cache uses.
        connection._parser.set_invalidation_push_handler(self._invalidate)
        connection.send_command("CLIENT", "TRACKING", "ON")
        connection.read_response()
        self._tracking, self._tracking_pid = connection, os.getpid()
        return connection

    def _invalidate(self, push: list) -> None:
        keys = push[1]
        if keys is None:  # the database was flushed
            self._tracked.clear()
            return
        for key in keys:
            self._tracked.pop(key.decode() if isinstance(key, bytes) else key, None)

    def _close_tracking(self) -> None:
        # Without its connection no invalidation can arrive: nothing in memory is trusted.
        self._tracked.clear()
        if self._tracking is not None:
            self._tracking.disconnect()
        self._tracking = None

    def clear(self):
        self._tracked.clear()
        return super().clear()


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient

    def get_many_tracked(self, keys: list[str], version: int | None = None) -> dict[str, Any]:
        """``get_many`` for keys read far more often than written, answered from memory while
        Redis reports no change to them (see the module's docstring)."""
        made = {self.make_and_validate_key(key, version=version): key for key in keys}
        return {made[k]: v for k, v in self._cache.get_many_tracked(list(made)).items()}

    def forget_tracked(self, keys: list[str], version: int | None = None) -> None:
        self._cache.forget_tracked([self.make_and_validate_key(key, version=version) for key in keys])
