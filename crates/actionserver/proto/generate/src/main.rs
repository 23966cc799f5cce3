//! Generates the SDK's gRPC code from ../action_webhook.proto: the messages (prost) and the
//! ActionService server and client (tonic), without a transport, so the SDK needs only
//! tonic's server and codegen parts.

use std::path::Path;

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
    std::fs::rename(
        out.join("action_server_webhook.rs"),
        out.join("proto.rs"),
    )?;
    Ok(())
}
