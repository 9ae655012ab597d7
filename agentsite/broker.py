"""Kombu's Redis transport, with one Redis client per connection pool for the messages it sends.

Kombu builds a new ``redis.Redis`` for every message it publishes, and redis-py fills a table of
about 170 response callbacks each time: half of what sending a task cost (a run's evaluation, a
submitted task). A client over a pool is thread-safe and holds no connection between commands,
so one per pool is enough; the consumer's asynchronous client is left as kombu makes it.
Used for ``redis://`` brokers (settings.py); agentsite/cache.py does the same for the cache.
"""

from typing import Any

from kombu.transport import redis


class Channel(redis.Channel):
    _pool_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        # Kept with the pool it was made for: a channel that lost its pool makes a new one.
        if self._pool_client is None or self._pool_client[0] is not self.pool:
            self._pool_client = (self.pool, super()._create_client())
        return self._pool_client[1]


class Transport(redis.Transport):
    Channel = Channel
