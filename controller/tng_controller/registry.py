"""The host registry (Viscous's name server): a host identity's current addresses, registered by the host itself and
resolved or watched by its peers.

A host's identity is BLAKE2s-256 of its static X25519 public key (tng-proto's `Identity`). X25519 keys do key
agreement, not signatures, so a registration is signed with XEdDSA (the Signal specification): the host signs with
its X25519 private scalar as an Ed25519 key, and anyone verifies with the Edwards form of the X25519 public key
(sign bit 0), which is an ordinary Ed25519 verification. Nobody without the private key can register an identity's
addresses; the sequence number, which must grow, keeps an old registration from being replayed.

A registration lasts `ttl_s` (the record's `expires_unix_ms`); agents renew theirs halfway, so a host that went away
stops resolving once its last one runs out. An expired record is kept, not deleted: its sequence number still
refuses a replay of an older registration that would give the identity back its old addresses."""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tng_controller.pb import policy_pb2 as pb

KEY_LEN = 32
SIGNATURE_LEN = 64
MAX_ADDRESSES = 16
MAX_SEQUENCE = 2**63 - 1  # SQLite integers are signed 64-bit
WATCH_QUEUE = 64  # registrations a watcher may lag behind before it is cut off
SIGNED_CONTEXT = "tng-register-host-v1"
DEFAULT_TTL_S = 600.0  # how long a registration lasts unless renewed ([hosts] registration_ttl_s)
_P = 2**255 - 19

_SCHEMA = """
CREATE TABLE IF NOT EXISTS hosts (
    identity TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    addresses TEXT NOT NULL,
    registered_unix_ms INTEGER NOT NULL,
    expires_unix_ms INTEGER NOT NULL
);
"""


class RegistryError(Exception):
    """A registration or lookup the registry refuses; the message says why."""


class MalformedRegistration(RegistryError):
    """A field of the request is not what the API defines (key or signature length, address syntax, count)."""


class ForgedRegistration(RegistryError):
    """The signature does not verify with the registered key."""


class StaleRegistration(RegistryError):
    """The sequence number is not above the stored registration's: a replay, or an older message arriving late."""


class UnknownHost(RegistryError):
    """No registration for this identity, or only an expired one."""


def identity_of(public_key: bytes) -> str:
    """The identity (64 hex digits) of the holder of `public_key`, as tng-proto computes it."""
    return hashlib.blake2s(public_key, digest_size=32).hexdigest()


def signed_message(public_key: bytes, sequence: int, addresses: list[str]) -> bytes:
    """What a registration's signature covers (the proto's RegisterHostRequest says the same)."""
    lines = [SIGNED_CONTEXT, public_key.hex(), str(sequence), *addresses]
    return ("\n".join(lines) + "\n").encode()


def check_identity(identity: str) -> str:
    text = identity.strip().lower()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise MalformedRegistration(f"an identity is 64 hex digits, got {identity!r}")
    return text


def check_address(address: str) -> str:
    """`address` as "ip:port" with a unicast IP and a port in 1-65535, in its canonical spelling."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise MalformedRegistration(f"address {address!r}: not ip:port")
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise MalformedRegistration(f"address {address!r}: {host!r} is not an IP address") from None
    if ip.version == 6 and not bracketed:
        raise MalformedRegistration(f"address {address!r}: an IPv6 address is written in brackets")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise MalformedRegistration(f"address {address!r}: port {port} is outside 1-65535")
    if ip.is_unspecified or ip.is_multicast:
        raise MalformedRegistration(f"address {address!r}: not a unicast address a peer can reach")
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def verify_xeddsa(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """XEdDSA verification: the X25519 key's Edwards form (u -> y = (u - 1) / (u + 1), sign bit 0) verifies the
    signature as an Ed25519 key."""
    u = int.from_bytes(public_key, "little") & (2**255 - 1)
    if u >= _P or (u + 1) % _P == 0:
        return False
    y = (u - 1) * pow(u + 1, _P - 2, _P) % _P
    try:
        Ed25519PublicKey.from_public_bytes(y.to_bytes(32, "little")).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def check_registration(request: pb.RegisterHostRequest) -> list[str]:
    """The request's addresses, canonical, once its fields and signature are checked; raises a RegistryError."""
    if len(request.public_key) != KEY_LEN:
        raise MalformedRegistration(f"public_key: {KEY_LEN} bytes expected, got {len(request.public_key)}")
    if len(request.signature) != SIGNATURE_LEN:
        raise MalformedRegistration(f"signature: {SIGNATURE_LEN} bytes expected, got {len(request.signature)}")
    if not 1 <= request.sequence <= MAX_SEQUENCE:
        raise MalformedRegistration(f"sequence: must be in 1-{MAX_SEQUENCE}, got {request.sequence}")
    if not 1 <= len(request.addresses) <= MAX_ADDRESSES:
        raise MalformedRegistration(f"addresses: 1-{MAX_ADDRESSES} expected, got {len(request.addresses)}")
    addresses = [check_address(address) for address in request.addresses]
    message = signed_message(request.public_key, request.sequence, list(request.addresses))
    if not verify_xeddsa(request.public_key, message, request.signature):
        raise ForgedRegistration(
            f"the signature does not verify with public key {request.public_key.hex()} "
            f"(identity {identity_of(request.public_key)})"
        )
    return addresses


@dataclass(slots=True, eq=False)
class _Watcher:
    queue: asyncio.Queue[pb.HostRecord] = field(default_factory=lambda: asyncio.Queue(WATCH_QUEUE))
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)


