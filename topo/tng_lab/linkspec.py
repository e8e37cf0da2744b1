"""One direction of an emulated link, as a scenario writes it: checked here with linkem's units, rendered as its spec.

Scenarios give a direction as a TOML table (`{ rate = "10mbit", delay = "25ms", queue = "100pkt" }`) so that every
problem can name its key. The grammar and units are linkem's (docs/linkem.md, "Spec grammar").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z%]*)\s*$")
RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
SIZE_UNITS = {"pkt", "b", "kb", "mb"}
TRACE_MODELS = ("sprout", "steps")  # linkem gen-trace --model: Sprout's stochastic link, or a level redrawn per period


class SpecValueError(ValueError):
    """A value that linkem would reject; the message names the value and says what is expected."""


def _split(text: str) -> tuple[float, str]:
    match = _NUMBER.match(text)
    if not match:
        raise SpecValueError(f"`{text}` is not a non-negative number with a unit")
    return float(match[1]), match[2].lower()


def parse_rate(text: str) -> float:
    """Bits per second of `20mbit` (decimal prefixes)."""
    value, unit = _split(text)
    if unit not in RATE_UNITS:
        raise SpecValueError(f"`{text}` needs a rate unit: {', '.join(RATE_UNITS)}")
    bits = value * RATE_UNITS[unit]
    if bits < 1.0:
        raise SpecValueError(f'`{text}` is below 1 bit/s (for an outage use loss = "100%")')
    return bits


def parse_duration(text: str) -> float:
    """Seconds of `25ms`."""
    value, unit = _split(text)
    if unit not in TIME_UNITS:
        raise SpecValueError(f"`{text}` needs a time unit: {', '.join(TIME_UNITS)}")
    return value * TIME_UNITS[unit]


def parse_fraction(text: str) -> float:
    """A probability written as `0.5%` or as a fraction `0.005`."""
    value, unit = _split(text)
    if unit not in ("%", ""):
        raise SpecValueError(f"`{text}` must be a percentage (`0.5%`) or a fraction (`0.005`)")
    fraction = value / 100.0 if unit == "%" else value
    if fraction > 1.0:
        raise SpecValueError(f"`{text}` is above 100% (a plain number is a fraction: write `{value:g}%`)")
    return fraction


def check_amount(text: str) -> None:
    """A queue size or threshold: `100pkt`, `1500b`, `150kb`, `2mb`."""
    value, unit = _split(text)
    if unit not in SIZE_UNITS:
        raise SpecValueError(f"`{text}` needs a size unit: {', '.join(sorted(SIZE_UNITS))}")
    if unit == "pkt" and value != int(value):
        raise SpecValueError(f"`{text}` is not a whole number of packets")
    if value == 0:
        raise SpecValueError(f"`{text}` must hold at least one packet")


def parse_size(text: str, packet_bytes: int) -> int:
    """Bytes of a queue size as linkem reads it (decimal: 1 kb = 1000 bytes; a packet is `packet_bytes`)."""
    check_amount(text)
    value, unit = _split(text)
    scale = {"pkt": packet_bytes, "b": 1, "kb": 1000, "mb": 1_000_000}[unit]
    return int(value * scale)


@dataclass(frozen=True, slots=True)
class TraceModel:
    """A synthetic trace that `linkem gen-trace` writes before the run."""

    model: str
    mean_mbps: float
    seconds: int = 60
    seed: int = 1
    options: tuple[tuple[str, float], ...] = ()  # further gen-trace flags, e.g. ("sigma", 200.0)

    def argv(self) -> list[str]:
        """The gen-trace arguments after `linkem gen-trace`."""
        args = ["--model", self.model, "--mean-mbps", f"{self.mean_mbps:g}"]
        args += ["--seconds", str(self.seconds), "--seed", str(self.seed)]
        for name, value in self.options:
            args += [f"--{name.replace('_', '-')}", f"{value:g}"]
        return args

    def file_name(self, link: str, direction: str) -> str:
        return f"{link}-{direction}-{self.model}-{self.mean_mbps:g}mbps-seed{self.seed}.trace"


@dataclass(frozen=True, slots=True)
class Direction:
    """One direction of a link: a constant rate or a trace (or neither: unlimited), then delay, loss, queue, ECN."""

    rate_bps: float | None = None
    trace_file: Path | None = None
    trace_model: TraceModel | None = None
    delay_s: float = 0.0
    extra: tuple[tuple[str, str], ...] = ()  # jitter, reorder, loss, ge, queue, ecn: already checked, passed through

    def spec(self, trace_file: Path | None = None) -> str:
        """The linkem spec; `trace_file` is where a generated trace was written."""
        parts = []
        if self.rate_bps is not None:
            parts.append(f"rate={round(self.rate_bps)}bit")
        trace = trace_file or self.trace_file
        if trace is not None:
            parts.append(f"trace={trace}")
        if self.delay_s:
            parts.append(f"delay={round(self.delay_s * 1e6)}us")
        parts += [f"{key}={value}" for key, value in self.extra]
        return ",".join(parts)

    def describe(self) -> str:
        """A short human description: `10 Mbit/s, 25 ms` or `sprout trace 8 Mbit/s, 20 ms`."""
        if self.rate_bps is not None:
            service = f"{self.rate_bps / 1e6:g} Mbit/s"
        elif self.trace_model is not None:
            service = f"{self.trace_model.model} trace {self.trace_model.mean_mbps:g} Mbit/s"
        elif self.trace_file is not None:
            service = f"trace {self.trace_file.name}"
        else:
            service = "unlimited"
        return f"{service}, {self.delay_s * 1e3:g} ms"
