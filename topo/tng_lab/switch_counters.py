"""BMv2's counters around a run: where the steered packets went and what VISIBLE did with their ACKs.

P4Runtime reads counters without arbitration, so this never competes with the controller for mastership. BMv2's
gRPC server listens only inside the switch namespace, so the lab runs this module there (`python -m
tng_lab.switch_counters`), once before and once after each run of a steered workload.

A packet ingress forwarded to a link's port and never sent from it was dropped by the port's egress queue (BMv2's
traffic manager drops without telling the pipeline): forwarded minus sent is that queue's drops, for steered and
routed traffic alike.

What BMv2 loses before its pipeline (its capture sockets overflowing while it is short of CPU) no P4 counter sees:
the kernel's receive counters of the switch namespace's interfaces, read with the P4 counters, minus what the
pipeline forwarded, dropped or consumed, is that loss.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import finsy as fy
import grpc
from finsy.proto import p4r, p4r_grpc
from tng_p4.pipeline import DROPS, FORWARDED, PORT_TX, STEERED, VISIBLE_DECISIONS, VisibleDecision

from tng_lab.netns import LabError, sh

READ_TIMEOUT_S = 5.0
# The reading process: Python's start and finsy's import took over 30 s on a 2-core machine at load 20, and a run
# that gives up on its counters loses every workload measured so far.
PROCESS_TIMEOUT_S = 120.0
COUNTERS = (STEERED, FORWARDED, PORT_TX, DROPS, VISIBLE_DECISIONS)
Snapshot = dict[str, dict[int, int]]  # counter name -> index -> packets
KERNEL_RX = "kernel.rx_packets"  # pseudo counter of a snapshot: packets the namespace's interfaces received (index 0)
SYS_NET = Path("/sys/class/net")
# VISIBLE decisions after which the sum does not close: packet-outs of the helper enter without a kernel receive.
HELPER_TRAFFIC = (VisibleDecision.DATA_COPIED, VisibleDecision.RETRANSMIT_REQUESTED, VisibleDecision.ACK_REPORTED)


@dataclass(frozen=True, slots=True)
class LinkCounts:
    steered: int  # packets the switch steered to the link's port
    sent: int  # packets the port sent (steered ones and any other)
    queue_drops: int  # forwarded to the port, never sent: its egress queue was full


@dataclass(frozen=True, slots=True)
class SwitchCounts:
    """What one run did on the switch."""

    links: dict[str, LinkCounts]
    visible: dict[str, int]  # VISIBLE's decisions by name (held, boosted, retransmit_requested, ...)
    dropped: int  # packets the pipeline dropped (ingress.drops, every reason)
    # Received by the switch's interfaces and never seen by its pipeline; None when the helper took part.
    input_losses: int | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def between(cls, before: Snapshot, after: Snapshot, ports: dict[str, int]) -> SwitchCounts:
        def delta(counter: str, index: int) -> int:
            return after.get(counter, {}).get(index, 0) - before.get(counter, {}).get(index, 0)

        links = {}
        for name, port in ports.items():
            steered, sent = delta(STEERED, port), delta(PORT_TX, port)
            links[name] = LinkCounts(steered, sent, max(0, delta(FORWARDED, port) - sent))
        visible = {decision.name.lower(): delta(VISIBLE_DECISIONS, decision) for decision in VisibleDecision}
        dropped = sum(delta(DROPS, index) for index in after.get(DROPS, {}))
        input_losses = None
        if KERNEL_RX in after and not any(delta(VISIBLE_DECISIONS, decision) for decision in HELPER_TRAFFIC):
            forwarded = sum(delta(FORWARDED, index) for index in after.get(FORWARDED, {}))
            consumed = delta(VISIBLE_DECISIONS, VisibleDecision.HELD)
            input_losses = max(0, delta(KERNEL_RX, 0) - forwarded - dropped - consumed)
        return cls(links, visible, dropped, input_losses)


def read(address: str, p4info: Path, device_id: int) -> Snapshot:
    """Packets per index of every counter in COUNTERS, read from the switch at `address`."""
    schema = fy.P4Schema(p4info)
    entities = [p4r.Entity(counter_entry=p4r.CounterEntry(counter_id=schema.counters[name].id)) for name in COUNTERS]
    names = {schema.counters[name].id: name for name in COUNTERS}
    snapshot: Snapshot = {name: {} for name in COUNTERS}
    with grpc.insecure_channel(address) as channel:
        request = p4r.ReadRequest(device_id=device_id, entities=entities)
        for response in p4r_grpc.P4RuntimeStub(channel).Read(request, timeout=READ_TIMEOUT_S):
            for entity in response.entities:
                cell = entity.counter_entry
                snapshot[names[cell.counter_id]][cell.index.index] = cell.data.packet_count
    snapshot[KERNEL_RX] = {0: kernel_rx_packets()}
    return snapshot


def kernel_rx_packets(sys_net: Path = SYS_NET) -> int:
    """Packets received by this namespace's interfaces but loopback (what BMv2's ports were handed)."""
    return sum(
        int((interface / "statistics" / "rx_packets").read_text())
        for interface in sys_net.iterdir()
        if interface.name != "lo"
    )


def snapshot_in(namespace: str, address: str, p4info: Path, device_id: int) -> Snapshot:
    """`read` run inside `namespace`, where the switch's gRPC server is."""
    argv = ["ip", "netns", "exec", namespace, sys.executable, "-m", "tng_lab.switch_counters"]
    output = sh(
        [*argv, "--address", address, "--p4info", str(p4info), "--device-id", str(device_id)],
        timeout_s=PROCESS_TIMEOUT_S,
    )
    try:
        data = json.loads(output)
        return {name: {int(index): int(value) for index, value in cells.items()} for name, cells in data.items()}
    except (ValueError, AttributeError) as err:
        raise LabError(f"switch counters: unreadable output ({err}): {output[:200]!r}") from err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tng_lab.switch_counters", description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the switch's P4Runtime address")
    parser.add_argument("--p4info", type=Path, required=True)
    parser.add_argument("--device-id", type=int, default=1)
    args = parser.parse_args(argv)
    try:
        snapshot = read(args.address, args.p4info, args.device_id)
    except grpc.RpcError as err:
        print(f"switch counters: {args.address}: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    print(json.dumps(snapshot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
