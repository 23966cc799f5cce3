//! Generates the SDK's gRPC code from ../action_webhook.proto: the messages (prost) and the
//! ActionService server and client (tonic), without a transport, so the SDK needs only
//! tonic's server and codegen parts.

use std::path::Path;

/// The module's opening line, as every module of the workspace has one.
const HEADER: &str = "//! The ActionService's messages, server and client, generated from\n\
//! proto/action_webhook.proto by scripts/generate-grpc.sh (protox and tonic-prost-build):\n\
//! do not edit.\n";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let proto = here.join("..");
    let out = here.join("../../src/grpc");
    let descriptors = protox::compile(["action_webhook.proto"], [&proto])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .out_dir(&out)
        .compile_fds(descriptors)?;
    let generated = std::fs::read_to_string(out.join("action_server_webhook.rs"))?;
    std::fs::write(out.join("proto.rs"), format!("{HEADER}{generated}"))?;
    std::fs::remove_file(out.join("action_server_webhook.rs"))?;
    Ok(())
}
