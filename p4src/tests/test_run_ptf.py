"""run_ptf end to end with a fake switch and a fake ptf: skip, arguments, summary and exit status."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tng_p4 import run_ptf, toolchain

FAKE_SWITCH = """#!{python}
import os, socket, sys, time
args = sys.argv[1:]
if args[:1] == ["--help"]:
    print("  --packet-in arg  Enable receiving packet on this (nanomsg) socket.")
    sys.exit(0)
if args[:1] == ["--version"]:
    print("1.15.5")
    sys.exit(0)
host, port = args[args.index("--grpc-server-addr") + 1].split(":")
server = socket.socket()
server.bind((host, int(port)))
server.listen()
if "FAKE_SWITCH_PID" in os.environ:
    open(os.environ["FAKE_SWITCH_PID"], "w").write(str(os.getpid()))
while True:
    time.sleep(1)
"""

# Writes one xunit file per outcome named in FAKE_PTF_OUTCOMES, records its arguments, exits FAKE_PTF_STATUS.
FAKE_PTF = """
import json, os, sys, time
args = sys.argv[1:]
if args == ["--version"]:
    print("ptf 0.12.0")
    sys.exit(0)
out = args[args.index("--xunit-dir") + 1]
os.makedirs(out)
if "FAKE_PTF_PID" in os.environ:  # a suite that never ends
    open(os.environ["FAKE_PTF_PID"], "w").write(str(os.getpid()))
    while True:
        time.sleep(1)
json.dump(args, open(os.environ["FAKE_PTF_ARGS"], "w"))
bodies = {"passed": "", "failed": '<failure message="Did not receive expected packet">tb</failure>'}
for i, outcome in enumerate(os.environ["FAKE_PTF_OUTCOMES"].split(",")):
    name = f"test_wire_vectors.WireVector_{i}"
    with open(os.path.join(out, f"TEST-{name}.xml"), "w") as f:
        f.write(f'<testsuite><testcase classname="{name}" name="runTest">{bodies[outcome]}</testcase></testsuite>')
sys.exit(int(os.environ.get("FAKE_PTF_STATUS", "0")))
"""


def executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake toolchain and committed artifacts for tng_wire under tmp_path/build."""
    monkeypatch.setenv(
        "SIMPLE_SWITCH_GRPC", str(executable(tmp_path / "switch", FAKE_SWITCH.format(python=sys.executable)))
    )
    monkeypatch.setenv("PTF", str(executable(tmp_path / "ptf", FAKE_PTF)))
    monkeypatch.delenv(toolchain.HIDE_ENV, raising=False)  # these fakes are the toolchain under test
    monkeypatch.setenv("FAKE_PTF_ARGS", str(tmp_path / "ptf-args.json"))
    (tmp_path / "build" / "tng_wire").mkdir(parents=True)
    (tmp_path / "build" / "tng_wire" / "p4info.txtpb").write_text("pkg_info {}\n")
    (tmp_path / "build" / "tng_wire" / "bmv2.json").write_text("{}\n")
    return tmp_path


def run(tmp_path: Path, *extra: str) -> int:
    return run_ptf.main(
        [
            "--program", "tng_wire",
            "--build-dir", str(tmp_path / "build"),
            "--work-dir", str(tmp_path / "work"),
            "--json-summary", str(tmp_path / "summary.json"),
            *extra,
        ]
    )  # fmt: skip


