"""The host registry in etcd, for replicated controllers: a host may register with one replica and its peers resolve
or watch it on any other.

Each identity is one key, `P/hosts/<identity>`, whose value is the HostRecord. A registration reads the key, checks
its sequence against the stored one and writes it in a transaction that compares the key's mod_revision with the
one it read, so that of two replicas registering the same identity at once only the one that checked against the
latest record writes. Every replica mirrors the keys in memory and follows etcd's watch, which hands each new record
to that replica's watchers; a lookup reads etcd, and the mirror when etcd cannot be reached. An expired record stays
in etcd as in SQLite (its sequence number refuses replays); the replica that wrote it set its expiry."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aetcd
from aetcd import rtypes

from tng_controller.etcd_client import EtcdClient, EtcdError
from tng_controller.pb import policy_pb2 as pb
from tng_controller.registry import (
    DEFAULT_TTL_S,
    RegistryView,
    UnknownHost,
    check_identity,
    check_registration,
    identity_of,
)

LOGGER = logging.getLogger(__name__)
RESUME_DELAY_S = 0.5  # between attempts to watch again after etcd went away
# A registration checked against a record that another replica replaced meanwhile is checked again.
REGISTER_ATTEMPTS = 3


class EtcdHostRegistry(RegistryView):
    """The registrations under `prefix` in etcd, mirrored in memory; `follow` keeps the mirror current."""

    def __init__(
        self, client: EtcdClient, prefix: str, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(ttl_s, clock)
        self.client = client
        self._hosts_key = f"{prefix.rstrip('/')}/hosts/".encode()
        self._revision = 0

    async def load(self) -> None:
        """Reads every registration into the mirror."""
        rows = await self.client.call(self.client.get_prefix(self._hosts_key), "read the host registry")
        for kv in rows:
            self._publish(pb.HostRecord.FromString(kv.value))
        self._revision = rows.header.revision

    async def register(self, request: pb.RegisterHostRequest) -> pb.HostRecord:
        """Stores a checked, signed registration whose sequence is above the stored one; raises a RegistryError, or
        EtcdError when etcd cannot be reached (nothing was stored then)."""
        addresses = check_registration(request)  # a malformed or forged one is refused before etcd is asked
        identity = identity_of(request.public_key)
        key = self._hosts_key + identity.encode()
        for _ in range(REGISTER_ATTEMPTS):
            stored = await self.client.call(self.client.get(key), "read the host registry")
            current = pb.HostRecord.FromString(stored.value) if stored is not None else None
            record = self.new_record(request, addresses, current)
            compare = [self.client.transactions.mod(key) == (stored.mod_revision if stored is not None else 0)]
            put = [self.client.transactions.put(key, record.SerializeToString(deterministic=True))]
            written, _ = await self.client.call(
                self.client.transaction(compare=compare, success=put, failure=[]), "register"
            )
            if written:
                self._publish(record)
                return record
        raise EtcdError(f"host {identity}: registered by another replica at the same moment, try again")

    async def resolve(self, identity: str) -> pb.HostRecord:
        """The identity's record as etcd has it now (this replica's copy while etcd is away)."""
        identity = check_identity(identity)
        try:
            stored = await self.client.call(self.client.get(self._hosts_key + identity.encode()), "resolve")
        except EtcdError as exc:
            LOGGER.warning("%s: answering from this replica's copy", exc)
            return await super().resolve(identity)
        if stored is None:
            raise UnknownHost(f"no host {identity} is registered")
        self._publish(pb.HostRecord.FromString(stored.value))
        return self._resolved(identity)

    async def follow(self) -> None:
        """Takes every registration made on any replica into the mirror as etcd reports it; when etcd goes away, reads
        everything again once it is back. Runs until cancelled."""
        while True:
            try:
                watch = await self.client.watch_prefix(self._hosts_key, start_revision=self._revision + 1)
                async for event in watch:
                    if event.kind == rtypes.EventKind.PUT:
                        self._publish(pb.HostRecord.FromString(event.kv.value))
                    self._revision = max(self._revision, event.kv.mod_revision)
            except (aetcd.ClientError, TimeoutError, OSError) as exc:
                LOGGER.warning("etcd watch of the host registry ended (%s): reading it again", exc)
            while True:
                await asyncio.sleep(RESUME_DELAY_S)
                try:
                    await self.load()
                    break
                except EtcdError as exc:
                    LOGGER.warning("%s", exc)
