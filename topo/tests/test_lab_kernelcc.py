"""The host-wide allowed congestion controls: widened for a run, put back by the last run or by clean."""

from pathlib import Path

import pytest
from tng_lab import kernelcc


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """A fake /proc file and original-list file; returns a switch saying whether another run is alive."""
    allowed = tmp_path / "allowed"
    allowed.write_text("reno bbr\n")
    monkeypatch.setattr(kernelcc, "ALLOWED", allowed)
    monkeypatch.setattr(kernelcc, "ORIGINAL", tmp_path / "run" / "allowed.orig")
    others = {"alive": False}
    monkeypatch.setattr(kernelcc, "other_runs_alive", lambda _own: others["alive"])
    return others


def test_a_run_adds_what_it_needs_and_puts_the_list_back(host: dict[str, bool]) -> None:
    with kernelcc.allowed({"cubic", "bbr"}, "tlab1-") as added:
        assert added == ["cubic"]
        assert kernelcc.ALLOWED.read_text().split() == ["reno", "bbr", "cubic"]
    assert kernelcc.ALLOWED.read_text().split() == ["reno", "bbr"]
    assert not kernelcc.ORIGINAL.exists()


def test_the_last_of_overlapping_runs_restores_the_original(host: dict[str, bool]) -> None:
    with kernelcc.allowed({"cubic"}, "tlab1-"):
        with kernelcc.allowed({"cubic"}, "tlab2-") as added:
            assert added == []  # the first run added it already
            host["alive"] = True  # the first run is still going when the second ends
        assert kernelcc.ALLOWED.read_text().split() == ["reno", "bbr", "cubic"]
        host["alive"] = False
    assert kernelcc.ALLOWED.read_text().split() == ["reno", "bbr"]


def test_clean_restores_after_a_killed_run_once_no_run_is_alive(host: dict[str, bool]) -> None:
    killed = kernelcc.allowed({"cubic"}, "tlab1-")
    killed.__enter__()  # a run that never reaches its exit
    host["alive"] = True
    assert kernelcc.restore(None) == []
    host["alive"] = False
    assert kernelcc.restore(None) == ["cubic"]
    assert kernelcc.ALLOWED.read_text().split() == ["reno", "bbr"]
    assert kernelcc.restore(None) == []