def test_passing_suite(fakes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_PTF_OUTCOMES", "passed,passed")
    assert run(fakes) == 0
    out = capsys.readouterr().out.splitlines()
    assert "PASSED   test_wire_vectors.WireVector_0" in out
    assert out[-1] == "ptf: 2 passed, 0 failed, 0 skipped"
    summary = json.loads((fakes / "summary.json").read_text())
    assert (summary["passed"], summary["failed"], summary["skipped"]) == (2, 0, 0)
    assert [test["outcome"] for test in summary["tests"]] == ["passed", "passed"]


def test_ptf_gets_the_switch_and_the_artifacts(fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PTF_OUTCOMES", "passed")
    run(fakes)
    args = json.loads((fakes / "ptf-args.json").read_text())
    assert args[args.index("--platform") + 1] == "nn"
    assert args[args.index("--device-socket") + 1].startswith("0-{0-7}@ipc:///")
    assert args[args.index("--test-dir") + 1] == str(Path(run_ptf.__file__).resolve().parents[2] / "ptf-tests" / "ptf")
    assert args[-1] == "tng_wire"  # the group named after the program
    namespace: dict[str, object] = {}
    exec("class _TestParams:\n    " + args[args.index("--test-params") + 1], namespace)  # as ptf parses them
    params = namespace["_TestParams"]
    assert params.p4info == str(fakes / "build" / "tng_wire" / "p4info.txtpb")  # type: ignore[attr-defined]
    assert params.config == str(fakes / "build" / "tng_wire" / "bmv2.json")  # type: ignore[attr-defined]
    assert params.grpcaddr.startswith("127.0.0.1:")  # type: ignore[attr-defined]
    assert params.device_id == 1  # type: ignore[attr-defined]


def test_selected_tests_are_passed_on(fakes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PTF_OUTCOMES", "passed")
    run(fakes, "test_wire_check")
    assert json.loads((fakes / "ptf-args.json").read_text())[-1] == "test_wire_check"


def test_a_failure_fails_the_run(
    fakes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_PTF_OUTCOMES", "passed,failed")
    monkeypatch.setenv("FAKE_PTF_STATUS", "1")
    assert run(fakes) == 1
    out = capsys.readouterr().out.splitlines()
    assert "FAILED   test_wire_vectors.WireVector_1  (Did not receive expected packet)" in out
    assert out[-1] == "ptf: 1 passed, 1 failed, 0 skipped"


def test_ptf_that_reports_nothing_fails_the_run(
    fakes: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FAKE_PTF_OUTCOMES", raising=False)  # the fake ptf crashes before writing any xunit file
    assert run(fakes) == 1
    out = capsys.readouterr().out.splitlines()
    assert "run_ptf: ptf exited with status 1 and reported no test" in out
    assert out[-1] == "ptf: 0 passed, 0 failed, 0 skipped"


def test_missing_toolchain_skips_with_exit_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIMPLE_SWITCH_GRPC", str(tmp_path / "absent"))
    monkeypatch.delenv(toolchain.HIDE_ENV, raising=False)
    assert run(tmp_path) == toolchain.SKIP_EXIT_CODE
    reason = capsys.readouterr().out.strip()
    assert reason.startswith("skipped: P4 toolchain not found (simple_switch_grpc missing")
    assert json.loads((tmp_path / "summary.json").read_text())["skipped_reason"] == reason


def test_missing_artifacts_exit_2(fakes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (fakes / "build" / "tng_wire" / "bmv2.json").unlink()
    assert run(fakes) == 2
    assert "bmv2.json missing: compile with 'make p4'" in capsys.readouterr().out


def test_unknown_program_is_a_usage_error(fakes: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_ptf.main(["--program", "no_such_program"])
    assert exit_info.value.code == 2


def test_terminating_the_run_stops_the_switch_and_ptf(fakes: Path) -> None:
    """SIGTERM (a CI timeout, an operator's kill) leaves no switch or ptf behind to hold ports and CPU."""
    env = {**os.environ, "FAKE_PTF_PID": str(fakes / "ptf.pid"), "FAKE_SWITCH_PID": str(fakes / "switch.pid")}
    env["FAKE_PTF_OUTCOMES"] = "passed"
    command = [sys.executable, "-m", "tng_p4.run_ptf", "--program", "tng_wire", "--build-dir", str(fakes / "build")]
    run = subprocess.Popen([*command, "--work-dir", str(fakes / "work")], env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (fakes / "ptf.pid").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (fakes / "ptf.pid").exists(), "ptf never started"
    pids = [int((fakes / name).read_text()) for name in ("switch.pid", "ptf.pid")]
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) != 0
    for pid in pids:
        assert _gone(pid), f"process {pid} still runs after run_ptf was terminated"


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False
