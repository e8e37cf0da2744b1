"""toolchain.detect() against fake tools: small shell scripts on a PATH of our own."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from tng_p4 import toolchain

SWITCH_HELP = """Usage: SWITCH_NAME [options] <path to JSON config file>
Options:
  --packet-in arg       Enable receiving packet on this (nanomsg) socket.
  --thrift-port arg     TCP port on which to run the Thrift runtime server
  --no-p4               Enable the switch to start without an inout configuration
"""


def write_tool(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def full_toolchain(directory: Path, switch_help: str = SWITCH_HELP) -> None:
    write_tool(directory, "p4c", 'echo "p4c 1.2.4.8 (SHA: 1a2b3c4 BUILD: Release)"')
    write_tool(directory, "p4c-bm2-ss", 'echo "p4c-bm2-ss 1.2.4.8 (SHA: 1a2b3c4 BUILD: Release)"')
    write_tool(directory, "p4c-barefoot", 'echo "$0"; echo "Version 9.13.4"')
    write_tool(directory, "bfas", 'echo "Unrecognized option --version" >&2; exit 1')
    help_file = directory / "switch-help.txt"
    help_file.write_text(switch_help)
    write_tool(
        directory,
        "simple_switch_grpc",
        f'case "$1" in --version) echo "1.15.5-9674187f";; --help) /bin/cat {help_file};; esac',
    )
    write_tool(directory, "simple_switch_CLI", 'echo "Traceback: /usr/lib/python3.11/x.py" >&2; exit 1')
    write_tool(directory, "ptf", 'echo "0.12.0"')


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty PATH directory; the interpreter's own scripts directory is hidden too."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(toolchain.sysconfig, "get_path", lambda _name: str(tmp_path / "no-scripts"))
    for variable in (*toolchain.ENV_OVERRIDES.values(), toolchain.HIDE_ENV):
        monkeypatch.delenv(variable, raising=False)
    return bin_dir


def test_detects_every_tool_with_its_version(tools: Path) -> None:
    full_toolchain(tools)
    found = toolchain.detect()
    assert found.p4c == toolchain.Tool("p4c", tools / "p4c", "1.2.4.8")
    assert found.p4c_bm2_ss.version == "1.2.4.8"
    assert found.p4c_barefoot == toolchain.Tool("p4c-barefoot", tools / "p4c-barefoot", "9.13.4")
    assert found.bfas == toolchain.Tool("bfas", tools / "bfas", None)
    assert found.simple_switch_grpc == toolchain.Tool(
        "simple_switch_grpc", tools / "simple_switch_grpc", "1.15.5-9674187f"
    )
    assert found.simple_switch_cli == toolchain.Tool("simple_switch_CLI", tools / "simple_switch_CLI", None)
    assert found.ptf.version == "0.12.0"
    assert found.packet_in
    assert found.missing_for("compile") == []
    assert found.skip_reason("compile") is None
    assert found.skip_reason("tofino") is None


def test_bmv2_is_ready_with_nanomsg_and_pynng(tools: Path) -> None:
    full_toolchain(tools)
    found = toolchain.detect()
    assert found.nn_module  # pynng is a dependency of ptf
    assert found.missing_for("bmv2") == []
    assert found.skip_reason("bmv2") is None


def test_nothing_found_gives_one_line_reasons(tools: Path) -> None:
    found = toolchain.detect()
    assert all(not tool.found for tool in found.tools())
    assert not found.packet_in and not found.thrift
    assert found.skip_reason("compile") == (
        "skipped: P4 toolchain not found (p4c-bm2-ss missing; see README 'P4 toolchain')"
    )
    assert found.skip_reason("bmv2") == (
        "skipped: P4 toolchain not found (simple_switch_grpc missing, ptf missing; see README 'P4 toolchain')"
    )
    assert found.skip_reason("tofino") == (
        "skipped: P4 toolchain not found (p4c-barefoot missing, bfas missing; see docs/p4-toolchain.md)"
    )


def test_bfas_is_found_in_the_build_tree_of_a_linked_p4c_barefoot(tools: Path, tmp_path: Path) -> None:
    # docs/p4-toolchain.md: PATH may hold a link to the build tree's p4c-barefoot only.
    build = tmp_path / "p4c-build" / "backends" / "tofino"
    (build / "bf-p4c").mkdir(parents=True)
    (build / "bf-asm").mkdir()
    compiler = write_tool(build / "bf-p4c", "p4c-barefoot", 'echo "Version 9.13.4"')
    assembler = write_tool(build / "bf-asm", "bfas", "exit 1")
    (tools / "p4c-barefoot").symlink_to(compiler)
    found = toolchain.detect()
    assert found.bfas == toolchain.Tool("bfas", assembler, None)
    assert found.missing_for("tofino") == []
    assembler.unlink()
    assert toolchain.detect().missing_for("tofino") == ["bfas"]


def test_switch_without_nanomsg_is_not_enough_for_bmv2(tools: Path) -> None:
    full_toolchain(tools, switch_help="Options:\n  --thrift-port arg\n")
    found = toolchain.detect()
    assert not found.packet_in
    assert found.missing_for("bmv2") == ["nanomsg support in simple_switch_grpc (--packet-in)"]


def test_missing_python_nn_module_is_reported(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_toolchain(tools)
    monkeypatch.setattr(toolchain, "NN_MODULE", "tng_no_such_module")
    found = toolchain.detect()
    assert found.missing_for("bmv2") == ["Python module tng_no_such_module"]


def test_thrift_needs_the_cli_and_the_python_module(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_toolchain(tools)
    assert toolchain.detect().thrift
    monkeypatch.setattr(toolchain, "THRIFT_MODULE", "tng_no_such_module")
    assert not toolchain.detect().thrift


def test_thrift_is_absent_without_the_cli(tools: Path) -> None:
    full_toolchain(tools)
    (tools / "simple_switch_CLI").unlink()
    assert not toolchain.detect().thrift


def test_environment_override_wins_over_path(tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_toolchain(tools)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    custom = write_tool(elsewhere, "my-p4c-bm2-ss", 'echo "p4c-bm2-ss 1.2.5.16"')
    monkeypatch.setenv("P4C_BM2_SS", str(custom))
    assert toolchain.detect().p4c_bm2_ss == toolchain.Tool("p4c-bm2-ss", custom, "1.2.5.16")


def test_override_that_does_not_resolve_means_missing(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_toolchain(tools)
    monkeypatch.setenv("SIMPLE_SWITCH_GRPC", "/nonexistent/simple_switch_grpc")
    found = toolchain.detect()
    assert not found.simple_switch_grpc.found
    assert found.missing_for("bmv2") == ["simple_switch_grpc"]


def test_a_hanging_tool_has_no_version(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tool(tools, "p4c", "exec /bin/sleep 5")
    monkeypatch.setattr(toolchain, "TIMEOUT_S", 0.2)
    assert toolchain.detect().p4c == toolchain.Tool("p4c", tools / "p4c", None)


@pytest.mark.parametrize(
    ("output", "version"),
    [
        ("p4c 1.2.4.8 (SHA: 1a2b3c4 BUILD: Release)", "1.2.4.8"),
        ("1.15.5-9674187f\n", "1.15.5-9674187f"),
        ("ptf 0.12.0", "0.12.0"),
        ("Version 3", None),
        ("", None),
    ],
)
def test_parse_version(output: str, version: str | None) -> None:
    assert toolchain.parse_version(output) == version


def test_unknown_purpose_is_an_error(tools: Path) -> None:
    with pytest.raises(ValueError, match="unknown purpose"):
        toolchain.detect().missing_for("asic")  # type: ignore[arg-type]


def test_cli_require_exits_3_with_the_reason(tools: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert toolchain.main(["--require", "compile"]) == toolchain.SKIP_EXIT_CODE
    assert capsys.readouterr().out.strip() == toolchain.detect().skip_reason("compile")


def test_cli_require_exits_0_silently_when_ready(tools: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full_toolchain(tools)
    assert toolchain.main(["--require", "compile"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_json(tools: Path, capsys: pytest.CaptureFixture[str]) -> None:
    full_toolchain(tools)
    assert toolchain.main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tools"]["p4c-bm2-ss"] == {"path": str(tools / "p4c-bm2-ss"), "version": "1.2.4.8"}
    assert report["features"] == {"packet_in": True, "thrift": True, "pynng": True}
    assert report["missing"] == {"compile": [], "bmv2": [], "tofino": []}
    assert report["hidden"] is False


def test_hide_variable_makes_a_full_toolchain_look_absent(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_toolchain(tools)
    monkeypatch.setenv(toolchain.HIDE_ENV, "1")
    found = toolchain.detect()
    assert not any(tool.found for tool in found.tools())
    for purpose in toolchain.PURPOSES:
        assert found.skip_reason(purpose) == "skipped: P4 toolchain hidden by TNG_HIDE_P4_TOOLCHAIN=1"
    monkeypatch.setenv(toolchain.HIDE_ENV, "0")
    assert toolchain.detect().skip_reason("bmv2") is None


def test_hide_variable_rejects_other_values(tools: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(toolchain.HIDE_ENV, "yes")
    with pytest.raises(ValueError, match=r"TNG_HIDE_P4_TOOLCHAIN='yes': expected 1"):
        toolchain.detect()


def test_cli_table(tools: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_tool(tools, "p4c-bm2-ss", 'echo "p4c-bm2-ss 1.2.4.8"')
    assert toolchain.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["tool", "version", "path"]
    assert lines[2].split() == ["p4c-bm2-ss", "1.2.4.8", str(tools / "p4c-bm2-ss")]
    assert lines[3].split() == ["p4c-barefoot", "-", "missing"]
    assert lines[4].split() == ["bfas", "-", "missing"]
    assert lines[5].split() == ["simple_switch_grpc", "-", "missing"]
    assert "compile     ready" in lines
    assert "bmv2        missing: simple_switch_grpc, ptf" in lines
    assert "tofino      missing: p4c-barefoot, bfas" in lines
