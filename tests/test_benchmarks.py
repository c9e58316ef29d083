"""Every reproducible benchmark runs at its smallest size (``--smoke``), so that a refactor
cannot silently break one; each leaves no process behind. Their numbers are not asserted:
speed is measured in benchmarks/, never in a test."""

import glob
import importlib.util
import os
import subprocess
import sys
import uuid

import pytest

from tests.helpers import gone, patience

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCHMARKS, "*.py"))
                 if os.path.basename(p) not in ("smoke.py", "workloads.py"))


def test_every_benchmark_has_a_smoke_size():
    assert len(SCRIPTS) >= 10, SCRIPTS
    for name in SCRIPTS:
        with open(os.path.join(BENCHMARKS, name), encoding="utf-8") as f:
            source = f.read()
        assert "smoke.parse(" in source or "--smoke" in source, name


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag`` (a benchmark's children, which are
    no longer its descendants once it exited)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if tag.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.slow  # each starts processes
@pytest.mark.parametrize("name", SCRIPTS)
def test_the_benchmark_runs_at_its_smoke_size(name, tmp_path):
    if name == "bench_beam.py" and importlib.util.find_spec("apache_beam") is None:
        pytest.skip("needs Apache Beam")
    tag = f"QUEUEKIT_SMOKE_{uuid.uuid4().hex}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **{tag: "1"})
    done = subprocess.run([sys.executable, os.path.join(BENCHMARKS, name), "--smoke"],
                          capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=patience(400))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert gone(_tagged(tag)), f"{name} left processes behind"
