//! Generates the Rust client of the controller's policy API from the one proto the Python controller also uses.
//! protox parses the proto in pure Rust, so building the agent needs no protoc on the machine.

use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../controller/proto");
    let proto = proto_root.join("tng/policy/v1/policy.proto");
    println!("cargo:rerun-if-changed={}", proto.display());
    let descriptors = protox::compile([&proto], [&proto_root])?;
    tonic_prost_build::configure().build_server(false).build_transport(true).compile_fds(descriptors)?;
    Ok(())
}
