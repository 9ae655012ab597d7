from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.i18n import set_language

from feedback.api.urls import urls as api_urls
from feedback.views import accounts

# Django's auth views under their own names (they and their templates reverse them); those a
# signed-out person needs (login, the password reset) are login_not_required in Django itself.
urlpatterns = [
    path("accounts/login/", accounts.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/password_change/", auth_views.PasswordChangeView.as_view(), name="password_change"),
    path("accounts/password_change/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path("accounts/password_reset/", accounts.PasswordResetView.as_view(), name="password_reset"),
    path("accounts/password_reset/done/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path(
        "accounts/reset/<uidb64>/<token>/",
        accounts.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path("accounts/reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
    path("admin/", admin.site.urls),
    # The JSON API: tokens, not sessions (feedback/api/).
    path("api/v1/", api_urls()),
    # The language switcher is on the login page too.
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path("", include("feedback.urls")),
]

handler403 = accounts.permission_denied
