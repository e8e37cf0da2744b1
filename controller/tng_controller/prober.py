"""The link prober of one switch: every probe interval, an ICMP echo request to each probed LWIP route's target out of
the route's LTE port and out of its Wi-Fi port (packet-outs with an egress port go straight out of that port,
through its egress queue); the answers come back to the switch's own address, which the switch punts to the CPU
port, as packet-ins whose ingress_port says which link they came back on. probe.py turns them into the route's
delay difference."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator

import finsy as fy

from tng_controller.config import MonitorConfig
from tng_controller.probe import Outstanding, RouteProbe
from tng_controller.probe_frames import ETHERTYPE_IPV4, echo_request, parse_echo_reply
from tng_controller.retransmit_helper import PacketSwitch
from tng_controller.switch_config import NextHop, RouteConfig, SwitchConfig

LOGGER = logging.getLogger(__name__)
# Answers wait here until the receiving task takes them; a probe round adds two per route.
PACKET_IN_QUEUE = 1024


class LinkProber:
    """Probes the routes of `config` that have a `probe` target (their ports have MACs: switch_config.py checks)."""

    def __init__(self, config: SwitchConfig, monitor: MonitorConfig, identifier: int | None = None) -> None:
        assert config.probe_source is not None
        self.switch = config.name
        self.source = config.probe_source
        self.interval_s = monitor.probe_interval_s
        # Tells this controller's probes from other echo replies the switch punts (another prober's, a ping's).
        self.identifier = os.getpid() & 0xFFFF if identifier is None else identifier
        self.routes = {
            route.prefix: (route, RouteProbe(route.lte.port, route.wifi.port, monitor.probe_window_s))
            for route in config.routes
            if route.probe is not None and route.lte is not None and route.wifi is not None
        }
        self._macs = {port.port: port.mac for port in config.ports if port.mac is not None}
        self._outstanding = Outstanding(monitor.probe_timeout_s)

    def probe_of(self, route: RouteConfig) -> RouteProbe | None:
        found = self.routes.get(route.prefix)
        return found[1] if found else None

    async def send(self, switch: PacketSwitch) -> None:
        """One probe per link of every probed route each interval; probes unanswered past the timeout are counted.
        Until cancelled (finsy cancels it when the channel drops)."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            self._outstanding.expire(now)
            await switch.write(list(self._probes(now)))
            await asyncio.sleep(self.interval_s)

    async def receive(self, switch: PacketSwitch) -> None:
        """Times the answers to this prober's probes; until cancelled."""
        loop = asyncio.get_running_loop()
        async for packet in switch.read_packets(queue_size=PACKET_IN_QUEUE, eth_types={ETHERTYPE_IPV4}):
            now = loop.time()
            reply = parse_echo_reply(packet.payload)
            if reply is None or reply.identifier != self.identifier or reply.destination != self.source:
                continue
            if self._outstanding.answered(reply.sequence, int(packet.metadata["ingress_port"]), now) is None:
                LOGGER.debug("%s: late or unknown probe answer %d from %s", self.switch, reply.sequence, reply.source)

    def _probes(self, now: float) -> Iterator[fy.P4PacketOut]:
        for route, probe in self.routes.values():
            assert route.probe is not None and route.lte is not None and route.wifi is not None
            for hop in (route.lte, route.wifi):
                sequence = self._outstanding.sent(probe, hop.port, now)
                yield fy.P4PacketOut(self._frame(hop, route, sequence), egress_port=hop.port, _pad=0)

    def _frame(self, hop: NextHop, route: RouteConfig, sequence: int) -> bytes:
        assert route.probe is not None
        return echo_request(hop.dst_mac, self._macs[hop.port], self.source, route.probe, self.identifier, sequence)