class RegistryView(ABC):
    """The registrations a controller serves from memory, and the watchers each new one is handed to; where they
    are stored is the subclass's."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.time) -> None:
        self.ttl_ms = round(ttl_s * 1000)
        self._clock = clock
        self._hosts: dict[str, pb.HostRecord] = {}  # expired records too: their sequence numbers still count
        self._watchers: dict[str, set[_Watcher]] = {}

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _live(self, record: pb.HostRecord | None) -> pb.HostRecord | None:
        return record if record is not None and record.expires_unix_ms > self.now_ms() else None

    def _live_identities(self) -> list[str]:
        now = self.now_ms()
        return [identity for identity, record in self._hosts.items() if record.expires_unix_ms > now]

    def _resolved(self, identity: str) -> pb.HostRecord:
        """The identity's record if it has a live one; raises UnknownHost saying whether it never had one."""
        record = self._hosts.get(identity)
        if record is None:
            raise UnknownHost(f"no host {identity} is registered")
        if self._live(record) is None:
            expired = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.expires_unix_ms / 1000))
            raise UnknownHost(f"host {identity}'s registration expired at {expired} (it was not renewed)")
        return record

    def _publish(self, record: pb.HostRecord) -> None:
        """Takes `record` unless a registration of its identity with a higher sequence is known already (replicas
        learn of registrations in any order), and tells the identity's watchers."""
        current = self._hosts.get(record.identity)
        if current is not None and record.sequence <= current.sequence:
            return
        self._hosts[record.identity] = record
        for watcher in self._watchers.get(record.identity, ()):
            try:
                watcher.queue.put_nowait(record)
            except asyncio.QueueFull:
                watcher.overflowed.set()

    @abstractmethod
    async def register(self, request: pb.RegisterHostRequest) -> pb.HostRecord:
        """Stores a checked, signed registration whose sequence is above the stored one; raises a RegistryError."""

    def get(self, identity: str) -> pb.HostRecord | None:
        """The live record of `identity` (64 lowercase hex digits), if it has one."""
        return self._live(self._hosts.get(identity))

    async def resolve(self, identity: str) -> pb.HostRecord:
        return self._resolved(check_identity(identity))

    def list(self) -> list[pb.HostRecord]:
        """Every host with a live registration, by identity."""
        return [self._hosts[identity] for identity in sorted(self._live_identities())]

    def __len__(self) -> int:
        return len(self._live_identities())

    @contextmanager
    def watch(self, identity: str) -> Iterator[_Watcher]:
        """A queue of the identity's registrations from now on (the current one is not in it)."""
        watcher = _Watcher()
        self._watchers.setdefault(identity, set()).add(watcher)
        try:
            yield watcher
        finally:
            watchers = self._watchers.get(identity, set())
            watchers.discard(watcher)
            if not watchers:
                self._watchers.pop(identity, None)

    def new_record(
        self, request: pb.RegisterHostRequest, addresses: list[str], current: pb.HostRecord | None
    ) -> pb.HostRecord:
        """The record a registration makes whose fields and signature `check_registration` passed (giving
        `addresses`), given the identity's current one, expired or not; raises StaleRegistration."""
        identity = identity_of(request.public_key)
        if current is not None and request.sequence <= current.sequence:
            raise StaleRegistration(
                f"host {identity}: sequence {request.sequence} is not above the registered {current.sequence}"
            )
        now = self.now_ms()
        return pb.HostRecord(
            identity=identity,
            addresses=addresses,
            sequence=request.sequence,
            registered_unix_ms=now,
            expires_unix_ms=now + self.ttl_ms,
        )


class HostRegistry(RegistryView):
    """The registrations of one controller, in memory and in an SQLite table (":memory:": in memory only)."""

    def __init__(
        self, path: Path | str = ":memory:", ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(ttl_s, clock)
        self._db = sqlite3.connect(str(path), isolation_level=None)
        if str(path) != ":memory:":
            self._db.execute("PRAGMA journal_mode = WAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(hosts)")}
        if "expires_unix_ms" not in columns:  # a file of a controller from before registrations expired
            self._db.execute("ALTER TABLE hosts ADD COLUMN expires_unix_ms INTEGER NOT NULL DEFAULT 0")
            self._db.execute("UPDATE hosts SET expires_unix_ms = registered_unix_ms + ?", (self.ttl_ms,))
        rows = self._db.execute("SELECT identity, sequence, addresses, registered_unix_ms, expires_unix_ms FROM hosts")
        for identity, sequence, addresses, registered, expires in rows:
            self._hosts[identity] = pb.HostRecord(
                identity=identity,
                addresses=addresses.split(),
                sequence=sequence,
                registered_unix_ms=registered,
                expires_unix_ms=expires,
            )

    async def register(self, request: pb.RegisterHostRequest) -> pb.HostRecord:
        """Stores a checked, signed registration with a fresh sequence number and tells the identity's watchers."""
        addresses = check_registration(request)
        record = self.new_record(request, addresses, self._hosts.get(identity_of(request.public_key)))
        self._db.execute(
            "INSERT INTO hosts (identity, sequence, addresses, registered_unix_ms, expires_unix_ms) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (identity) DO UPDATE SET sequence = excluded.sequence, "
            "addresses = excluded.addresses, registered_unix_ms = excluded.registered_unix_ms, "
            "expires_unix_ms = excluded.expires_unix_ms",
            (
                record.identity,
                record.sequence,
                " ".join(record.addresses),
                record.registered_unix_ms,
                record.expires_unix_ms,
            ),
        )
        self._publish(record)
        return record

    def close(self) -> None:
        self._db.close()
