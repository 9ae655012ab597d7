"""The authentication backend: Django's, with the signed-in user read from the cache.

Every page asks who is signed in; the database answer (one query, a model built, two
timestamps parsed) was the largest cost of a page served from the page cache. The user is kept
for ``USER_CACHE_SECONDS`` and dropped from the cache whenever the user row is saved or deleted
(a password change, a deactivation), so such a change takes effect at the next request; only a
bulk ``QuerySet.update()`` of users, which sends no signal, waits for the entry to expire.
Permissions and groups are not part of the entry: they are read from the database per request,
as Django does.
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agentsite.cache import read_tracked

USER_CACHE_SECONDS = 60


def _key(user_id: object) -> str:
    return f"auth-user:{user_id}"


class CachedUserBackend(ModelBackend):
    def get_user(self, user_id):
        # From the process's memory while Redis reports the entry unchanged (agentsite/cache.py).
        user = read_tracked(cache, [_key(user_id)]).get(_key(user_id))
        if user is None:
            user = super().get_user(user_id)
            if user is not None:
                cache.set(_key(user_id), user, USER_CACHE_SECONDS)
        return user


def forget_user(user_id: object) -> None:
    cache.delete(_key(user_id))


User = get_user_model()


# Connected by FeedbackConfig.ready, in every process (a worker may save a user too).
@receiver(post_save, sender=User)
@receiver(post_delete, sender=User)
def _user_changed(sender, instance, **kwargs) -> None:
    forget_user(instance.pk)
