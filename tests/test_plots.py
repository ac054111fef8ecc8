"""The figure scripts of plots/ run (on fewer points) and refuse bad input with exit status 2."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_prt_gains_draws_its_two_panels(tmp_path: Path, monkeypatch) -> None:
    module = runpy.run_path(str(ROOT / "plots" / "prt_gains.py"))
    draw = module["draw"]
    monkeypatch.setitem(draw.__globals__, "MODELS", {"ResNet-152": "pipeline_resnet152.yaml"})
    monkeypatch.setitem(draw.__globals__, "REUSE", (1, 2))
    output = tmp_path / "gains.png"
    draw(output, ["network.mode=analytic"])
    assert output.stat().st_size > 10_000


def test_prt_gains_names_a_bad_override() -> None:
    script = str(ROOT / "plots" / "prt_gains.py")
    result = subprocess.run([sys.executable, script, "--set", "workload.micro_batches=abc", "-o", "/dev/null"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert "workload.micro_batches" in result.stderr and "Traceback" not in result.stderr


def test_pipeline_measured_draws_the_committed_capture(tmp_path: Path) -> None:
    script = str(ROOT / "plots" / "pipeline_measured.py")
    output = tmp_path / "measured.png"
    result = subprocess.run([sys.executable, script, "--micro-batches", "4", "-o", str(output)],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert output.stat().st_size > 20_000
    missing = subprocess.run([sys.executable, script, "--micro-batches", "3", "-o", str(output)],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "no 1f1b run at m = 3" in missing.stderr
    broken = tmp_path / "broken.json.gz"
    broken.write_text("not gzip")
    refused = subprocess.run([sys.executable, script, "--capture", str(broken), "-o", str(output)],
                             capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2 and str(broken) in refused.stderr and "Traceback" not in refused.stderr
