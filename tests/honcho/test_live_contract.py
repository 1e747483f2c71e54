"""The Honcho wire contract against a real Honcho, when MEMHONCHO_TEST_HONCHO_URL names one.

The same scenarios run against the stand-in in ``test_standin.py`` on every run, so they
cannot rot; here they check that the stand-in still tells the truth about the real server.
"""

from __future__ import annotations

import os

import pytest

from memhoncho.testing.contract import SCENARIOS, Scenario

LIVE_URL = os.environ.get("MEMHONCHO_TEST_HONCHO_URL")
LIVE_KEY = os.environ.get("MEMHONCHO_TEST_HONCHO_API_KEY")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not LIVE_URL, reason="MEMHONCHO_TEST_HONCHO_URL is not set"),
]


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_a_real_honcho_keeps_the_contract(scenario: Scenario) -> None:
    assert LIVE_URL is not None
    scenario(LIVE_URL, LIVE_KEY)
