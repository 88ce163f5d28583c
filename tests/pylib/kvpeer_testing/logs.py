"""The one log-tail-on-failure: when a test failed, each daemon's log tail
goes to stderr, so a ctest failure shows the daemon's side of the story."""

import sys

LOG_TAIL_LINES = 150


def read_log(path):
    try:
        with open(path, "r", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def tail(path, lines=LOG_TAIL_LINES, title=None):
    """The last `lines` lines of the log at `path`, under a header."""
    text = read_log(path).splitlines()
    head = f"---- {title or path} log, last {min(lines, len(text))} lines ----"
    return "\n".join([head] + text[-lines:])


def test_failed(case):
    """Whether unittest has recorded an error or failure for `case` (a
    TestCase, asked from a cleanup); True when it cannot tell."""
    outcome = getattr(case, "_outcome", None)
    result = getattr(outcome, "result", None)
    if result is None:
        return True
    return any(t is case for t, _ in list(result.errors) + list(result.failures))


def print_tails(title, daemons, stream=None):
    """Writes each daemon's log tail (its `log_tail()`) under `title`."""
    stream = stream or sys.stderr
    stream.write(f"\n==== daemon logs for {title} ====\n")
    for d in daemons:
        stream.write(d.log_tail() + "\n")
