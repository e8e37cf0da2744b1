"""Detect the P4 toolchain (p4c, BMv2, PTF, p4c's Tofino backend and its assembler) and say, in one line, what a
purpose is missing."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Purpose = Literal["compile", "bmv2", "tofino"]
PURPOSES: tuple[Purpose, ...] = ("compile", "bmv2", "tofino")

# Tool name -> environment variable that overrides where it is found (a path or a command name).
ENV_OVERRIDES: dict[str, str] = {
    "p4c": "P4C",
    "p4c-bm2-ss": "P4C_BM2_SS",
    "p4c-barefoot": "P4C_BAREFOOT",
    "bfas": "BFAS",
    "simple_switch_grpc": "SIMPLE_SWITCH_GRPC",
    "simple_switch_CLI": "SIMPLE_SWITCH_CLI",
    "ptf": "PTF",
}
NN_MODULE = "pynng"  # what PTF 0.12's nn platform imports
THRIFT_MODULE = "thrift"  # what simple_switch_CLI imports
README_HINT = "see README 'P4 toolchain'"
TOFINO_HINT = "see docs/p4-toolchain.md"
# Set to 1 to make every tool look absent: runs the toolchain-absent path (every P4 suite skipped with its reason) on a
# machine that has the toolchain, as a fresh machine would.
HIDE_ENV = "TNG_HIDE_P4_TOOLCHAIN"
SKIP_EXIT_CODE = 3
TIMEOUT_S = 10.0

_VERSION_RE = re.compile(r"\d+(?:\.\d+)+(?:[-+][0-9A-Za-z][0-9A-Za-z.+-]*)?")


@dataclass(frozen=True, slots=True)
class Tool:
    """One executable: where it is (None when absent) and the version it reports (None when unknown)."""

    name: str
    path: Path | None
    version: str | None

    @property
    def found(self) -> bool:
        return self.path is not None


@dataclass(frozen=True, slots=True)
class Toolchain:
    """Everything that compiling P4 and running PTF against BMv2 needs, as found on this machine."""

    p4c: Tool
    p4c_bm2_ss: Tool
    p4c_barefoot: Tool  # p4c's Tofino backend, built by hand (docs/p4-toolchain.md)
    bfas: Tool  # the Tofino assembler built with it: checks the resources, writes context.json and the binary
    simple_switch_grpc: Tool
    simple_switch_cli: Tool
    ptf: Tool
    packet_in: bool  # simple_switch_grpc was built with nanomsg (--packet-in)
    thrift: bool  # simple_switch_grpc has --thrift-port, simple_switch_CLI exists, Python `thrift` imports
    nn_module: bool  # Python `pynng` imports (PTF's nn platform)
    hidden: bool = False  # HIDE_ENV made every tool look absent

    def tools(self) -> tuple[Tool, ...]:
        return (
            self.p4c,
            self.p4c_bm2_ss,
            self.p4c_barefoot,
            self.bfas,
            self.simple_switch_grpc,
            self.simple_switch_cli,
            self.ptf,
        )

    def features(self) -> dict[str, bool]:
        return {"packet_in": self.packet_in, "thrift": self.thrift, NN_MODULE: self.nn_module}

    def missing_for(self, purpose: Purpose) -> list[str]:
        """What `purpose` lacks: "compile" needs p4c-bm2-ss; "bmv2" needs simple_switch_grpc with nanomsg and PTF;
        "tofino" needs p4c-barefoot and bfas."""
        if purpose == "compile":
            return [] if self.p4c_bm2_ss.found else ["p4c-bm2-ss"]
        if purpose == "tofino":
            return [tool.name for tool in (self.p4c_barefoot, self.bfas) if not tool.found]
        if purpose == "bmv2":
            missing = []
            if not self.simple_switch_grpc.found:
                missing.append("simple_switch_grpc")
            elif not self.packet_in:
                missing.append("nanomsg support in simple_switch_grpc (--packet-in)")
            if not self.ptf.found:
                missing.append("ptf")
            if not self.nn_module:
                missing.append(f"Python module {NN_MODULE}")
            return missing
        raise ValueError(f"unknown purpose {purpose!r}; expected one of {', '.join(PURPOSES)}")

    def skip_reason(self, purpose: Purpose) -> str | None:
        """One line saying why `purpose` must be skipped, or None when everything it needs is here."""
        missing = self.missing_for(purpose)
        if not missing:
            return None
        if self.hidden:
            return f"skipped: P4 toolchain hidden by {HIDE_ENV}=1"
        what = ", ".join(f"{item} missing" for item in missing)
        return f"skipped: P4 toolchain not found ({what}; {TOFINO_HINT if purpose == 'tofino' else README_HINT})"


def hidden() -> bool:
    """Whether HIDE_ENV asks every caller to behave as on a machine without the toolchain."""
    value = os.environ.get(HIDE_ENV, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"${HIDE_ENV}={value!r}: expected 1 (hide the P4 toolchain) or 0")
    return value == "1"


def detect() -> Toolchain:
    """Look for every tool (honouring the environment overrides) and probe the switch's build options; with
    HIDE_ENV=1 every tool is reported missing."""
    if hidden():
        absent = {name: Tool(name, None, None) for name in ENV_OVERRIDES}
        return Toolchain(
            p4c=absent["p4c"],
            p4c_bm2_ss=absent["p4c-bm2-ss"],
            p4c_barefoot=absent["p4c-barefoot"],
            bfas=absent["bfas"],
            simple_switch_grpc=absent["simple_switch_grpc"],
            simple_switch_cli=absent["simple_switch_CLI"],
            ptf=absent["ptf"],
            packet_in=False,
            thrift=False,
            nn_module=False,
            hidden=True,
        )
    tools = {name: _find_tool(name) for name in ENV_OVERRIDES}
    if not tools["bfas"].found and tools["p4c-barefoot"].path is not None:
        tools["bfas"] = _bfas_beside(tools["p4c-barefoot"].path)
    switch = tools["simple_switch_grpc"]
    switch_help = _run(switch.path, "--help")[1] if switch.path else ""
    return Toolchain(
        p4c=tools["p4c"],
        p4c_bm2_ss=tools["p4c-bm2-ss"],
        p4c_barefoot=tools["p4c-barefoot"],
        bfas=tools["bfas"],
        simple_switch_grpc=switch,
        simple_switch_cli=tools["simple_switch_CLI"],
        ptf=tools["ptf"],
        packet_in="--packet-in" in switch_help,
        thrift="--thrift-port" in switch_help and tools["simple_switch_CLI"].found and _importable(THRIFT_MODULE),
        nn_module=_importable(NN_MODULE),
    )


def parse_version(text: str) -> str | None:
    """The first dotted version number in a tool's --version output (e.g. '1.2.4.8', '1.15.5-9674187f')."""
    match = _VERSION_RE.search(text)
    return match.group(0) if match else None


