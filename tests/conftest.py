from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = FIXTURES / "seeds"


@pytest.fixture(scope="session")
def seeds() -> Path:
    return SEEDS


@pytest.fixture(scope="session")
def prefect(tmp_path_factory):
    """One Prefect test harness (a temporary API server, ~9 s to start) for the whole session."""
    import os

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness():
        yield
