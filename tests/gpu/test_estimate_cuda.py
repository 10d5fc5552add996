"""The estimate against the real step on the GPU: ``peak_bytes`` within 10 % of
``torch.cuda.max_memory_allocated``, ``reserved_bytes`` of ``max_memory_reserved``,
``needs_bytes`` of what NVML shows for the process; the largest batch said to fit
under a cap runs, and the next power of two up does what the estimate says.

The figures come from ``benchmarks.estimate_gpu`` (real steps in child processes,
the estimate beside them); this test runs two of its models."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from benchmarks import estimate_gpu  # noqa: E402


@pytest.fixture(scope="module")
def folders():
    with tempfile.TemporaryDirectory() as tmp:
        yield estimate_gpu.write_folders(Path(tmp), ["gpt2", "vit"])


def test_the_three_figures_are_within_ten_percent_of_the_real_step(folders):
    rows = estimate_gpu.accuracy(folders)
    assert len(rows) == 4
    for row in rows:
        assert "error" not in row["real"], row["real"]
        where = f"{row['model']} {row['mode']}"
        assert abs(row["peak_error_pct"]) <= 10, (where, row)
        assert abs(row["reserved_error_pct"]) <= 10, (where, row)
        if row["needs_error_pct"] is not None:
            assert abs(row["needs_error_pct"]) <= 10, (where, row)


def test_the_largest_batch_said_to_fit_runs_and_the_next_power_of_two_is_predicted(folders):
    check = estimate_gpu.batch_check(folders)
    assert check["largest_batch"], check
    fits, up = check["runs"]
    assert fits["predicted_fits"] and fits["oom"] is False, check
    assert up["oom"] is (not up["predicted_fits"]), check
