"""Retries for the store: which failures are transient, and how long to keep trying.

An object store answers over the network, so a request may fail for reasons
that pass: a refused or reset connection, a timeout, a throttled request
(S3's 503 SlowDown), a server error (500). Such a failure is tried again,
after waits that double from ``HOPTUNE_STORE_RETRY_SECONDS`` (default 0.2 s)
up to 10 s, at most ``HOPTUNE_STORE_RETRIES`` times (default 6: about 12 s of
waiting in all). A missing object, a refused permission or a bad bucket name
is not transient and fails at once. Every retried store operation is
idempotent: a put of whole bytes, a read, a listing, a delete.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from hoptune.core._errors import ConfigError

__all__ = ["RetryPolicy", "is_transient"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_EREMOTEIO = getattr(errno, "EREMOTEIO", 121)
#: errno values of failures that pass: S3 5xx answers (s3fs maps 500 to EREMOTEIO, 503
#: to EBUSY), and the network's own.
_TRANSIENT_ERRNOS = {errno.EBUSY, errno.EIO, _EREMOTEIO, errno.ETIMEDOUT, errno.ECONNRESET,
                     errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE, errno.EAGAIN,
                     errno.EHOSTUNREACH, errno.ENETUNREACH}
#: Exception classes of botocore, aiohttp and fsspec that mean "the network failed this
#: time", matched by name so that a store on a file system needs none of those packages.
_TRANSIENT_CLASSES = {"ConnectionError", "HTTPClientError", "ReadTimeoutError",
                      "ConnectTimeoutError", "ConnectionClosedError", "ProxyConnectionError",
                      "ClientConnectionError", "ServerDisconnectedError", "ClientPayloadError",
                      "ServerTimeoutError", "FSTimeoutError", "IncompleteRead",
                      "ResponseStreamingError"}
_PERMANENT = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError,
              NotADirectoryError)


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure that may pass if the same request is sent again."""
    if isinstance(exc, _PERMANENT):
        return False
    if isinstance(exc, TimeoutError | ConnectionError):
        return True
    if {c.__name__ for c in type(exc).__mro__} & _TRANSIENT_CLASSES:
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    text = str(exc)
    return "SlowDown" in text or "reduce your request rate" in text


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and after which waits, a transient failure is tried again."""

    retries: int = 6
    first_wait: float = 0.2
    longest_wait: float = 10.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RetryPolicy:
        env = os.environ if environ is None else environ
        retries = env.get("HOPTUNE_STORE_RETRIES", "6").strip()
        if not retries.isdigit():
            raise ConfigError(f"HOPTUNE_STORE_RETRIES: {retries!r} is not a whole number of "
                              "retries (0 or more)")
        wait = env.get("HOPTUNE_STORE_RETRY_SECONDS", "0.2").strip()
        try:
            first = float(wait)
        except ValueError:
            first = -1.0
        if not 0 < first < float("inf"):
            raise ConfigError(f"HOPTUNE_STORE_RETRY_SECONDS: {wait!r} is not a number of "
                              "seconds above zero")
        return cls(retries=int(retries), first_wait=first)

    def wait(self, attempt: int) -> float:
        """The wait before retry number ``attempt`` (from 0): doubling, capped, jittered."""
        return min(self.first_wait * 2 ** attempt, self.longest_wait) * random.uniform(0.8, 1.2)

    def call(self, operation: Callable[[], T], what: str) -> T:
        """Run ``operation``; on a transient failure wait and run it again, up to ``retries``.

        The last failure is raised as it came, so the caller decides how to report it.
        """
        attempt = 0
        while True:
            try:
                return operation()
            except Exception as exc:
                if attempt >= self.retries or not is_transient(exc):
                    raise
                pause = self.wait(attempt)
                attempt += 1
                log.warning("store: %s failed (%s: %s); retry %d of %d in %.1f s", what,
                            type(exc).__name__, (str(exc).splitlines() or [""])[0],
                            attempt, self.retries, pause)
                time.sleep(pause)
