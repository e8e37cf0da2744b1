"""Which in-path switch a run uses: BMv2 with the tng pipeline when it can, Linux forwarding otherwise, and why."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tng_p4 import pipeline, toolchain

from tng_lab.scenario import Scenario, ScenarioError

PIPELINE = "tng"  # p4src/v1model/tng.p4, the LWIP switch
OPT_OUT_ENV = "TNG_LAB_SWITCH"  # "linux" forces Linux forwarding whatever the scenario says


@dataclass(frozen=True, slots=True)
class SwitchChoice:
    bmv2: bool
    notice: str  # one line for the run output and results.json
    simple_switch_grpc: Path | None = None
    p4info: Path | None = None
    bmv2_json: Path | None = None


def choose(scenario: Scenario, repo: Path, environ: dict[str, str] | None = None) -> SwitchChoice:
    """BMv2 when the scenario allows it (`[switch] use`), the environment does not opt out and everything it needs
    is here; raises ScenarioError when the scenario demands BMv2 (`use = "bmv2"`) and it cannot run."""
    environ = os.environ if environ is None else environ
    use = scenario.switch.use
    forced = environ.get(OPT_OUT_ENV, "")
    if forced not in ("", "linux", "auto"):
        raise ScenarioError(scenario.file, None, f"${OPT_OUT_ENV}={forced!r}: expected 'linux' or 'auto'")
    if forced == "linux":
        return SwitchChoice(False, f"Linux forwarding (BMv2 not used: ${OPT_OUT_ENV}=linux)")
    if use == "linux":
        return SwitchChoice(False, "Linux forwarding (BMv2 not used: the scenario sets [switch] use = 'linux')")
    try:
        choice = _bmv2(repo)
    except _Unavailable as err:
        if use == "bmv2":
            raise ScenarioError(scenario.file, "switch.use", f"'bmv2' but BMv2 cannot run here: {err}") from err
        return SwitchChoice(False, f"Linux forwarding (BMv2 not used: {err})")
    return choice


class _Unavailable(RuntimeError):
    """Why BMv2 cannot be this run's switch."""


def _bmv2(repo: Path) -> SwitchChoice:
    found = toolchain.detect()
    if found.hidden:
        raise _Unavailable(f"the P4 toolchain is hidden by {toolchain.HIDE_ENV}=1")
    if not found.simple_switch_grpc.found:
        raise _Unavailable("simple_switch_grpc not found (P4 toolchain: see README.md)")
    if not found.thrift:
        raise _Unavailable("no Thrift (simple_switch_CLI or the Python thrift package): egress queue rates need it")
    artifacts = pipeline.artifacts(PIPELINE, repo / pipeline.BUILD_DIR)
    missing = artifacts.missing()
    if missing:
        where = ", ".join(str(path.relative_to(repo)) for path in missing)
        raise _Unavailable(f"the {PIPELINE} pipeline is not built: {where} missing; `make p4`")
    binary = found.simple_switch_grpc.path
    notice = f"BMv2 ({binary}) with the {PIPELINE} pipeline, programmed by the tng controller"
    return SwitchChoice(True, notice, binary, artifacts.p4info, artifacts.bmv2_json)