def _find_tool(name: str) -> Tool:
    override = os.environ.get(ENV_OVERRIDES[name])
    if override:
        found = shutil.which(override)
    else:
        # Scripts of the running interpreter first, so a venv's ptf is found without activating it.
        found = shutil.which(name, path=os.pathsep.join([sysconfig.get_path("scripts"), os.environ.get("PATH", "")]))
    if found is None:
        return Tool(name, None, None)
    path = Path(found)
    status, output = _run(path, "--version")
    return Tool(name, path, parse_version(output) if status == 0 else None)


def _bfas_beside(p4c_barefoot: Path) -> Tool:
    """bfas where p4c-barefoot really is: in the same directory (an install) or in p4c's build tree
    (backends/tofino/bf-p4c/p4c-barefoot beside backends/tofino/bf-asm/bfas), when PATH has only p4c-barefoot."""
    real = p4c_barefoot.resolve()
    for candidate in (real.parent / "bfas", real.parent.parent / "bf-asm" / "bfas"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return Tool("bfas", candidate, None)
    return Tool("bfas", None, None)


def _run(path: Path, arg: str) -> tuple[int | None, str]:
    """Exit status and stdout + stderr of `path arg`; (None, '') when it cannot run or outlives TIMEOUT_S."""
    try:
        done = subprocess.run(
            [str(path), arg], capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    return done.returncode, done.stdout + done.stderr


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def to_json(toolchain: Toolchain) -> dict[str, object]:
    """A JSON-ready view: tools, build options and what each purpose is missing."""
    return {
        "tools": {
            tool.name: {"path": str(tool.path) if tool.path else None, "version": tool.version}
            for tool in toolchain.tools()
        },
        "features": toolchain.features(),
        "missing": {purpose: toolchain.missing_for(purpose) for purpose in PURPOSES},
        "hidden": toolchain.hidden,
    }


def format_table(toolchain: Toolchain) -> str:
    """A plain-text table of tools, build options and purposes."""
    rows = [("tool", "version", "path")]
    rows += [(t.name, t.version or "-", str(t.path) if t.path else "missing") for t in toolchain.tools()]
    width = [max(len(row[i]) for row in rows) for i in range(2)]
    lines = [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}" for a, b, c in rows]
    lines.append("")
    lines += [f"{name:<10}  {'yes' if ok else 'no'}" for name, ok in toolchain.features().items()]
    lines.append("")
    for purpose in PURPOSES:
        missing = toolchain.missing_for(purpose)
        lines.append(f"{purpose:<10}  {'ready' if not missing else 'missing: ' + ', '.join(missing)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_p4.toolchain", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--require",
        choices=PURPOSES,
        help=f"print nothing and exit 0 if the purpose is ready, else print why and exit {SKIP_EXIT_CODE}",
    )
    args = parser.parse_args(argv)
    try:
        toolchain = detect()
    except ValueError as err:
        parser.error(str(err))
    if args.require:
        reason = toolchain.skip_reason(args.require)
        if reason:
            print(reason)
            return SKIP_EXIT_CODE
        return 0
    print(json.dumps(to_json(toolchain), indent=2) if args.json else format_table(toolchain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
