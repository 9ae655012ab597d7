"""Sessions kept in the database and the cache (Django's ``cached_db``), read through the cache's
tracked reads: every page reads its session, and while Redis reports no change to it the read
costs no round trip. A login, logout or any session write anywhere invalidates it at once (see
agentsite/cache.py)."""

from django.contrib.sessions.backends.cached_db import SessionStore as CachedDBStore

from agentsite.cache import read_tracked


class SessionStore(CachedDBStore):
    def load(self):
        key = self.cache_key
        try:
            data = read_tracked(self._cache, [key]).get(key)
        except Exception:  # as Django's: a cache that cannot answer falls back on the database
            data = None
        return super().load() if data is None else data
