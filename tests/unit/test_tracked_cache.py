"""Tracked reads (agentsite/cache.py): values kept in memory, right because Redis says when
they change, and within a memory budget."""

from django.core.cache import cache

from agentsite import cache as tracked


def _mget_calls() -> int:
    client = cache._cache.get_client(write=True)
    return int(client.info("commandstats").get("cmdstat_mget", {}).get("calls", 0))


def test_unchanged_keys_are_read_from_memory_and_a_change_anywhere_is_seen():
    cache.set_many({"a": 1, "b": {"x": [1, 2]}})
    assert cache.get_many_tracked(["a", "b", "missing"]) == {"a": 1, "b": {"x": [1, 2]}}
    before = _mget_calls()
    for _ in range(10):
        assert cache.get_many_tracked(["a", "b", "missing"]) == {"a": 1, "b": {"x": [1, 2]}}
    assert _mget_calls() == before
    # Written through another connection (as another process would): Redis invalidates.
    other = cache._cache.get_client(write=True)
    other.set(cache.make_and_validate_key("missing"), cache._cache._serializer.dumps("now here"))
    other.delete(cache.make_and_validate_key("a"))
    assert cache.get_many_tracked(["a", "b", "missing"]) == {"b": {"x": [1, 2]}, "missing": "now here"}


def test_memory_stays_within_its_budget_least_recently_read_dropped_first(monkeypatch):
    monkeypatch.setattr(tracked, "TRACKED_BYTES", 10_000)
    values = {f"page-{n}": "x" * 3000 for n in range(6)}
    cache.set_many(values)
    for key in values:
        assert cache.get_many_tracked([key]) == {key: values[key]}
    kept = cache._cache.tracker()._values
    held = [k for k in kept if k.endswith(tuple(values))]
    # About three 3 KB values fit in 10 KB: the newest ones are kept.
    assert 2 <= len(held) <= 3
    assert held[-1].endswith("page-5") and not any(k.endswith("page-0") for k in held)
    assert cache._cache.tracker()._bytes <= 10_000
    # An evicted key is read again from Redis, correctly.
    assert cache.get_many_tracked(["page-0"]) == {"page-0": values["page-0"]}


def test_forgetting_a_key_this_process_wrote_reads_it_again():
    cache.set("v", 1)
    assert cache.get_many_tracked(["v"]) == {"v": 1}
    key = cache.make_and_validate_key("v")
    assert key in cache._cache.tracker()._values
    # Dropped here and now by the write itself, whether or not Redis's push has arrived yet.
    cache.set("v", 2)
    assert key not in cache._cache.tracker()._values
    assert cache.get_many_tracked(["v"]) == {"v": 2}


def test_a_server_that_refuses_tracking_is_read_plainly_and_not_asked_again_at_once(monkeypatch):
    from redis.exceptions import ResponseError

    tracker = cache._cache.tracker()
    tracker._reset()
    attempts = []

    def refuse():
        attempts.append(1)
        raise ResponseError("unknown command 'CLIENT'")

    cache.set("w", 5)
    with monkeypatch.context() as patch:
        patch.setattr(tracker, "_connect", refuse)
        try:
            for _ in range(3):
                assert cache.get_many_tracked(["w"]) == {"w": 5}  # a plain read answers
            assert attempts == [1]
        finally:
            refused_until, tracker._refused_until = tracker._refused_until, 0.0
    assert refused_until > 0
    # Asked again later (here: at once, the wait cleared), it tracks.
    assert cache.get_many_tracked(["w"]) == {"w": 5}
    assert tracker._connection is not None
