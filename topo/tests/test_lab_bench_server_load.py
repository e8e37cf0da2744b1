"""The server-load benchmark's summary: the targets' verdicts, the request rate reached and the server's RSS and CPU
read from its samples."""

from __future__ import annotations

import os

from tng_lab.bench_server_load import GIB, MIB, ServerSample, summarize
from tng_lab.procs import rss_kib

LOAD = {"start": 0.5, "end": 1.9}


def client_report(established: int = 10_000, lost: int = 0, requests: int = 600_000) -> dict:
    return {
        "duration_s": 60.0,
        "bytes_received": requests * 1000,
        "bytes_corrupted": 0,
        "cpu_percent": 87.25,
        "connections": {
            "requested": 10_000,
            "established": established,
            "failed_handshakes": 10_000 - established,
            "lost": lost,
            "first_error": None,
            "establish_s": 8.0,
            "handshakes_per_s": 1249.96,
            "requests": requests,
            "interval_s": 1.0,
        },
    }


def samples(*rss_mib: float) -> list[ServerSample]:
    # One sample a second; the server uses half a core.
    return [ServerSample(float(i), int(rss * MIB), 0.5 * i) for i, rss in enumerate(rss_mib)]


def test_a_run_that_holds_every_connection_under_1_gib_meets_both_targets() -> None:
    result = summarize(client_report(), samples(10, 300, 420, 380), LOAD)
    assert result["targets"] == {"rss_at_most_1_gib": True, "no_connection_lost": True}
    assert result["server"] == {"rss_peak_mib": 420.0, "rss_end_mib": 380.0, "cpu_percent": 50.0, "samples": 4}
    assert result["handshakes_per_s"] == 1250.0
    assert (result["requests_per_s"], result["requests_asked_per_s"], result["request_rate_reached"]) == (
        10_000.0,
        10_000.0,
        1.0,
    )
    assert result["connections"]["requested"] == 10_000
    assert result["load_average"] == LOAD


def test_a_peak_above_1_gib_fails_the_rss_target_even_if_the_end_is_below() -> None:
    result = summarize(client_report(), samples(100, GIB / MIB + 1, 200), LOAD)
    assert result["targets"]["rss_at_most_1_gib"] is False
    assert result["server"]["rss_end_mib"] == 200.0


def test_a_lost_connection_or_a_failed_handshake_fails_the_loss_target() -> None:
    assert summarize(client_report(lost=1), samples(10, 20), LOAD)["targets"]["no_connection_lost"] is False
    assert summarize(client_report(established=9_999), samples(10, 20), LOAD)["targets"]["no_connection_lost"] is False


def test_a_server_that_keeps_up_with_a_third_of_the_requests_says_so() -> None:
    result = summarize(client_report(requests=200_000), samples(10, 20), LOAD)
    assert result["request_rate_reached"] == 0.333


def test_rss_is_read_from_proc() -> None:
    assert (rss_kib(os.getpid()) or 0) * 1024 > MIB
