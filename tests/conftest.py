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

    # The CLI's start-up limit (flows.cli: 90 s): a loaded 2-core machine passes the default 30 s.
    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium, one per session (tests/browser.py). Missing chromium fails:
    CI installs it (`make browser`, a step of `make test`)."""
    from tests.browser import close_browser, get_browser

    try:
        shared, missing = get_browser(), None
    except RuntimeError as exc:
        shared, missing = None, str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)
    yield shared
    close_browser()


@pytest.fixture(scope="session")
def sample_warehouse(prefect, tmp_path_factory) -> Path:
    """The whole sample bucket ingested and aggregated by the nightly flow (read-only use:
    tests that write copy it first)."""
    from flows.nightly import nightly

    out = tmp_path_factory.mktemp("sample-warehouse")
    warehouse = out / "warehouse.duckdb"
    bucket = Path(__file__).parents[1] / "data" / "sample_bucket"
    nightly(bucket=str(bucket), warehouse=warehouse, workers=2, report_path=out / "report.md")
    return warehouse
