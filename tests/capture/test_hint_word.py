"""The word a capture's answer gives for its hint, decided once (``capture/hint_word.py``)."""

from __future__ import annotations

from memhoncho.capture.hint_word import hint_word, stalled
from memhoncho.capture.host import Host
from memhoncho.testing.config import write_api_key
from memhoncho.testing.runs import run_event


def test_a_capture_without_a_key_says_no_key_and_a_duplicate_says_nothing(host: Host) -> None:
    first = host.capture(run_event("c1", 0))
    assert hint_word(first) == "no-key" and stalled(hint_word(first))
    again = host.capture(run_event("c1", 0))
    assert again.status == "duplicate" and hint_word(again) is None and not stalled(None)


def test_a_capture_left_to_the_relay_says_relay_and_is_not_stalled(host: Host) -> None:
    write_api_key(host.deployment.config_dir, "k-test")
    with Host(host.deployment.config_dir, host.deployment.data_dir, hints=False) as quiet:
        word = hint_word(quiet.capture(run_event("c2", 0)))
    assert word == "relay" and not stalled(word)
