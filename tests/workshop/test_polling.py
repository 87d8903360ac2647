"""streaming/polling.poll: the value when it comes, the awaited thing named at the deadline, errors that
mean "not yet" told from errors that end the wait."""

from __future__ import annotations

import time

import pytest

from streaming.workshop.polling import poll


def test_returns_the_first_truthy_value():
    answers = iter([None, 0, [], {"ready": True}])
    assert poll(lambda: next(answers), 5, "the fourth answer", interval_s=0.01) == {"ready": True}


def test_names_what_was_awaited_and_the_last_error_at_the_deadline():
    def not_up() -> bool:
        raise ConnectionRefusedError("nobody there")

    began = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the server \(last error: "
                                             r"ConnectionRefusedError\('nobody there'\)\)"):
        poll(not_up, 0.2, "the server", interval_s=0.05)
    assert 0.2 <= time.monotonic() - began < 2


def test_a_callable_what_is_asked_at_the_deadline_and_the_error_type_is_the_callers():
    seen = []

    def check() -> bool:
        seen.append(len(seen))
        return False

    with pytest.raises(TimeoutError, match=r"waiting for the rows \(\d+ polls\)"):
        poll(check, 0.1, lambda: f"the rows ({len(seen)} polls)", interval_s=0.02, error=TimeoutError)


def test_an_error_outside_retry_on_ends_the_wait_at_once():
    def exited() -> bool:
        raise RuntimeError("the process exited")

    began = time.monotonic()
    with pytest.raises(RuntimeError, match="the process exited"):
        poll(exited, 30, "the process", retry_on=())
    assert time.monotonic() - began < 1
