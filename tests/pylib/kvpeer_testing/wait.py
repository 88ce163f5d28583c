"""The one wait helper: poll a condition until it holds or a bound passes."""

import time


def poll(predicate, timeout, interval=0.05):
    """Polls until predicate() is truthy (returned) or the time is up
    (returns the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def wait_until(predicate, timeout=20.0, what="condition", interval=0.05):
    """Polls `predicate` until it returns a truthy value (returned); raises
    AssertionError (a test failure) naming `what` when the time is up."""
    value = poll(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"{what} not reached within {timeout:.0f} s")
    return value
