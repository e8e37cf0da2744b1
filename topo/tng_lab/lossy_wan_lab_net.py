"""The lossy-WAN lab's network (tng_lab.lossy_wan_lab): two sites joined by a WAN, a router at each end of it that
can run a `tng relay`, all in namespaces of this run; linkem emulates the sender's LAN and the WAN.

```
 sender ns          LAN link ns          relay-a ns           WAN link ns          relay-b ns           receiver ns
 [lan 10.21.1.2] == [ue] linkem [sw] == [lan 10.21.1.1]
                                        [wan 10.21.2.1] == [sw] linkem [ue] == [wan 10.21.2.2]
                                                                              [near 10.21.3.1] == [near 10.21.3.2]
```
linkem bridges its two veths at layer 2, so relay-a and relay-b share the WAN's subnet and route each other's site
through it; both relay namespaces forward. The data flows from the sender to the receiver: linkem's `ba` on the LAN
and `ab` on the WAN. The receiver sits right beside relay-b, as the server beside its relay in the simulator's
relay-lossy-wan.toml. Offloads are off on every veth, IPv6 is off, static ARP entries keep ARP off the emulated links
(tng_lab.plan's helpers).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tng_lab import linkem
from tng_lab.netns import run_directory
from tng_lab.plan import Veth, static_arp
from tng_lab.procs import Child
from tng_lab.relay_lab_net import RoutedNet, bring_up

SENDER, RELAY_A_LAN, RELAY_A_WAN = "10.21.1.2", "10.21.1.1", "10.21.2.1"
RELAY_B_WAN, RELAY_B_NEAR, RECEIVER = "10.21.2.2", "10.21.3.1", "10.21.3.2"
SITE_A, SITE_B = "10.21.1.0/24", "10.21.3.0/24"


@dataclass(frozen=True, slots=True)
class Links:
    """The emulated links, after relay-lossy-wan.toml: a 100 Mbit/s LAN of 1 ms RTT and a WAN of reserved capacity,
    20 Mbit/s, 100 ms RTT, one BDP of drop-tail buffer. The WAN's random loss is set while a run goes (`set_loss`)."""

    lan_mbit: float = 100.0
    lan_delay_ms: float = 0.5
    lan_queue_pkt: int = 200
    wan_mbit: float = 20.0
    wan_delay_ms: float = 50.0

    @property
    def wan_queue_bytes(self) -> int:
        """One BDP of the WAN's round trip (both directions' delay), in IP bytes."""
        return round(self.wan_mbit * 1e6 / 8 * 2 * self.wan_delay_ms / 1000)

    def lan_spec(self) -> str:
        return f"rate={self.lan_mbit:g}mbit,delay={self.lan_delay_ms:g}ms,queue={self.lan_queue_pkt}pkt"

    def wan_spec(self) -> str:
        return f"rate={self.wan_mbit:g}mbit,delay={self.wan_delay_ms:g}ms,queue={self.wan_queue_bytes}b"

    def describe(self) -> dict[str, object]:
        return {"lan_each_way": self.lan_spec(), "wan_each_way": self.wan_spec()}


@dataclass(frozen=True, slots=True)
class Net(RoutedNet):
    ROLES: ClassVar[tuple[str, ...]] = ("sender", "relay-a", "relay-b", "receiver", "link-lan", "link-wan")

    def veths(self) -> list[Veth]:
        mac = "02:74:6c:21:{:02x}:{:02x}".format
        sender, relay_a, relay_b, receiver = (self.ns(role) for role in ("sender", "relay-a", "relay-b", "receiver"))
        lan, wan = self.ns("link-lan"), self.ns("link-wan")
        return [
            Veth(relay_a, "lan", mac(1, 1), lan, "sw", mac(1, 2)),
            Veth(lan, "ue", mac(1, 3), sender, "lan", mac(1, 4)),
            Veth(relay_a, "wan", mac(2, 1), wan, "sw", mac(2, 2)),
            Veth(wan, "ue", mac(2, 3), relay_b, "wan", mac(2, 4)),
            Veth(relay_b, "near", mac(3, 1), receiver, "near", mac(3, 2)),
        ]

    def commands(self) -> list[list[str]]:
        """Everything after `ip netns add`: sysctls, veths, addresses, routes, static ARP, forwarding."""
        commands, macs = self.wiring()
        sender, relay_a, relay_b, receiver = (self.ns(role) for role in ("sender", "relay-a", "relay-b", "receiver"))
        # (ns, interface, address, the neighbour's ns and interface: across a linkem, the veth end beyond it)
        ends = [
            (sender, "lan", SENDER, relay_a, "lan"),
            (relay_a, "lan", RELAY_A_LAN, sender, "lan"),
            (relay_a, "wan", RELAY_A_WAN, relay_b, "wan"),
            (relay_b, "wan", RELAY_B_WAN, relay_a, "wan"),
            (relay_b, "near", RELAY_B_NEAR, receiver, "near"),
            (receiver, "near", RECEIVER, relay_b, "near"),
        ]
        addresses = {(ns, interface): address for ns, interface, address, _, _ in ends}
        for ns, interface, address, peer_ns, peer_if in ends:
            commands.append(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", interface])
            commands.append(static_arp(ns, interface, addresses[(peer_ns, peer_if)], macs[(peer_ns, peer_if)]))
        commands += [
            ["ip", "-n", sender, "route", "add", "default", "via", RELAY_A_LAN],
            ["ip", "-n", receiver, "route", "add", "default", "via", RELAY_B_NEAR],
            ["ip", "-n", relay_a, "route", "add", SITE_B, "via", RELAY_B_WAN],
            ["ip", "-n", relay_b, "route", "add", SITE_A, "via", RELAY_A_WAN],
        ]
        commands += [["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"] for ns in (relay_a, relay_b)]
        return commands

    def set_loss(self, loss: float) -> None:
        """The WAN's random loss, both directions, from now on."""
        linkem.request(self.control("wan"), {"cmd": "set", "dir": "both", "spec": f"loss={loss * 100:g}%"})


def build(
    stack: ExitStack, prefix: str, linkem_binary: Path, links: Links, logs: Path, seed: int = 1
) -> tuple[Net, dict[str, Child]]:
    """Creates the namespaces and links and starts both linkems (returned by link name), the WAN without loss;
    `stack` tears everything down."""
    net = Net(prefix, stack.enter_context(run_directory(prefix)))
    specs = {"lan": (links.lan_spec(), links.lan_spec()), "wan": (links.wan_spec(), links.wan_spec())}
    return net, bring_up(stack, net, linkem_binary, specs, logs, seed)
