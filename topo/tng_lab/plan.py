"""The topology of a run: names, addresses and the commands that build it, computed without touching the system.

```
 server ns                switch ns (BMv2 or Linux forwarding)  link ns per link          UE ns
 [eth0 10.0.0.1] ==veth== [srv 10.0.0.254]
                          [l-lte 10.1.0.1] ==veth== [sw] linkem [ue] ==veth== [lte 10.1.0.2]
                          [l-wifi 10.1.1.1] ==veth== [sw] linkem [ue] ==veth== [wifi 10.1.1.2]
                                                                              [lo 10.2.0.2] (LWIP)
```
linkem's `ab` direction runs switch -> UE (downlink), `ba` UE -> switch (uplink). The UE routes by source address
(one table per link), so a socket bound to a link's address leaves by that link; its main table uses the first
link. Static ARP entries keep ARP off the emulated links (and off the server's link, which BMv2 does not answer);
offloads are off on every veth so linkem and BMv2 see MTU-sized frames with complete checksums.

With BMv2 the switch namespace's interfaces carry no addresses and the kernel does not forward: BMv2 owns them as
ports 1 (`srv`), 2, 3, ... (the links in scenario order). A scenario with an LWIP pair of links also gives the UE
one address on its loopback, reachable over both links (the switch steers each packet to one of them) and
answering over the Wi-Fi link.

With `ues = N` > 1 the namespace at the links' far end is the UEs' gateway (`gw`): it keeps everything above
(link interfaces and addresses, per-source tables, 10.2.0.2) and forwards. UE k (1..N) hangs off it on a veth
(`ue-k` at the gateway, `gw` at the UE, 10.3.k.1 and 10.3.k.2) and owns, on that veth, one source address per
link, 10.1.i.(10+k) in link i's subnet, and with an LWIP pair the LWIP address 10.2.0.(10+k). The gateway routes
each of these /32s to the UE and sends what the UE sends from it into that link's table (from the LWIP address:
Wi-Fi's), so a UE socket bound to a link's address uses that link both ways; the switch's routes for 10.1.i.0/24
and 10.2.0.0/24 already lead to the gateway's link interfaces (Linux forwarding gets static ARP entries for the
UEs' link addresses).
```
 link ns       gateway ns (forwards)                        UE k ns (k = 1..N)
 [ue] ==veth== [lte 10.1.0.2]     [ue-1 10.3.1.1] ==veth== [gw 10.3.1.2  10.1.0.11  10.1.1.11  10.2.0.11]
 [ue] ==veth== [wifi 10.1.1.2]    [ue-2 10.3.2.1] ==veth== [gw 10.3.2.2  10.1.0.12  10.1.1.12  10.2.0.12]
               [lo 10.2.0.2] (LWIP)  ...
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tng_lab.scenario import Scenario

SERVER_ADDRESS = "10.0.0.1"
SWITCH_SERVER_ADDRESS = "10.0.0.254"
UE_NETWORK = "10.1.0.0/16"
LWIP_NETWORK = "10.2.0.0/24"
LWIP_ADDRESS = "10.2.0.2"
UE_HOST_OFFSET = 10  # with several UEs, UE k is host 10 + k in every link's subnet and in the LWIP network
GATEWAY_UE_IF = "gw"  # a UE's interface toward the gateway (link names cannot clash: they have no '-')
SERVER_PORT = 1  # BMv2 port of `srv`; link i is port FIRST_LINK_PORT + i
FIRST_LINK_PORT = 2
# VISIBLE's retransmission helper on a port of its own: a veth inside the switch namespace, BMv2's end and the
# helper process's end (it answers health probes on the namespace's loopback).
HELPER_SWITCH_IF = "helper"
HELPER_IF = "helper-end"
HELPER_HEALTH = "127.0.0.1:9601"
# A copy is a whole MTU-sized frame behind the helper's own Ethernet and 2-byte header: 1516 bytes would not fit a
# 1500-byte veth, and the kernel drops it without a word, so the helper's veth takes jumbo frames.
HELPER_MTU = 9000
PERF_PORT = 5201
FIRST_TABLE = 100
OFFLOADS_OFF = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]
NAMESPACE_SYSCTLS = [
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
    # Every connection starts from the kernel's defaults, not from the ssthresh, RTT and reordering degree that the
    # last connection to the same address left in the TCP metrics cache (repetitions, steered workloads in a row).
    "net.ipv4.tcp_no_metrics_save=1",
]


@dataclass(frozen=True, slots=True)
class Veth:
    a_ns: str
    a_if: str
    a_mac: str
    b_ns: str
    b_if: str
    b_mac: str


@dataclass(frozen=True, slots=True)
class PathPlan:
    """One emulated link: the switch end, the linkem namespace and the UE end."""

    name: str
    namespace: str
    switch_if: str
    switch_address: str
    switch_mac: str
    ue_if: str
    ue_address: str
    ue_mac: str
    table: int
    control: Path  # linkem's control socket


@dataclass(frozen=True, slots=True)
class LwipPlan:
    """The UE's single address behind the LWIP switch, and the two links the switch steers it over."""

    lte: str
    wifi: str
    address: str = LWIP_ADDRESS
    network: str = LWIP_NETWORK


