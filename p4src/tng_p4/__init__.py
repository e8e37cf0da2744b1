"""Python side of the tng P4 pipelines: toolchain detection, the Scapy wire layer, test vectors, PTF runner."""
