"""The scale benchmark's measuring helpers: a child's output, CPU time and peak RSS, and the cost ratio."""

from __future__ import annotations

import sys

import pytest
from tng_lab.bench_scale import measure_after_s, ratio, run_measured


def test_run_measured_reports_the_childs_output_and_its_peak_rss() -> None:
    child = "import sys; block = bytearray(64 * 1024 * 1024); block[::4096] = b'x' * len(block[::4096]); print('done')"
    stdout, cpu_s, rss = run_measured([sys.executable, "-c", child])
    assert stdout.strip() == "done"
    assert cpu_s >= 0
    assert rss >= 64 * 1024 * 1024


def test_run_measured_names_a_failing_command_and_its_last_error_line() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run_measured([sys.executable, "-c", "import sys; sys.exit('boom')"])


def test_ratio_compares_two_sizes_and_is_absent_without_both() -> None:
    runs = [{"clients": 10, "events_per_sec": 200}, {"clients": 10000, "events_per_sec": 80}]
    assert ratio(runs, "events_per_sec", 10, 10000) == 2.5
    assert ratio(runs[:1], "events_per_sec", 10, 10000) is None


def test_the_measurement_starts_after_warm_up_and_within_the_run() -> None:
    assert measure_after_s(10.0) == 2.0
    assert measure_after_s(3.0) == 2.0
    assert measure_after_s(1.5) == 1.0