@dataclass(frozen=True, slots=True)
class UeSource:
    """An address of a UE that makes its traffic take one link, and the UE interface it leaves by."""

    link: str
    address: str
    interface: str


@dataclass(frozen=True, slots=True)
class UePlan:
    """One UE: where its perf client runs and which addresses it binds to use each link (or be steered)."""

    number: int  # 1..N
    namespace: str
    sources: tuple[UeSource, ...]  # one per link, in scenario order
    lwip_address: str | None  # its address behind the LWIP switch, with an LWIP pair of links

    def source(self, link: str) -> UeSource:
        return next(source for source in self.sources if source.link == link)


@dataclass(frozen=True, slots=True)
class UeLink:
    """The veth between the gateway and one of several UEs, with its transit addresses."""

    ue: UePlan
    gateway_if: str
    gateway_address: str
    gateway_mac: str
    ue_address: str
    ue_mac: str


@dataclass(frozen=True, slots=True)
class Plan:
    prefix: str
    server_ns: str
    switch_ns: str
    ue_ns: str  # the links' far end: the UE itself, or with several UEs their gateway
    paths: tuple[PathPlan, ...]
    run_dir: Path
    bmv2: bool = False  # BMv2 owns the switch namespace's interfaces; the kernel there neither forwards nor answers
    lwip: LwipPlan | None = None
    ues: tuple[UePlan, ...] = ()
    ue_links: tuple[UeLink, ...] = ()  # empty with one UE (it is the links' far end)
    helper_port: int | None = None  # BMv2's port toward a retransmission helper process, when a run needs one

    @property
    def server_address(self) -> str:
        return SERVER_ADDRESS

    @property
    def server_mac(self) -> str:
        return _mac(0, 1)

    @property
    def switch_server_mac(self) -> str:
        return _mac(0, 2)

    def switch_ports(self) -> list[tuple[int, str]]:
        """BMv2's ports: (port number, interface in the switch namespace)."""
        links = [(FIRST_LINK_PORT + index, path.switch_if) for index, path in enumerate(self.paths)]
        helper = [(self.helper_port, HELPER_SWITCH_IF)] if self.helper_port is not None else []
        return [(SERVER_PORT, "srv"), *links, *helper]

    def port_of(self, link: str) -> int:
        return FIRST_LINK_PORT + next(index for index, path in enumerate(self.paths) if path.name == link)

    def namespaces(self) -> list[str]:
        return [self.server_ns, self.switch_ns, *(path.namespace for path in self.paths), *self._far_end()]

    def ue_namespaces(self) -> list[str]:
        """Where the perf clients run: one namespace per UE."""
        return [ue.namespace for ue in self.ues]

    def _far_end(self) -> list[str]:
        """The namespaces behind the links: the UE, or the gateway and every UE."""
        return [self.ue_ns, *(link.ue.namespace for link in self.ue_links)]

    def path(self, name: str) -> PathPlan:
        return next(path for path in self.paths if path.name == name)

    def veths(self) -> list[Veth]:
        veths = [Veth(self.server_ns, "eth0", self.server_mac, self.switch_ns, "srv", self.switch_server_mac)]
        for index, path in enumerate(self.paths, start=1):
            veths.append(Veth(self.switch_ns, path.switch_if, path.switch_mac, path.namespace, "sw", _mac(index, 3)))
            veths.append(Veth(path.namespace, "ue", _mac(index, 4), self.ue_ns, path.ue_if, path.ue_mac))
        for link in self.ue_links:
            ue = link.ue
            veths.append(Veth(self.ue_ns, link.gateway_if, link.gateway_mac, ue.namespace, GATEWAY_UE_IF, link.ue_mac))
        if self.helper_port is not None:
            veths.append(Veth(self.switch_ns, HELPER_SWITCH_IF, _mac(0, 5), self.switch_ns, HELPER_IF, _mac(0, 6)))
        return veths

    def commands(self) -> list[list[str]]:
        """Everything after `ip netns add`, in order: sysctls, veths, offloads, addresses, routes, ARP, MPTCP."""
        commands: list[list[str]] = []
        for ns in self.namespaces():
            commands += namespace_commands(ns)
        forward = "0" if self.bmv2 else "1"
        commands.append(_exec(self.switch_ns, "sysctl", "-qw", f"net.ipv4.ip_forward={forward}"))
        for veth in self.veths():
            commands += veth_commands(veth)
        commands.append(_ip(self.server_ns, "addr", "add", f"{SERVER_ADDRESS}/24", "dev", "eth0"))
        if not self.bmv2:
            commands.append(_ip(self.switch_ns, "addr", "add", f"{SWITCH_SERVER_ADDRESS}/24", "dev", "srv"))
        commands.append(static_arp(self.server_ns, "eth0", SWITCH_SERVER_ADDRESS, self.switch_server_mac))
        commands.append(_ip(self.server_ns, "route", "add", UE_NETWORK, "via", SWITCH_SERVER_ADDRESS))
        for path in self.paths:
            table = str(path.table)
            if not self.bmv2:
                commands.append(_ip(self.switch_ns, "addr", "add", f"{path.switch_address}/24", "dev", path.switch_if))
                commands.append(static_arp(self.switch_ns, path.switch_if, path.ue_address, path.ue_mac))
            commands.append(_ip(self.ue_ns, "addr", "add", f"{path.ue_address}/24", "dev", path.ue_if))
            commands.append(_ip(self.ue_ns, "rule", "add", "from", path.ue_address, "table", table))
            commands.append(
                _ip(
                    self.ue_ns, "route", "add", "default", "via", path.switch_address, "dev", path.ue_if, "table", table
                )
            )
            commands.append(static_arp(self.ue_ns, path.ue_if, path.switch_address, path.switch_mac))
        commands.append(_ip(self.ue_ns, "route", "add", "default", "via", self.paths[0].switch_address))
        if self.helper_port is not None:
            for interface in (HELPER_SWITCH_IF, HELPER_IF):
                commands.append(_ip(self.switch_ns, "link", "set", interface, "mtu", str(HELPER_MTU)))
        if self.lwip is not None:
            commands += self._lwip_commands(self.lwip)
        if self.ue_links:
            commands += self._gateway_commands()
        subflows = str(len(self.paths))
        for ns in (self.server_ns, *self.ue_namespaces()):
            commands.append(_exec(ns, "sysctl", "-qw", "net.mptcp.enabled=1"))
            commands.append(_ip(ns, "mptcp", "limits", "set", "subflow", subflows, "add_addr_accepted", subflows))
        return commands

    def _lwip_commands(self, lwip: LwipPlan) -> list[list[str]]:
        """The UE's steered address on its loopback (this kernel has no dummy interfaces): accepted from both links
        (rp_filter is 0), and answered over Wi-Fi (a rule sends its traffic to the Wi-Fi link's table)."""
        wifi_table = str(self.path(lwip.wifi).table)
        return [
            _ip(self.ue_ns, "addr", "add", f"{lwip.address}/32", "dev", "lo"),
            _ip(self.ue_ns, "rule", "add", "from", lwip.address, "table", wifi_table),
            _ip(self.server_ns, "route", "add", lwip.network, "via", SWITCH_SERVER_ADDRESS),
        ]

    def _gateway_commands(self) -> list[list[str]]:
        """The gateway forwards between the links and the UEs: each UE's addresses are routed to it, and what it
        sends from a link's address goes into that link's table (from its LWIP address, Wi-Fi's)."""
        gateway = self.ue_ns
        commands = [_exec(gateway, "sysctl", "-qw", "net.ipv4.ip_forward=1")]
        wifi_table = str(self.path(self.lwip.wifi).table) if self.lwip is not None else None
        for link in self.ue_links:
            ue = link.ue
            commands += [
                _ip(gateway, "addr", "add", f"{link.gateway_address}/24", "dev", link.gateway_if),
                _ip(ue.namespace, "addr", "add", f"{link.ue_address}/24", "dev", GATEWAY_UE_IF),
                static_arp(gateway, link.gateway_if, link.ue_address, link.ue_mac),
                static_arp(ue.namespace, GATEWAY_UE_IF, link.gateway_address, link.gateway_mac),
            ]
            owned = [(source.address, str(self.path(source.link).table)) for source in ue.sources]
            if ue.lwip_address is not None and wifi_table is not None:
                owned.append((ue.lwip_address, wifi_table))
            for address, table in owned:
                commands += [
                    _ip(ue.namespace, "addr", "add", f"{address}/32", "dev", GATEWAY_UE_IF),
                    _ip(gateway, "route", "add", f"{address}/32", "via", link.ue_address, "dev", link.gateway_if),
                    _ip(gateway, "rule", "add", "from", address, "table", table),
                ]
            if not self.bmv2:  # Linux forwarding resolves the UEs' link addresses to the gateway's link interfaces
                for source in ue.sources:
                    path = self.path(source.link)
                    commands.append(static_arp(self.switch_ns, path.switch_if, source.address, path.ue_mac))
            first = ue.sources[0].address  # like the single UE's main table: unbound traffic takes the first link
            commands.append(
                _ip(
                    ue.namespace,
                    "route",
                    "add",
                    "default",
                    "via",
                    link.gateway_address,
                    "dev",
                    GATEWAY_UE_IF,
                    "src",
                    first,
                )
            )
        return commands

    def mptcp_endpoints(self, paths: tuple[str, ...]) -> list[list[str]]:
        """Commands giving every UE one `subflow` endpoint per path after the first (the initial subflow's)."""
        commands = []
        for ue in self.ues:
            commands.append(_ip(ue.namespace, "mptcp", "endpoint", "flush"))
            for name in paths[1:]:
                source = ue.source(name)
                commands.append(
                    _ip(ue.namespace, "mptcp", "endpoint", "add", source.address, "dev", source.interface, "subflow")
                )
        return commands

    def ue_tcp_sack(self, enabled: bool) -> list[list[str]]:
        """The commands that make every UE offer SACK on its next TCP connections, or not."""
        return [_exec(ns, "sysctl", "-qw", f"net.ipv4.tcp_sack={int(enabled)}") for ns in self.ue_namespaces()]


