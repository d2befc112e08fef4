//! The gRPC client from the project's one protocol file, compiled in Rust (no protoc needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../../protocol/embedding.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = protox::compile([proto], ["../../protocol"])?;
    tonic_prost_build::configure()
        .build_server(false)
        // `bytes` fields as `bytes::Bytes`: a reply's vectors stay in the buffer they arrived in.
        .bytes(".")
        .compile_fds(files)?;
    Ok(())
}
