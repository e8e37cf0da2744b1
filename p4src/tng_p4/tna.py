"""The Tofino (TNA) program's contract checks: p4c's front and mid end (p4test) against the TNA includes, the P4Info
names it declares, and the names and ids of the P4Info p4c-barefoot compiled (p4src/build/tng_tna/), each compared
with the v1model program's P4Info.

p4test is found like the other tools (`$P4TEST`, else PATH; absent under TNG_HIDE_P4_TOOLCHAIN=1). The TNA includes
(`tna.p4` and what it includes) come from `$TNG_TNA_INCLUDE`, else from the `share/p4c/p4include` directory beside
a p4c, p4test or p4c-barefoot install that has `tna.p4` (where p4c's Tofino backend installs them), else from the
build tree p4c-barefoot runs from.

`python -m tng_p4.tna check` runs the check and prints what it found; exits 3 (skipped) without p4test or includes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tng_p4 import pipeline, toolchain

PROGRAM = Path("p4src/tna/tng.p4")
BUILD_NAME = "tng_tna"  # its directory under p4src/build/ (tng_p4.artifacts)
V1MODEL_P4INFO = pipeline.artifacts("tng", pipeline.BUILD_DIR).p4info
TNA_P4INFO = pipeline.BUILD_DIR / BUILD_NAME / "p4info.txtpb"
INCLUDE_ENV = "TNG_TNA_INCLUDE"
P4TEST_ENV = "P4TEST"
BAREFOOT = "p4c-barefoot"
# tna.p4 picks the chip's specs by this macro, which p4c's Tofino driver defines; p4test does not.
TOFINO_1 = "-D__TARGET_TOFINO__=1"
TIMEOUT_S = 300.0

# P4Info kinds compared between the targets, as named in p4info.txtpb.
KINDS = ("tables", "actions", "counters", "digests")

# Names only the Tofino program has (docs/tofino.md): its ingress cannot read egress's queue registers, so egress
# reports queueing times to steering through the recirculation port, and the controller says which ports report and
# which LWIP link each one is.
TNA_ONLY: dict[str, frozenset[str]] = {
    "tables": frozenset({"egress.report_queue_delay.queue_reports", "ingress.steering.queue_report_links"}),
    "actions": frozenset(
        {
            "egress.report_queue_delay.report_every",
            "ingress.steering.report_lte_of",
            "ingress.steering.report_wifi_of",
        }
    ),
    "counters": frozenset(),
    "digests": frozenset(),
}

# Names whose P4Info id differs per target (docs/tofino.md): v1model's compiler names the digest by its struct and
# takes no @id for it, the Tofino backend hashes the digest's name with the pipe prefix and takes no @id on externs.
TARGET_SPECIFIC_IDS: dict[str, frozenset[str]] = {
    "tables": frozenset(),
    "actions": frozenset(),
    "counters": frozenset(),
    "digests": frozenset({"new_flow_digest_t"}),
}

# An @name annotation with the annotations around it, and the kind of declaration they annotate.
_MIDEND_NAME = re.compile(
    r'((?:@\w+(?:\([^)]*\))?\s+)*)@name\("\.?([^"]+)"\)((?:\s+@\w+(?:\([^)]*\))?)*)\s+(table|action|Counter|Digest)\b'
)
_KIND_OF = {"table": "tables", "action": "actions", "Counter": "counters", "Digest": "digests"}
_P4INFO_ENTITY = re.compile(
    r'^(tables|actions|counters|digests) \{\n  preamble \{\n    id: (\d+)\n    name: "([^"]+)"', re.M
)


@dataclass(frozen=True, slots=True)
class Setup:
    """What the check needs, or the one-line reason it cannot run."""

    p4test: Path | None
    include: Path | None

    def skip_reason(self) -> str | None:
        if toolchain.hidden():
            return f"skipped: P4 toolchain hidden by {toolchain.HIDE_ENV}=1"
        missing = []
        if self.p4test is None:
            missing.append("p4test missing")
        if self.include is None:
            missing.append(f"TNA includes (tna.p4) not found: set ${INCLUDE_ENV}")
        return f"skipped: {'; '.join(missing)} (see docs/tofino.md)" if missing else None


def find() -> Setup:
    """Locate p4test and the TNA includes (both None under TNG_HIDE_P4_TOOLCHAIN=1)."""
    if toolchain.hidden():
        return Setup(None, None)
    p4test = shutil.which(os.environ.get(P4TEST_ENV) or "p4test")
    return Setup(Path(p4test) if p4test else None, find_include())


def find_include() -> Path | None:
    """$TNG_TNA_INCLUDE, else share/p4c/p4include beside an installed p4c, p4test or p4c-barefoot, or the p4include
    directory of the build tree p4c-barefoot runs from, if it holds tna.p4."""
    configured = os.environ.get(INCLUDE_ENV)
    if configured:
        return Path(configured) if (Path(configured) / "tna.p4").is_file() else None
    barefoot = os.environ.get(toolchain.ENV_OVERRIDES[BAREFOOT]) or BAREFOOT
    for tool in (os.environ.get("P4C") or "p4c", os.environ.get(P4TEST_ENV) or "p4test", barefoot):
        found = shutil.which(tool)
        if found is None:
            continue
        binary = Path(found).resolve()
        candidates = [binary.parent.parent / "share" / "p4c" / "p4include"]
        if tool == barefoot:  # build/backends/tofino/bf-p4c/p4c-barefoot beside build/p4include
            candidates += [ancestor / "p4include" for ancestor in binary.parents[:4]]
        for candidate in candidates:
            if (candidate / "tna.p4").is_file():
                return candidate
    return None


@dataclass(frozen=True, slots=True)
class FrontEndResult:
    returncode: int
    output: str  # p4test's stdout and stderr
    midend: str  # the program after the mid end, as P4 (empty when it failed)


def front_end(root: Path, setup: Setup) -> FrontEndResult:
    """Run p4test on the TNA program from the repository root; keep the mid end's last program."""
    assert setup.p4test is not None and setup.include is not None
    with tempfile.TemporaryDirectory(prefix="tng-tna-") as scratch:
        command = [
            str(setup.p4test), "--arch", "tna", TOFINO_1, "-I", str(setup.include), "-I", "p4src",
            "--top4", "MidEndLast", "--dump", scratch, str(PROGRAM),
        ]  # fmt: skip
        done = subprocess.run(
            command, cwd=root, capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S, check=False
        )
        dumps = sorted(Path(scratch).glob("*MidEndLast*.p4"))
        midend = dumps[0].read_text() if dumps and done.returncode == 0 else ""
    return FrontEndResult(done.returncode, done.stdout + done.stderr, midend)


