"""A BMv2 switch's ports over its nanomsg packet socket (the protocol of PTF's nn platform): inject and capture."""

from __future__ import annotations

import struct
import time
from types import TracebackType
from typing import Self

import pynng

HEADER = struct.Struct("<iii")  # message type, port, length of the frame (or another argument)
PORT_ADD = 0
PACKET_IN = 3  # a frame into the switch
PACKET_OUT = 4  # a frame out of the switch


class PacketPorts:
    """Dials the switch's packet socket and attaches `ports`; frames sent go into the switch on a port, frames the
    switch sends out of an attached port are captured."""

    def __init__(self, socket_address: str, ports: list[int], recv_timeout_ms: int = 100) -> None:
        self._socket = pynng.Pair0(recv_timeout=recv_timeout_ms)
        self._socket.dial(socket_address, block=True)
        for port in ports:
            self._socket.send(HEADER.pack(PORT_ADD, port, 0))

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def send(self, port: int, frame: bytes) -> None:
        self._socket.send(HEADER.pack(PACKET_IN, port, len(frame)) + frame)

    def receive(self, quiet_s: float = 0.5, limit_s: float = 10.0) -> list[tuple[int, bytes]]:
        """Every (port, frame) the switch sent until none came for `quiet_s` (or `limit_s` passed)."""
        frames: list[tuple[int, bytes]] = []
        start = last = time.monotonic()
        while time.monotonic() - last < quiet_s and time.monotonic() - start < limit_s:
            frame = self.receive_frame()
            if frame is not None:
                frames.append(frame)
                last = time.monotonic()
        return frames

    def receive_frame(self) -> tuple[int, bytes] | None:
        """The next (port, frame) the switch sent, or None when none came within the receive timeout."""
        try:
            message = self._socket.recv()
        except pynng.Timeout:
            return None
        kind, port, length = HEADER.unpack_from(message)
        return (port, message[HEADER.size : HEADER.size + length]) if kind == PACKET_OUT else None
