"""A P4Runtime proxy that forwards every call to a switch unchanged and records what the controller wrote."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from concurrent import futures

import grpc
from finsy.proto import p4r

SERVICE = "p4.v1.P4Runtime"
UNARY = ("Write", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig", "Capabilities")


class P4RuntimeRecorder:
    """Listens on a free loopback port (`address`) and forwards to `upstream`; `updates` counts the Write updates by
    entity kind and type (e.g. ("table_entry", "INSERT")), `pipeline_pushes` the SetForwardingPipelineConfig calls."""

    def __init__(self, upstream: str) -> None:
        self._channel = grpc.insecure_channel(upstream)
        self._lock = threading.Lock()
        self.updates: Counter[tuple[str, str]] = Counter()
        self.pipeline_pushes = 0
        handlers = {name: self._unary(name) for name in UNARY}
        handlers["Read"] = grpc.unary_stream_rpc_method_handler(self._read)
        handlers["StreamChannel"] = grpc.stream_stream_rpc_method_handler(self._stream)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def close(self) -> None:
        self._server.stop(None)
        self._channel.close()

    def clear(self) -> None:
        with self._lock:
            self.updates.clear()
            self.pipeline_pushes = 0

    def _unary(self, name: str) -> grpc.RpcMethodHandler:
        upstream = self._channel.unary_unary(f"/{SERVICE}/{name}")

        def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
            self._record(name, request)
            try:
                return upstream(request, timeout=context.time_remaining())
            except grpc.RpcError as exc:
                _abort(context, exc)
                raise

        return grpc.unary_unary_rpc_method_handler(forward)

    def _read(self, request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        call = self._channel.unary_stream(f"/{SERVICE}/Read")(request, timeout=context.time_remaining())
        context.add_callback(call.cancel)
        try:
            yield from call
        except grpc.RpcError as exc:
            _abort(context, exc)

    def _stream(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        call = self._channel.stream_stream(f"/{SERVICE}/StreamChannel")(_until_cancelled(requests))
        context.add_callback(call.cancel)
        try:
            yield from call
        except grpc.RpcError as exc:
            _abort(context, exc)

    def _record(self, name: str, request: bytes) -> None:
        with self._lock:
            if name == "SetForwardingPipelineConfig":
                self.pipeline_pushes += 1
            elif name == "Write":
                for update in p4r.WriteRequest.FromString(request).updates:
                    kind = update.entity.WhichOneof("entity") or "none"
                    self.updates[kind, p4r.Update.Type.Name(update.type)] += 1


def _until_cancelled(requests: Iterator[bytes]) -> Iterator[bytes]:
    """The controller's stream messages, ending quietly when the controller goes away."""
    try:
        yield from requests
    except grpc.RpcError:
        return


def _abort(context: grpc.ServicerContext, error: grpc.RpcError) -> None:
    """Ends the call with the switch's status, and its error details (P4Runtime puts them in trailing metadata)."""
    assert isinstance(error, grpc.Call)
    context.set_trailing_metadata(error.trailing_metadata() or ())
    context.abort(error.code(), error.details() or "")
