"""What both stores' followers share: the arguments they accept and how long they wait.

A follower (``StoreFactory.follow``) reads a session another process writes:
what is stored, then each record as it is committed. It waits between reads
until a record comes, ``timeout`` seconds of silence pass, or its ``stop``
event is set — whichever is first.
"""

from __future__ import annotations

import threading
import time

__all__ = ["FOLLOW_POLL_S", "Waiting", "check_follow"]

#: The longest a follower goes without looking for new records or at its stop event.
FOLLOW_POLL_S = 0.1


def check_follow(after: int, timeout: float | None) -> None:
    """``ValueError`` for arguments no follower accepts, raised before it reads anything."""
    if after < 0:
        raise ValueError(f"after must be at least 0, not {after}")
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be at least 0, not {timeout}")


class Waiting:
    """A follower's wait for the next record: ``timeout`` seconds of silence, or ``stop``."""

    def __init__(self, timeout: float | None, stop: threading.Event | None) -> None:
        self._timeout = timeout
        self._stop = stop
        self._deadline: float | None = None
        self.restart()

    def restart(self) -> None:
        """A record came: the silence starts again."""
        self._deadline = None if self._timeout is None else time.monotonic() + self._timeout

    def next_slice(self, poll: float | None = None) -> float | None:
        """Seconds to wait before looking again: at most ``poll`` (``FOLLOW_POLL_S`` once there
        is a stop event to look at); 0 once the wait is over; ``None``: as long as it takes."""
        if self._stop is not None:
            if self._stop.is_set():
                return 0.0
            poll = FOLLOW_POLL_S if poll is None else min(poll, FOLLOW_POLL_S)
        if self._deadline is None:
            return poll
        remaining = max(0.0, self._deadline - time.monotonic())
        return remaining if poll is None else min(remaining, poll)
