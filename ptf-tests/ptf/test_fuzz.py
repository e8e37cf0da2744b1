"""PTF, tng: random and mutated frames through the whole pipeline. BMv2 keeps running, and every frame is accounted
for: forwarded (ingress.forwarded, then egress.port_tx) or dropped under a reason (ingress.drops), never lost
without a count."""

from __future__ import annotations

import random
import time

from lwip_base import (
    CORE_IP,
    CORE_MAC,
    DROPS,
    FORWARDED,
    PORT_TX,
    SERVER_IP,
    SERVER_MAC,
    SWITCH_MAC,
    UE_IP,
    LwipTest,
)
from ptf.testutils import group
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, fuzz
from tng_controller.helper_frames import Reason, helper_frame
from tng_p4.vectors import load_wire_vectors
from tng_p4.wire import TNG_UDP_PORT

FUZZ_FRAMES = 10_000
FUZZ_SEED = 20261126
# Paced below what BMv2 forwards on this machine, so its egress queues (64 packets), where no P4 counter sees a drop,
# never overflow: the accounting then covers every frame.
SEND_PPS = 1000
SETTLE_TIMEOUT_S = 20.0
UNROUTED_IP = "10.9.9.9"
MAX_FRAME_BYTES = 1514


def fuzzed_frames(rng: random.Random, count: int) -> list[bytes]:
    """`count` frames, a mix of: random bytes; valid IPv4 TCP/UDP/tng to routed and unrouted destinations; the same
    with 1-8 random bytes changed or cut short; Scapy's fuzz() of the IPv4 and L4 headers; helper encapsulations
    from a port that is not the helper's."""
    vectors = [vector.raw for vector in load_wire_vectors()]
    destinations = (SERVER_IP, UE_IP, CORE_IP, UNROUTED_IP)
    frames = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.1:
            frames.append(rng.randbytes(rng.randint(1, MAX_FRAME_BYTES)))
            continue
        valid = _valid_frame(rng, rng.choice(destinations), vectors)
        if kind < 0.3:
            frame = bytes(valid)
        elif kind < 0.7:
            frame = _mutated(rng, bytes(valid))
        elif kind < 0.95:
            frame = bytes(Ether(src=CORE_MAC, dst=SWITCH_MAC) / fuzz(valid[IP].copy()))
        else:  # the helper's encapsulation around a valid frame, from a port that is not the helper's
            frame = helper_frame(rng.choice(list(Reason)), bytes(valid))
        frames.append(frame[:MAX_FRAME_BYTES])
    return frames


def _valid_frame(rng: random.Random, dst: str, vectors: list[bytes]) -> Packet:
    ip = IP(src=CORE_IP, dst=dst, ttl=rng.choice((1, 2, 64)))
    kind = rng.random()
    if kind < 0.4:
        payload = rng.randbytes(rng.randint(0, 1400))
        l4 = TCP(sport=rng.randint(1, 65535), dport=rng.randint(1, 65535), flags=rng.choice(("S", "A", "PA", "FA")))
    elif kind < 0.7:
        payload = rng.choice(vectors)
        l4 = UDP(sport=rng.randint(1024, 65535), dport=TNG_UDP_PORT)
    else:
        payload = rng.randbytes(rng.randint(0, 1400))
        l4 = UDP(sport=rng.randint(1, 65535), dport=rng.randint(1, 65535))
    return Ether(bytes(Ether(src=CORE_MAC, dst=SWITCH_MAC) / ip / l4 / Raw(load=payload)))


def _mutated(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    if rng.random() < 0.3:
        return bytes(data[: rng.randint(1, len(data))])
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


@group("tng")
class FuzzedFramesAreForwardedOrCountedAsDropped(LwipTest):
    """10^4 seeded random and mutated frames, paced, on the core, uplink, LTE and Wi-Fi ports: afterwards the frames
    ingress forwarded plus the drops it counted by reason equal the frames sent, egress sent what ingress forwarded
    (the traffic manager's queues, which no P4 counter sees, dropped nothing at this pace), and a valid packet still
    crosses."""

    def runTest(self) -> None:
        rng = random.Random(FUZZ_SEED)
        random.seed(FUZZ_SEED)  # Scapy's fuzz() draws from the module's generator
        frames = fuzzed_frames(rng, FUZZ_FRAMES)
        ports = (self.core, self.uplink, self.lte, self.wifi)
        before = {name: self.counters(name) for name in (FORWARDED, DROPS, PORT_TX)}
        started = time.monotonic()
        for index, frame in enumerate(frames):
            pause = started + index / SEND_PPS - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            self.send(ports[index % len(ports)], frame)
            if index % 500 == 0:
                self.dataplane.flush()  # what the switch sends is counted by egress; PTF need not keep it
        forwarded, dropped = self.settle(before)
        self.dataplane.flush()
        self.assertEqual(
            forwarded + sum(dropped.values()),
            FUZZ_FRAMES,
            f"seed {FUZZ_SEED}: {FUZZ_FRAMES} frames sent, {forwarded} forwarded, drops by reason {dropped}",
        )
        self.assertGreater(forwarded, 0, "no fuzzed frame was forwarded: the mix lost its valid frames")
        sent = self.grown(PORT_TX, before)
        self.assertEqual(sent, forwarded, f"egress sent {sent} of {forwarded} forwarded: an egress queue overflowed")
        probe = Ether(bytes(Ether(src=CORE_MAC, dst=SWITCH_MAC) / IP(src=CORE_IP, dst=SERVER_IP) / UDP() / b"x"))
        self.send(self.core, probe)
        self.assertReceived(self.routed(probe, SERVER_MAC), self.uplink)

    def grown(self, name: str, before: dict) -> int:
        """Packets counter `name` counted since `before` (every cell)."""
        return sum(cell.packets - before[name][index].packets for index, cell in self.counters(name).items())

    def settle(self, before: dict) -> tuple[int, dict[int, int]]:
        """Ingress's counters read until they account for every frame or stop moving (BMv2 counts as it goes):
        frames forwarded, and drops by reason."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        last = None
        while True:
            drops = self.counters(DROPS)
            forwarded = self.grown(FORWARDED, before)
            dropped = {i: drops[i].packets - before[DROPS][i].packets for i in drops if drops[i] != before[DROPS][i]}
            total = forwarded + sum(dropped.values())
            if total >= FUZZ_FRAMES or time.monotonic() > deadline or total == last:
                return forwarded, dropped
            last = total
            time.sleep(0.5)
