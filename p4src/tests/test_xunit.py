"""Reading PTF's xunit XML (as unittest-xml-reporting writes it) into outcomes and the summary line."""

from __future__ import annotations

from pathlib import Path

from tng_p4.xunit import TestResult, counts, read_results, summary_line

SUITE = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="{name}" tests="1" failures="0" errors="0" skipped="0">
\t<testcase classname="{name}" name="{method}" time="0.002">{body}</testcase>
</testsuite>
"""


def write_case(directory: Path, name: str, body: str = "", method: str = "runTest") -> None:
    (directory / f"TEST-{name}.xml").write_text(SUITE.format(name=name, method=method, body=body))


def test_outcomes_by_test(tmp_path: Path) -> None:
    write_case(tmp_path, "test_wire_vectors.WireVector_ack")
    write_case(
        tmp_path,
        "test_wire_vectors.WireVector_retry",
        '<failure type="AssertionError" message="Did not receive expected packet"><![CDATA[Traceback]]></failure>',
    )
    write_case(tmp_path, "test_wire_check.TcpToPort4477IsNotChecked", '<error type="RuntimeError">boom</error>')
    write_case(tmp_path, "test_wire_check.Later", '<skipped type="skip" message="not on this target"/>')
    assert read_results(tmp_path) == [
        TestResult("test_wire_check.Later", "skipped", "not on this target"),
        TestResult("test_wire_check.TcpToPort4477IsNotChecked", "failed", "boom"),
        TestResult("test_wire_vectors.WireVector_ack", "passed"),
        TestResult("test_wire_vectors.WireVector_retry", "failed", "Did not receive expected packet"),
    ]


def test_method_names_other_than_runtest_are_kept(tmp_path: Path) -> None:
    write_case(tmp_path, "suite.Case", method="test_one")
    assert read_results(tmp_path) == [TestResult("suite.Case.test_one", "passed")]


def test_counts_and_summary_line(tmp_path: Path) -> None:
    results = [TestResult("a", "passed"), TestResult("b", "passed"), TestResult("c", "failed", "x")]
    assert counts(results) == {"passed": 2, "failed": 1, "skipped": 0}
    assert summary_line("ptf", results) == "ptf: 2 passed, 1 failed, 0 skipped"


def test_no_xml_means_no_results(tmp_path: Path) -> None:
    assert read_results(tmp_path / "absent") == []
