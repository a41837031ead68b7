"""Every integration test records perf sessions: as root."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _as_root(recording_perf: str) -> None:
    """Ask for root (and perf) before each test: a failure in CI, elsewhere a skip."""
