"""Django's Redis cache backend, with one Redis client per connection pool and tracked reads.

Django builds a new ``redis.Redis`` for every cache call, and redis-py 8 fills a table of about
170 response callbacks each time: half a millisecond, twice per page served from the cache and
on every circuit-breaker read of the agent loop. A client over a pool is thread-safe and Django
keeps one cache object per thread anyway, so one client per pool is enough.

``get_many_tracked`` serves keys read far more often than written (the tools' circuit breakers,
read before every tool call; the page cache's entries and version) from the process's memory,
kept right by Redis itself: the connection that reads them has ``CLIENT TRACKING`` on, so Redis
pushes an invalidation to it whenever any client changes, deletes or expires one of them (or
flushes the database), and the pushes waiting on that connection are read before every lookup.
A change made anywhere is therefore seen by the next read here, as a plain read would see it,
less the time the push takes on the wire. redis-py's own client-side cache does the same but
refuses servers older than Redis 7.4, and Debian 12 ships 7.0 (tracking itself is Redis 6).
"""

import os
import threading
import time
from collections import OrderedDict
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient
from redis.exceptions import RedisError, ResponseError

# What one process keeps of the tracked keys' values, least recently read dropped first.
TRACKED_BYTES = 64 * 1024 * 1024
# A server that refuses tracking (an older Redis, a managed one that forbids CLIENT) is asked
# again after this long; meanwhile tracked reads are plain reads, without a connection attempt.
REFUSED_RETRY_SECONDS = 60
# Tracked keys remembered as the key function made them, per cache object (one per thread).
MADE_KEYS = 4096


class Tracker:
    """One per process and Redis server, shared by its threads: the tracking connection and
    the values it has read (raw, as Redis holds them; None for a key that does not exist)."""

    def __init__(self, pool) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._values: OrderedDict[str, bytes | None] = OrderedDict()
        self._bytes = 0
        self._connection = None
        self._refused_until = 0.0

    def get_many(self, keys: list[str]) -> dict[str, bytes | None]:
        with self._lock:
            if time.monotonic() < self._refused_until:
                raise ResponseError("this Redis server refused client tracking")
            try:
                connection = self._connect()
                while connection.can_read():  # invalidations pushed since the last read
                    connection.read_response(push_request=True)
                missing = [k for k in keys if k not in self._values]
                if missing:
                    connection.send_command("MGET", *missing)
                    # An invalidation pushed before the reply is handled on the way; one for a
                    # later change comes after it, and is read before the next lookup.
                    for key, value in zip(missing, connection.read_response(), strict=True):
                        self._keep(key, value)
                found = {}
                for key in keys:
                    self._values.move_to_end(key)
                    found[key] = self._values[key]
                return found
            except RedisError as error:
                # Without its connection no invalidation can arrive: nothing kept is trusted.
                self._reset()
                if isinstance(error, ResponseError):
                    self._refused_until = time.monotonic() + REFUSED_RETRY_SECONDS
                raise

    def forget(self, keys: list[str]) -> None:
        """Drop ``keys`` after this process changed them (see RedisCacheClient's writes)."""
        with self._lock:
            for key in keys:
                self._drop(key)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._bytes = 0

    def _keep(self, key: str, value: bytes | None) -> None:
        self._drop(key)
        self._values[key] = value
        self._bytes += len(value or b"")
        while self._bytes > TRACKED_BYTES and len(self._values) > 1:
            self._drop(next(iter(self._values)))

    def _drop(self, key: str) -> None:
        value = self._values.pop(key, None)
        self._bytes -= len(value or b"")

    def _connect(self):
        if self._connection is None:
            self._values.clear()
            self._bytes = 0
            # RESP3: the invalidations arrive on the connection that reads the keys.
            connection = self._pool.connection_class(**{**self._pool.connection_kwargs, "protocol": 3})
            connection.connect()
            # The hook redis-py's own client-side cache uses.
            connection._parser.set_invalidation_push_handler(self._invalidate)
            connection.send_command("CLIENT", "TRACKING", "ON")
            connection.read_response()
            self._connection = connection
        return self._connection

    def _invalidate(self, push: list) -> None:
        if push[1] is None:  # the database was flushed
            self._values.clear()
            self._bytes = 0
            return
        for key in push[1]:
            self._drop(key.decode() if isinstance(key, bytes) else key)

    def _reset(self) -> None:
        self._values.clear()
        self._bytes = 0
        if self._connection is not None:
            self._connection.disconnect()
        self._connection = None


_trackers: dict[tuple[int, str], Tracker] = {}
_trackers_lock = threading.Lock()


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}

    def get_client(self, key=None, *, write: bool = False):
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._client(connection_pool=self._get_connection_pool(write))
        return client

    def tracker(self) -> Tracker:
        # Per process: a forked child must not read its parent's connection.
        key = (os.getpid(), self._servers[0])
        tracker = _trackers.get(key)
        if tracker is None:
            with _trackers_lock:
                tracker = _trackers.setdefault(key, Tracker(self._get_connection_pool(True)))
        return tracker

    def get_many_tracked(self, keys: list[str]) -> dict[str, Any]:
        try:
            found = self.tracker().get_many(keys)
        except RedisError:
            # The tracking connection broke (a restart, a kill): a plain read answers this time,
            # and raises as any read would if Redis itself is away.
            return self.get_many(keys)
        return {k: self._serializer.loads(v) for k, v in found.items() if v is not None}

    # Every write through this client drops the process's copy of the key once it is done:
    # Redis's own push to the tracking connection may arrive just after the write's reply.
    def _written(self, keys, result):
        self.tracker().forget(list(keys))
        return result

    def add(self, key, value, timeout):
        return self._written([key], super().add(key, value, timeout))

    def set(self, key, value, timeout):
        return self._written([key], super().set(key, value, timeout))

    def set_many(self, data, timeout):
        return self._written(data, super().set_many(data, timeout))

    def incr(self, key, delta):
        return self._written([key], super().incr(key, delta))

    def delete(self, key):
        return self._written([key], super().delete(key))

    def delete_many(self, keys):
        return self._written(keys, super().delete_many(keys))

    def clear(self):
        self.tracker().clear()
        return super().clear()


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
        self._made_keys: dict[tuple[str, int | None], str] = {}

    def get_many_tracked(self, keys: list[str], version: int | None = None) -> dict[str, Any]:
        """``get_many`` for keys read far more often than written, answered from memory while
        Redis reports no change to them (see the module's docstring)."""
        made = {self._tracked_key(key, version): key for key in keys}
        return {made[k]: v for k, v in self._cache.get_many_tracked(list(made)).items()}

    def _tracked_key(self, key: str, version: int | None) -> str:
        # Remembered: the same few keys are read before every tool call, and making one (the
        # key function, then a check of every character) cost as much as reading it from memory.
        made = self._made_keys.get((key, version))
        if made is None:
            if len(self._made_keys) >= MADE_KEYS:
                self._made_keys.clear()
            made = self._made_keys[key, version] = self.make_and_validate_key(key, version=version)
        return made


def read_tracked(cache, keys: list[str]) -> dict[str, Any]:
    """``cache.get_many(keys)``, answered from memory on Redis while the keys are unchanged."""
    read = getattr(cache, "get_many_tracked", None) or cache.get_many
    return read(keys)
