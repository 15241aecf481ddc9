"""Which failures are worth another try, and how a failure is written down.

A transient failure (the study database or the broker briefly unreachable)
is retried with backoff by the task that met it. Any other failure is data:
its class and message are recorded where ``hoptune status`` shows them.
"""

from __future__ import annotations

from sqlalchemy.exc import InterfaceError, OperationalError

__all__ = ["TRANSIENT", "describe"]

#: Errors worth another try: the study database or the broker was briefly unreachable.
TRANSIENT: tuple[type[BaseException], ...] = (OperationalError, InterfaceError, ConnectionError,
                                              TimeoutError)


def describe(exc: BaseException) -> str:
    """One line: the exception's class and the first line of its message."""
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
