"""BMv2's Thrift runtime, through simple_switch_CLI: egress queue rates and depths, register resets.

P4Runtime cannot set BMv2's queue rates or write its registers, so the controller runs simple_switch_CLI (one process
per batch of commands, with this interpreter, whose `thrift` package the CLI needs). The CLI is found on PATH or
through $SIMPLE_SWITCH_CLI."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Iterable, Sequence

from tng_controller.switch_config import PortConfig

CLI = "simple_switch_CLI"
PACKET_BITS = 1500 * 8  # the queue rates are packets/s; the configured capacities are bit/s of 1500-byte packets
SEEN_FLOW_REGISTERS = ("ingress.classify.seen_flows_a", "ingress.classify.seen_flows_b")
TIMEOUT_S = 10.0


class ThriftError(Exception):
    """A Thrift command that did not run; the message names the switch, the address and the reason."""


def queue_commands(ports: Iterable[PortConfig]) -> list[str]:
    """set_queue_rate / set_queue_depth for every port with a capacity or a queue depth."""
    commands = []
    for port in ports:
        if port.capacity_bps is not None:
            commands.append(f"set_queue_rate {max(1, round(port.capacity_bps / PACKET_BITS))} {port.port}")
        if port.queue_packets is not None:
            commands.append(f"set_queue_depth {port.queue_packets} {port.port}")
    return commands


def reset_seen_flows_commands() -> list[str]:
    return [f"register_reset {name}" for name in SEEN_FLOW_REGISTERS]


class Bmv2Thrift:
    """Runs simple_switch_CLI commands against one switch's Thrift port."""

    def __init__(self, switch: str, address: str) -> None:
        self.switch = switch
        self.host, _, port = address.rpartition(":")
        self.port = int(port)

    async def run(self, commands: Sequence[str]) -> None:
        """Runs `commands` in one CLI process; ThriftError if the CLI is missing, fails or reports an error."""
        if not commands:
            return
        cli = os.environ.get("SIMPLE_SWITCH_CLI", CLI)
        path = shutil.which(cli)
        where = f"switch {self.switch}: thrift {self.host}:{self.port}"
        if path is None:
            raise ThriftError(f"{where}: {cli} not found on PATH (install BMv2 or set SIMPLE_SWITCH_CLI)")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            path,
            "--thrift-ip",
            self.host.strip("[]"),
            "--thrift-port",
            str(self.port),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(TIMEOUT_S):
                output, _ = await process.communicate("\n".join(commands).encode() + b"\n")
        except TimeoutError:
            process.kill()
            await process.wait()
            raise ThriftError(f"{where}: {cli} did not finish within {TIMEOUT_S:.0f} s") from None
        text = output.decode(errors="replace")
        # The CLI prints errors and goes on with the next command; its exit status is 0 either way.
        errors = [line.strip() for line in text.splitlines() if "Error" in line or "Could not connect" in line]
        if process.returncode or errors:
            reason = "; ".join(errors) or (text.strip().splitlines() or [f"exit status {process.returncode}"])[-1]
            raise ThriftError(f"{where}: {reason}")
