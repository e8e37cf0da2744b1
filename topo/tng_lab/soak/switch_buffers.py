"""Fills BMv2's egress queues toward the links once, so that a soak's warm-up sees the memory they make the switch hold.

BMv2 never frees a packet header vector: its pool (bm_sim/phv_source.cpp) keeps every PHV it made for the next
packet, and with the tng pipeline each costs 100-130 KiB of RSS. The switch's RSS is therefore the high-water mark of
the packets inside it at once: its egress queues, and up to 1024 in simple_switch's input buffer while its ingress
thread falls behind. A soak that first met such a moment in a fault saw BMv2 rise 15-40 MiB and stay there
(docs/soak.md), which the 10% rule cannot tell from a leak. A burst of full-size UDP datagrams from the server towards
each link's UE, far faster than the links drain, fills the links' queues (about 220 PHVs in the pool afterwards,
counted with a uprobe); the ingress thread keeps up with it. That is not everything a fault can queue: at the end of
a delay burst, while VISIBLE clones a train of TCP segments for the helper, BMv2 held 110-340 packets more
(docs/soak.md, "Invariants").

Run as a module inside the server's namespace: `python -m tng_lab.soak.switch_buffers --to ADDR ...`.
"""

from __future__ import annotations

import argparse
import socket
import sys

from tng_lab.netns import sh
from tng_lab.procs import rss_kib

DISCARD_PORT = 9  # nothing listens; the UE's kernel drops the datagrams (and rate-limits its ICMP answers)
# Far more than the links' queues hold, so that they stay full for the whole burst whatever the kernel drops on the
# way. On this machine 2048 per link sometimes left the buffers short of full (a delay burst later added 23 MiB); after
# one burst of 8192 per link, three more added at most 1 MiB.
DATAGRAMS_PER_LINK = 8192
# Full-size: 1472 bytes of UDP payload make a 1500-byte IP packet, as large as the traffic's. A burst of 64-byte
# datagrams left the packet buffers' high-water mark to the first fault that queued full-size packets: a 250 ms delay
# burst then added 15-38 MiB to BMv2 once (a 6-minute soak of delay bursts alone: 128.6 -> 144.1 MiB).
PAYLOAD = bytes(1472)


def fill(server_ns: str, destinations: list[str], bmv2_pid: int) -> str:
    """Sends the burst from `server_ns` and returns the evidence: the switch's RSS before and after."""
    before = rss_kib(bmv2_pid)
    argv = ["ip", "netns", "exec", server_ns, sys.executable, "-m", "tng_lab.soak.switch_buffers"]
    for destination in destinations:
        argv += ["--to", destination]
    sent = sh([*argv, "--count", str(DATAGRAMS_PER_LINK)]).strip()
    after = rss_kib(bmv2_pid)
    if before is None or after is None:
        return f"{sent}; BMv2 (pid {bmv2_pid}) is gone"
    return f"{sent}; BMv2 RSS {before >> 10} -> {after >> 10} MiB"


def send(destinations: list[str], count: int) -> int:
    """`count` datagrams to each destination, interleaved, as fast as the socket takes them; how many went out."""
    sent = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for _ in range(count):
            for destination in destinations:
                try:
                    sock.sendto(PAYLOAD, (destination, DISCARD_PORT))
                except BlockingIOError:  # the interface's queue is full: the switch is as full as it gets
                    continue
                sent += 1
    return sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", action="append", required=True, help="an IPv4 address behind the switch")
    parser.add_argument("--count", type=int, default=DATAGRAMS_PER_LINK, help="datagrams per address")
    args = parser.parse_args(argv)
    sent = send(args.to, args.count)
    print(f"{sent} datagrams of {len(PAYLOAD)} bytes to {', '.join(args.to)} in one burst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
