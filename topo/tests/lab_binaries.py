"""The fixture of the release binaries the lab's end-to-end tests run (a module of its own, not a conftest.py: the
controller's tests import their conftest by name, and a second conftest module would shadow it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def bin_dir() -> Path:
    """The release linkem and tng the lab runs: TNG_LAB_BIN_DIR when set, else built with cargo."""
    if os.geteuid() != 0:
        pytest.skip("needs root for network namespaces")
    if os.environ.get("TNG_LAB_BIN_DIR"):
        return Path(os.environ["TNG_LAB_BIN_DIR"])
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo not found: cannot build linkem and tng")
    build = subprocess.run(
        [cargo, "build", "--release", "-p", "linkem", "-p", "tng-agent"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, f"cargo build failed:\n{build.stderr[-3000:]}"
    return REPO / "target" / "release"
