"""P4Runtime over TLS: BMv2 serving with a certificate and requiring a client certificate of the test's CA; the
controller with `tls_ca`, `tls_cert` and `tls_key` programs it, one without a client certificate or without TLS
never gets in. Skipped when the P4 toolchain is absent."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TlsFiles
from tng_controller import testbed
from tng_controller.testbed import ControllerProcess, controller_config, tngctl, wait_until_connected
from tng_p4 import toolchain
from tng_p4.bmv2 import Bmv2, Bmv2Tls, nanomsg_config

TOOLCHAIN = toolchain.detect()
SKIP_REASON = TOOLCHAIN.skip_reason("bmv2")
pytestmark = [pytest.mark.needs_bmv2, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]
POLICY = """
[[policy]]
name = "bulk"
match = { priority = 5, ip_protocol = 6 }
switch_policy = { aggregation = "AGGREGATION_IN_NETWORK", steering = "STEERING_MODE_WEIGHTED", lte_weight = 1, wifi_weight = 3 }
"""  # noqa: E501 (one policy per table)
REFUSED_WAIT_S = 5.0  # a controller that cannot get in stays out this long (it retries meanwhile)


@pytest.fixture
def tls_switch(tmp_path: Path, tls_files: TlsFiles) -> Iterator[Bmv2]:
    assert TOOLCHAIN.simple_switch_grpc.path is not None
    config = nanomsg_config(TOOLCHAIN.simple_switch_grpc.path, tmp_path)
    tls = Bmv2Tls(cert=tls_files.server_cert, key=tls_files.server_key, client_ca=tls_files.ca)
    with Bmv2(dataclasses.replace(config, tls=tls)) as switch:
        yield switch


def _tls_keys(ca: Path | None = None, cert: Path | None = None, key: Path | None = None) -> str:
    """The [[switch]] keys of TLS towards it, for the files given."""
    files = {"tls_ca": ca, "tls_cert": cert, "tls_key": key}
    return "".join(f'{name} = "{path}"\n' for name, path in files.items() if path)


def _controller(tmp_path: Path, switch: Bmv2, name: str, tls: str) -> ControllerProcess:
    config = tmp_path / f"{name}.toml"
    config.write_text(controller_config(switch, tmp_path / f"{name}.db", tls))
    controller = ControllerProcess(config, tmp_path / f"{name}.log")
    controller.start()
    return controller


def test_a_controller_with_the_ca_and_a_client_certificate_programs_a_tls_switch(
    tmp_path: Path, tls_switch: Bmv2, tls_files: TlsFiles
) -> None:
    trusted = _tls_keys(tls_files.ca, tls_files.client_cert, tls_files.client_key)
    controller = _controller(tmp_path, tls_switch, "trusted", trusted)
    try:
        wait_until_connected(controller.address)  # the pipeline pushed and the tables synced, over TLS
        policies = tmp_path / "policies.toml"
        policies.write_text(POLICY)
        done = tngctl(controller.address, "--json", "policy", "set", str(policies))
        assert done.returncode == 0, done.stderr
        assert "lwip" in done.stdout  # written to the switch, not only stored
    finally:
        controller.stop()

    for name, tls in (
        ("plaintext", ""),  # the switch speaks TLS only
        ("anonymous", _tls_keys(tls_files.ca)),  # the switch requires a client certificate
        ("stranger", _tls_keys(tls_files.ca, tls_files.other_cert, tls_files.other_key)),  # of another CA
    ):
        refused = _controller(tmp_path, tls_switch, name, tls)
        try:
            with pytest.raises(testbed.TestbedError, match="lwip"):
                wait_until_connected(refused.address, timeout_s=REFUSED_WAIT_S)
        finally:
            refused.stop()
