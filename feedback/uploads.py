"""What a request may upload, and the upload handler that holds it to that, in memory only.

Django's own handlers keep a file in memory only while the whole request is smaller than
FILE_UPLOAD_MAX_MEMORY_SIZE, and otherwise write every file to FILE_UPLOAD_TEMP_DIR, all of it,
before any form can say that it is too large. Here nothing is ever written to disk:

- a view says which files it takes (``accepts_uploads``); a view that says nothing takes none,
  and the files sent to it are read past and dropped;
- each file is kept in memory up to the view's size limit, and past it only counted: the form
  then refuses it by its size, with its own message;
- files past the view's number are counted, not kept: the form refuses them by their number;
- a body that goes on past what the view can ever take (a Content-Length that lies, which only
  an ASGI server lets through: WSGI reads no more than Content-Length) stops the parsing with
  ``RequestDataTooBig``: the request is refused whole (400), nothing of it used.

``feedback.middleware.RequestBodyLimitMiddleware`` refuses by Content-Length before any of this
runs, so a body too large is not even read.
"""

from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadedfile import InMemoryUploadedFile
from django.core.files.uploadhandler import FileUploadHandler
from django.http import HttpRequest


@dataclass(frozen=True)
class UploadLimits:
    files: int = 0
    file_bytes: int = 0

    def body_bytes(self) -> int | None:
        """The largest body the view can ever take: its files, plus the form's fields and the
        multipart framing (bounded by DATA_UPLOAD_MAX_MEMORY_SIZE, as Django bounds the fields).
        None: no bound (DATA_UPLOAD_MAX_MEMORY_SIZE = None)."""
        fields = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if fields is None:
            return None
        return self.files * self.file_bytes + fields


NO_UPLOADS = UploadLimits()


def accepts_uploads(*, files: int, file_bytes: int) -> Callable:
    """Mark a view as taking up to ``files`` files of ``file_bytes`` each (like ``login_not_required``,
    an attribute of the view that the middleware reads before the body is)."""

    def mark(view: Callable) -> Callable:
        view.upload_limits = UploadLimits(files=files, file_bytes=file_bytes)
        return view

    return mark


def limits_of(view: Callable) -> UploadLimits:
    return getattr(view, "upload_limits", NO_UPLOADS)


def _request_limits(request: HttpRequest | None) -> UploadLimits:
    # Set by the middleware once the view is known; a body parsed before that takes no files.
    return getattr(request, "upload_limits", NO_UPLOADS)


def _too_large() -> RequestDataTooBig:
    # Django's own refusal of a body past its limits (a 400, as for too many fields).
    return RequestDataTooBig("The request body is larger than this address takes.")


class BoundedMemoryUploadHandler(FileUploadHandler):
    """The only upload handler (FILE_UPLOAD_HANDLERS): see the module's docstring."""

    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self.limits = _request_limits(request)
        self.body_limit = self.limits.body_bytes()
        self.count = 0
        self.received = 0
        self.kept: BytesIO | None = None
        self.size = 0

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None) -> None:
        if self.body_limit is not None and content_length > self.body_limit:
            raise _too_large()

    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.count += 1
        self.size = 0
        self.kept = BytesIO() if self.count <= self.limits.files else None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.size += len(raw_data)
        self.received += len(raw_data)
        if self.body_limit is not None and self.received > self.body_limit:
            raise _too_large()
        if self.kept is not None:
            room = self.limits.file_bytes - self.kept.tell()
            if room > 0:
                self.kept.write(raw_data[:room])
        return None  # the last handler: nothing is passed on

    def file_complete(self, file_size: int) -> InMemoryUploadedFile | None:
        if not self.limits.files:
            return None
        kept = self.kept if self.kept is not None else BytesIO()
        kept.seek(0)
        # ``size`` is what was sent, ``file`` at most the limit of it: the form refuses the file by
        # its size (or by the number of files) before reading it.
        return InMemoryUploadedFile(
            file=kept,
            field_name=self.field_name,
            name=self.file_name,
            content_type=self.content_type,
            size=self.size,
            charset=self.charset,
            content_type_extra=self.content_type_extra,
        )
