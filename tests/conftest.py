import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The reference machine's calibration whatever machine runs the tests (the default otherwise
# follows the host: simhpc.hardware.host.default_calibration), so that figures do not move with it.
os.environ["SIMHPC_CALIBRATION"] = str(ROOT / "validation" / "calibration" / "host.json")


@pytest.fixture
def scenarios_dir() -> Path:
    return ROOT / "scenarios"