def declared_names(midend: str) -> dict[str, set[str]]:
    """Tables, actions, counters and digests of the mid end's program, by their fully qualified P4Info names."""
    names: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for before, name, after, kind in _MIDEND_NAME.findall(midend):
        if "@hidden" not in before + after:  # hidden actions are not in P4Info
            names[_KIND_OF[kind]].add(name)
    return names


def p4info_ids(p4info: str) -> dict[str, dict[str, int]]:
    """Tables, actions, counters and digests of a P4Info text file: name -> id, by kind."""
    ids: dict[str, dict[str, int]] = {kind: {} for kind in KINDS}
    for kind, entity_id, name in _P4INFO_ENTITY.findall(p4info):
        ids[kind][name] = int(entity_id)
    return ids


def p4info_names(p4info: str) -> dict[str, set[str]]:
    """Tables, actions, counters and digests named in a P4Info text file."""
    return {kind: set(names) for kind, names in p4info_ids(p4info).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_p4.tna", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["check"])
    parser.parse_args(argv)
    setup = find()
    reason = setup.skip_reason()
    if reason:
        print(reason)
        return toolchain.SKIP_EXIT_CODE
    root = Path.cwd()
    result = front_end(root, setup)
    if result.returncode != 0:
        print(result.output, end="")
        print(f"{PROGRAM}: p4test --arch tna failed (exit {result.returncode})")
        return 1
    names = declared_names(result.midend)
    print(f"{PROGRAM}: front and mid end pass; " + ", ".join(f"{len(names[k])} {k}" for k in KINDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
