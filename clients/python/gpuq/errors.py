"""Exceptions raised by the gpuq client.

Errors the API answers with are ``application/problem+json`` documents
(RFC 9457); :class:`APIError` carries them, including the path of every
field at fault (``spec.resources.gpu.count``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional


class GpuqError(Exception):
    """Base class of every error this package raises."""


@dataclass(frozen=True)
class ErrorDetail:
    """One problem with a request: where (``location``) and what."""

    location: str
    message: str
    value: Any = None


class APIError(GpuqError):
    """An error answer of the API, with its problem details."""

    def __init__(self, status: int, title: str = "", detail: str = "",
                 errors: Optional[List[ErrorDetail]] = None, type: str = "",
                 retry_after: Optional[float] = None) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.errors: List[ErrorDetail] = list(errors or [])
        self.type = type
        self.retry_after = retry_after
        super().__init__(self._message())

    @property
    def fields(self) -> Dict[str, str]:
        """The message of each field at fault, by its path."""
        return {e.location: e.message for e in self.errors if e.location}

    def _message(self) -> str:
        msg = self.detail or self.title or "HTTP %d" % self.status
        parts = []
        for e in self.errors:
            if e.location and not msg.startswith(e.location + ":"):
                parts.append("%s: %s" % (e.location, e.message))
            elif e.message not in msg:
                parts.append(e.message)
        if parts:
            msg += ": " + "; ".join(parts)
        return "%s (HTTP %d)" % (msg, self.status)


class InvalidRequest(APIError):
    """422: the spec or a parameter is invalid; ``fields`` names each one."""


class NotFound(APIError):
    """404: no such job, or one of a project the token does not cover."""


class Conflict(APIError):
    """409: e.g. an idempotency key reused with another spec, or cancelling
    a finished job."""


class Unauthorized(APIError):
    """401: no token, or a revoked or expired one."""


class Forbidden(APIError):
    """403: the token's role or projects do not allow this."""


class RateLimited(APIError):
    """429: the token's rate limit; ``retry_after`` says when to retry."""


_BY_STATUS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
              422: InvalidRequest, 429: RateLimited}


def api_error(status: int, doc: Any, retry_after: Optional[float] = None) -> APIError:
    """The exception for an error answer whose body decoded to ``doc``."""
    cls = _BY_STATUS.get(status, APIError)
    if not isinstance(doc, dict):
        return cls(status, detail=str(doc or ""), retry_after=retry_after)
    details = []
    for e in doc.get("errors") or []:
        if isinstance(e, dict):
            details.append(ErrorDetail(str(e.get("location") or ""), str(e.get("message") or ""), e.get("value")))
    return cls(status, title=str(doc.get("title") or ""), detail=str(doc.get("detail") or ""),
               errors=details, type=str(doc.get("type") or ""), retry_after=retry_after)


class Unreachable(GpuqError):
    """The API could not be reached: the connection was refused or reset,
    or its host name does not resolve. ``Client.wait`` and
    ``Client.logs(follow=True)`` ride through it (and through 502, 503 and
    504 answers) once they have reached the API, so that a server restart
    does not end them."""


class WaitTimeout(GpuqError):
    """``Client.wait`` ran out of time; the job goes on."""

    def __init__(self, job_id: str, timeout: float, state: str) -> None:
        self.job_id = job_id
        self.timeout = timeout
        self.state = state
        super().__init__("job %s still %s after %gs" % (job_id, state, timeout))


class CheckpointError(GpuqError):
    """``gpuq.checkpoint.save`` failed: not inside a job, or the worker
    could not commit the checkpoint."""
