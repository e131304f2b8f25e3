"""The followers' shared wait (``cairn.store.following``): how long, and when it is over."""

from __future__ import annotations

import threading

import pytest

from cairn.store.following import FOLLOW_POLL_S, Waiting, check_follow


def test_a_wait_without_timeout_or_stop_lasts_as_long_as_it_takes() -> None:
    assert Waiting(None, None).next_slice() is None
    assert Waiting(None, None).next_slice(0.5) == 0.5


def test_a_timeout_is_seconds_of_silence_and_a_record_starts_it_again() -> None:
    assert Waiting(0, None).next_slice() == 0
    wait = Waiting(60, None)
    first = wait.next_slice()
    assert first is not None and 59 < first <= 60
    assert wait.next_slice(0.25) == 0.25  # never longer than the poll asked for
    wait.restart()
    again = wait.next_slice()
    assert again is not None and again >= first - 0.01


def test_a_stop_event_is_looked_at_every_poll_and_ends_the_wait_once_set() -> None:
    stop = threading.Event()
    wait = Waiting(None, stop)
    assert wait.next_slice() == FOLLOW_POLL_S
    assert wait.next_slice(10) == FOLLOW_POLL_S
    assert wait.next_slice(FOLLOW_POLL_S / 2) == FOLLOW_POLL_S / 2
    stop.set()
    assert wait.next_slice() == 0
    assert Waiting(60, stop).next_slice() == 0


@pytest.mark.parametrize(
    ("after", "timeout", "message"),
    [(-1, None, "after must be at least 0, not -1"), (0, -0.5, "timeout must be at least 0")],
)
def test_arguments_no_follower_accepts(after: int, timeout: float | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_follow(after, timeout)
    check_follow(0, None)
    check_follow(3, 0)
