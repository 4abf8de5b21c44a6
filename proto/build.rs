//! Compiles `proto/**/*.proto` with protox (pure Rust, no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/lockstep/ingest/v1/ingest.proto"];
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
