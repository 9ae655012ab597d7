"""Django's Redis cache backend, with one Redis client per connection pool.

Django builds a new ``redis.Redis`` for every cache call, and redis-py 8 fills a table of about
170 response callbacks each time: half a millisecond, twice per page served from the cache and
on every circuit-breaker read of the agent loop. A client over a pool is thread-safe and Django
keeps one cache object per thread anyway, so one client per pool is enough.
"""

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient


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


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
