"""tng controller: P4Runtime south to the switches, gRPC north to the host agents, and the VISIBLE helper."""
