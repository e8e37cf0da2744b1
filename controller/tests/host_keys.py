"""A host's static key as the registry sees it, signing registrations the way tng-agent does."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from tng_controller.pb import policy_pb2 as pb
from tng_controller.registry import identity_of, signed_message

P = 2**255 - 19


class Host:
    """A host key as the registry sees it: an Ed25519 key whose public point has sign 0 is the Edwards form of an
    X25519 key (u = (1 + y) / (1 - y)), and its Ed25519 signatures are that X25519 key's XEdDSA signatures."""

    def __init__(self) -> None:
        while True:
            self.key = Ed25519PrivateKey.generate()
            edwards = self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
            if edwards[31] >> 7 == 0:
                break
        y = int.from_bytes(edwards, "little")
        self.public_key = ((1 + y) * pow(1 - y, P - 2, P) % P).to_bytes(32, "little")
        self.identity = identity_of(self.public_key)

    def registration(self, sequence: int, addresses: list[str]) -> pb.RegisterHostRequest:
        signature = self.key.sign(signed_message(self.public_key, sequence, addresses))
        return pb.RegisterHostRequest(
            public_key=self.public_key, sequence=sequence, addresses=addresses, signature=signature
        )
