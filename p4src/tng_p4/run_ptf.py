"""Run the PTF suite of a P4 program against a fresh BMv2 switch (no root) and summarise the results."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import tng_p4
from tng_p4 import pipeline, toolchain, xunit
from tng_p4.bmv2 import Bmv2, Bmv2Config, Bmv2Error, nanomsg_config

PTF_DEVICE = 0
PTF_PORTS = "0-7"
DETAIL_WIDTH = 160  # characters of a failure message shown per test (the full text is in the xunit XML)


def ptf_command(
    ptf: Path, switch: Bmv2Config, artifacts: pipeline.Artifacts, ptf_dir: Path, workdir: Path, tests: list[str]
) -> list[str]:
    """The ptf command line for the nn platform: ports 0-7 of the switch over its nanomsg socket."""
    params = {
        "grpcaddr": switch.grpc_address,
        "p4info": str(artifacts.p4info),
        "config": str(artifacts.bmv2_json),
        "device_id": switch.device_id,
        "cpu_port": switch.cpu_port,
        "thrift_port": switch.thrift_port,  # simple_switch_CLI: queue rates, registers
    }
    return [
        sys.executable,
        str(ptf),
        "--platform",
        "nn",
        "--device-socket",
        f"{PTF_DEVICE}-{{{PTF_PORTS}}}@{switch.packet_socket}",
        "--test-dir",
        str(ptf_dir),
        "--pypath",
        str(Path(tng_p4.__file__).resolve().parent.parent),
        "--test-params",
        ";".join(f"{key}={value!r}" for key, value in params.items()),
        "--log-file",
        str(workdir / "ptf.log"),
        "--xunit",
        "--xunit-dir",
        str(workdir / "xunit"),
        *tests,
    ]


def main(argv: list[str] | None = None) -> int:
    root = pipeline.repo_root()
    parser = argparse.ArgumentParser(prog="python -m tng_p4.run_ptf", description=__doc__)
    parser.add_argument("--program", required=True, help="program name, a stem listed in p4src/programs.txt")
    parser.add_argument("--ptf-dir", type=Path, default=root / "ptf-tests" / "ptf", help="PTF test directory")
    parser.add_argument("--build-dir", type=Path, default=root / pipeline.BUILD_DIR, help="compiled artifacts")
    parser.add_argument(
        "--work-dir", type=Path, help="logs and xunit XML (default: build/ptf/<program>, emptied first)"
    )
    parser.add_argument("--json-summary", type=Path, help="also write the summary as JSON to this file")
    parser.add_argument("tests", nargs="*", help="PTF test or group names (default: the group named after the program)")
    args = parser.parse_args(argv)

    known = pipeline.programs(root)
    if args.program not in known:
        parser.error(f"unknown program {args.program!r}; p4src/programs.txt lists {', '.join(sorted(known))}")
    found = toolchain.detect()
    reason = found.skip_reason("bmv2")
    if reason:
        print(reason)
        _write_summary(args.json_summary, {"program": args.program, "skipped_reason": reason, "tests": []})
        return toolchain.SKIP_EXIT_CODE
    artifacts = pipeline.artifacts(args.program, args.build_dir.resolve())
    if artifacts.missing():
        print(f"run_ptf: {', '.join(map(str, artifacts.missing()))} missing: compile with 'make p4'")
        return 2
    workdir = (args.work_dir or root / "build" / "ptf" / args.program).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    assert found.simple_switch_grpc.path is not None and found.ptf.path is not None

    tests = args.tests or [args.program]
    # SIGTERM unwinds like Ctrl-C, so the switch and ptf stop with the run instead of holding its ports and CPU.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    # The nanomsg socket path must stay short (Unix socket paths are limited to 107 bytes).
    with tempfile.TemporaryDirectory(prefix="tng-bmv2-") as sockets:
        try:
            config = nanomsg_config(
                found.simple_switch_grpc.path, Path(sockets), log_path=workdir / "simple_switch_grpc.log"
            )
            with Bmv2(config):
                print(f"run_ptf: simple_switch_grpc on {config.grpc_address}, packets on {config.packet_socket}")
                command = ptf_command(found.ptf.path, config, artifacts, args.ptf_dir.resolve(), workdir, tests)
                status = subprocess.run(command, check=False).returncode
        except Bmv2Error as error:
            print(f"run_ptf: {error}")
            return 1

    results = xunit.read_results(workdir / "xunit")
    if not results:
        print(f"run_ptf: ptf exited with status {status} and reported no test")
    for result in results:
        detail = f"  ({textwrap.shorten(result.message, DETAIL_WIDTH)})" if result.message else ""
        print(f"{result.outcome.upper():<8} {result.name}{detail}")
    print(f"run_ptf: logs in {workdir}")
    print(xunit.summary_line("ptf", results))
    _write_summary(
        args.json_summary,
        {
            "program": args.program,
            "ptf_exit_status": status,
            **xunit.counts(results),
            "tests": [{"name": r.name, "outcome": r.outcome, "message": r.message} for r in results],
        },
    )
    failed = xunit.counts(results)["failed"]
    return 0 if results and not failed and status == 0 else 1


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _write_summary(path: Path | None, summary: dict[str, object]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