def namespace_commands(ns: str) -> list[list[str]]:
    """Loopback up and NAMESPACE_SYSCTLS in a fresh namespace."""
    return [_ip(ns, "link", "set", "lo", "up"), _exec(ns, "sysctl", "-qw", *NAMESPACE_SYSCTLS)]


def veth_commands(veth: Veth) -> list[list[str]]:
    """The veth created straight into its two namespaces, offloads off and both ends up."""
    a_end = [veth.a_if, "netns", veth.a_ns, "address", veth.a_mac]
    b_end = [veth.b_if, "netns", veth.b_ns, "address", veth.b_mac]
    commands = [["ip", "link", "add", *a_end, "type", "veth", "peer", "name", *b_end]]
    for ns, interface in ((veth.a_ns, veth.a_if), (veth.b_ns, veth.b_if)):
        commands.append(_exec(ns, "ethtool", "-K", interface, *OFFLOADS_OFF))
        commands.append(_ip(ns, "link", "set", interface, "up"))
    return commands


def _ip(ns: str, *args: str) -> list[str]:
    return ["ip", "-n", ns, *args]


def _exec(ns: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def _mac(link: int, end: int) -> str:
    return f"02:74:6c:00:{link:02x}:{end:02x}"


def static_arp(ns: str, interface: str, address: str, mac: str) -> list[str]:
    return _ip(ns, "neigh", "replace", address, "lladdr", mac, "dev", interface, "nud", "permanent")


def make_plan(scenario: Scenario, prefix: str, run_dir: Path, *, bmv2: bool = False) -> Plan:
    """Names every namespace `<prefix><role>`; link i gets 10.1.i.0/24 (switch .1, UE .2); an LWIP pair of links
    gives the UE the address 10.2.0.2 behind both. With several UEs the links end at the gateway `<prefix>gw`
    (which keeps those addresses) and UE k is `<prefix>ue<k>` with host number 10 + k."""
    paths = tuple(
        PathPlan(
            name=link.name,
            namespace=f"{prefix}link-{link.name}",
            switch_if=f"l-{link.name}",
            switch_address=f"10.1.{index}.1",
            switch_mac=_mac(index + 1, 1),
            ue_if=link.name,
            ue_address=f"10.1.{index}.2",
            ue_mac=_mac(index + 1, 2),
            table=FIRST_TABLE + index,
            control=run_dir / f"linkem-{link.name}.sock",
        )
        for index, link in enumerate(scenario.links)
    )
    switch = scenario.switch
    lwip = LwipPlan(switch.lte, switch.wifi) if switch.lte is not None and switch.wifi is not None else None
    helper_port = FIRST_LINK_PORT + len(paths) if bmv2 and helper_process(scenario) else None
    ue_links: tuple[UeLink, ...] = ()
    if scenario.ues == 1:
        sources = tuple(UeSource(path.name, path.ue_address, path.ue_if) for path in paths)
        far_end, ues = f"{prefix}ue", (UePlan(1, f"{prefix}ue", sources, lwip.address if lwip else None),)
    else:
        ue_links = tuple(_ue_link(prefix, number, paths, lwip) for number in range(1, scenario.ues + 1))
        far_end, ues = f"{prefix}gw", tuple(link.ue for link in ue_links)
    switch_ns = f"{prefix}switch"
    return Plan(prefix, f"{prefix}server", switch_ns, far_end, paths, run_dir, bmv2, lwip, ues, ue_links, helper_port)


def helper_process(scenario: Scenario) -> bool:
    """Whether a run of `scenario` on BMv2 starts the retransmission helper as a process on a switch port."""
    return scenario.switch.helper == "port" and any(workload.visible == "full" for workload in scenario.workloads)


def _ue_link(prefix: str, number: int, paths: tuple[PathPlan, ...], lwip: LwipPlan | None) -> UeLink:
    host = UE_HOST_OFFSET + number
    sources = tuple(UeSource(path.name, f"10.1.{index}.{host}", GATEWAY_UE_IF) for index, path in enumerate(paths))
    lwip_address = f"10.2.0.{host}" if lwip else None  # in LWIP_NETWORK
    ue = UePlan(number, f"{prefix}ue{number}", sources, lwip_address)
    return UeLink(
        ue, f"ue-{number}", f"10.3.{number}.1", _mac(0x20 + number, 1), f"10.3.{number}.2", _mac(0x20 + number, 2)
    )
