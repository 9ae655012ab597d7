import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

from agentsite.environment import refuse_to_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
application = get_wsgi_application()
# gunicorn runs no system check: a variable the settings could not take stops it here.
refuse_to_start(settings.ENVIRONMENT_PROBLEMS)
