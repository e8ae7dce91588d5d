from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = FIXTURES / "seeds"


@pytest.fixture(scope="session")
def seeds() -> Path:
    return SEEDS
