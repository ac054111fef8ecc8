from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def scenarios_dir() -> Path:
    return ROOT / "scenarios"
