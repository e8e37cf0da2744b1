"""The relay lab's network (tng_lab.relay_lab): a DSL host, a relay that also routes, a core link, a server and a
cross-traffic host beside the relay, all in namespaces of this run; linkem emulates both links.

```
 client ns         DSL link ns               relay ns (forwards)              core link ns              server ns
 [dsl 10.20.1.2] == [ue] linkem [sw] == [dsl 10.20.1.1]   [core 10.20.2.1] == [ue] linkem [sw] == [core 10.20.2.2]
                                        [cross 10.20.3.1]
                                             ||
                                        [relay 10.20.3.2] cross ns
```
linkem bridges its two veths at layer 2 (docs/linkem.md) and the relay namespace routes between them, so the chain
is routed: the client's and the cross host's default routes go to the relay namespace, the server's too. On both
links linkem's `ab` direction is the download (toward the client), `ba` the upload. The cross host's veth is not
shaped: cross traffic meets the tng flow only on the core link. Offloads are off on every veth, IPv6 is off, static
ARP entries keep ARP off the emulated links (tng_lab.plan's helpers, as in every lab run).
"""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from tng_lab import linkem
from tng_lab.linkem import LinkCounters
from tng_lab.netns import namespaces, run_directory, sh
from tng_lab.plan import Veth, namespace_commands, static_arp, veth_commands
from tng_lab.procs import Child, running

CLIENT, RELAY_DSL, RELAY_CORE, SERVER = "10.20.1.2", "10.20.1.1", "10.20.2.1", "10.20.2.2"
RELAY_CROSS, CROSS = "10.20.3.1", "10.20.3.2"
SAMPLE_S = 0.1  # the queue sampler's grid
IP_PACKET_BYTES = 1500  # queues in packets are sized in these (as the simulator's queue_bdp)


@dataclass(frozen=True, slots=True)
class Links:
    """The two emulated links, after relay-dsl-cross.toml: the DSL with about a second of buffer each way, a core
    faster than the DSL with one bandwidth-delay product of drop-tail buffer."""

    dsl_down_mbit: float = 10.0
    dsl_up_mbit: float = 1.0
    dsl_delay_ms: float = 10.0
    dsl_down_queue_pkt: int = 850
    dsl_up_queue_pkt: int = 85
    core_mbit: float = 100.0
    core_delay_ms: float = 50.0

    @property
    def core_queue_bytes(self) -> int:
        """One BDP of the core's round trip (both directions' delay), in IP bytes."""
        return round(self.core_mbit * 1e6 / 8 * 2 * self.core_delay_ms / 1000)

    def dsl_specs(self) -> tuple[str, str]:
        return (
            f"rate={self.dsl_down_mbit:g}mbit,delay={self.dsl_delay_ms:g}ms,queue={self.dsl_down_queue_pkt}pkt",
            f"rate={self.dsl_up_mbit:g}mbit,delay={self.dsl_delay_ms:g}ms,queue={self.dsl_up_queue_pkt}pkt",
        )

    def core_specs(self) -> tuple[str, str]:
        spec = f"rate={self.core_mbit:g}mbit,delay={self.core_delay_ms:g}ms,queue={self.core_queue_bytes}b"
        return spec, spec

    def describe(self) -> dict[str, object]:
        down, up = self.dsl_specs()
        core, _ = self.core_specs()
        return {"dsl_down": down, "dsl_up": up, "core_each_way": core}


@dataclass(frozen=True, slots=True)
class RoutedNet:
    """The namespaces of one relay experiment's run (`ROLES`, each named with the run's prefix), linked by veths, some
    through a linkem in a `link-<name>` namespace of its own; the subclass says which veths and how they route."""

    prefix: str
    run_dir: Path
    ROLES: ClassVar[tuple[str, ...]] = ()

    def ns(self, role: str) -> str:
        return f"{self.prefix}{role}"

    def control(self, link: str) -> Path:
        return self.run_dir / f"linkem-{link}.sock"

    def namespaces(self) -> list[str]:
        return [self.ns(role) for role in self.ROLES]

    def veths(self) -> list[Veth]:
        raise NotImplementedError

    def commands(self) -> list[list[str]]:
        raise NotImplementedError

    def wiring(self) -> tuple[list[list[str]], dict[tuple[str, str], str]]:
        """The commands that set up every namespace and veth, and each veth end's MAC by (namespace, interface)."""
        commands = [command for ns in self.namespaces() for command in namespace_commands(ns)]
        for veth in self.veths():
            commands += veth_commands(veth)
        macs = {(veth.a_ns, veth.a_if): veth.a_mac for veth in self.veths()}
        macs.update({(veth.b_ns, veth.b_if): veth.b_mac for veth in self.veths()})
        return commands, macs


@dataclass(frozen=True, slots=True)
class Net(RoutedNet):
    ROLES: ClassVar[tuple[str, ...]] = ("client", "relay", "server", "cross", "link-dsl", "link-core")

    def veths(self) -> list[Veth]:
        mac = "02:74:6c:20:{:02x}:{:02x}".format
        client, relay, server, cross = (self.ns(role) for role in ("client", "relay", "server", "cross"))
        dsl, core = self.ns("link-dsl"), self.ns("link-core")
        return [
            Veth(relay, "dsl", mac(1, 1), dsl, "sw", mac(1, 2)),
            Veth(dsl, "ue", mac(1, 3), client, "dsl", mac(1, 4)),
            Veth(server, "core", mac(2, 1), core, "sw", mac(2, 2)),
            Veth(core, "ue", mac(2, 3), relay, "core", mac(2, 4)),
            Veth(relay, "cross", mac(3, 1), cross, "relay", mac(3, 2)),
        ]

    def commands(self) -> list[list[str]]:
        """Everything after `ip netns add`: sysctls, veths, addresses, routes, static ARP, forwarding."""
        commands, macs = self.wiring()
        client, relay, server, cross = (self.ns(role) for role in ("client", "relay", "server", "cross"))
        ends = [  # (host ns, its interface, its address, relay interface, relay address)
            (client, "dsl", CLIENT, "dsl", RELAY_DSL),
            (server, "core", SERVER, "core", RELAY_CORE),
            (cross, "relay", CROSS, "cross", RELAY_CROSS),
        ]
        for host, host_if, address, relay_if, relay_address in ends:
            commands += [
                ["ip", "-n", host, "addr", "add", f"{address}/24", "dev", host_if],
                ["ip", "-n", relay, "addr", "add", f"{relay_address}/24", "dev", relay_if],
                ["ip", "-n", host, "route", "add", "default", "via", relay_address],
                # The MACs across a linkem are the veth ends beyond it: the DSL's client side sees the relay's `dsl`.
                static_arp(host, host_if, relay_address, macs[(relay, relay_if)]),
                static_arp(relay, relay_if, address, macs[(host, host_if)]),
            ]
        commands.append(["ip", "netns", "exec", relay, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        return commands


@dataclass(slots=True)
class QueueSample:
    t_unix: float
    dsl: LinkCounters
    core: LinkCounters


@dataclass(slots=True)
class QueueSampler:
    """Reads both linkems' counters every SAMPLE_S on a thread while a scheme runs."""

    net: Net
    samples: list[QueueSample] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="queue-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                now = time.time()
                dsl, core = linkem.counters(self.net.control("dsl")), linkem.counters(self.net.control("core"))
                self.samples.append(QueueSample(now, dsl, core))
            except OSError:
                self.errors += 1
            next_at += SAMPLE_S
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def bring_up(
    stack: ExitStack, net: RoutedNet, linkem_binary: Path, specs: dict[str, tuple[str, str]], logs: Path, seed: int
) -> dict[str, Child]:
    """Creates `net`'s namespaces, runs its commands and starts a linkem per link (`specs`: name -> (ab, ba)) in
    namespace `link-<name>`; returns the linkems by link name. `stack` tears everything down."""
    stack.enter_context(namespaces(net.namespaces()))
    for command in net.commands():
        sh(command)
    linkems = {}
    for name, (ab, ba) in specs.items():
        argv = linkem.command(linkem_binary, net.ns(f"link-{name}"), ab, ba, net.control(name), seed)
        linkems[name] = stack.enter_context(running(f"linkem ({name})", argv, logs / f"linkem-{name}.log"))
        linkem.wait_ready(linkems[name], net.control(name))
    return linkems


def build(
    stack: ExitStack, prefix: str, linkem_binary: Path, links: Links, logs: Path, seed: int = 1
) -> tuple[Net, dict[str, Child]]:
    """Creates the namespaces and links and starts both linkems (returned by link name); `stack` tears everything
    down."""
    net = Net(prefix, stack.enter_context(run_directory(prefix)))
    specs = {"dsl": links.dsl_specs(), "core": links.core_specs()}
    return net, bring_up(stack, net, linkem_binary, specs, logs, seed)
