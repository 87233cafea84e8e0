//! Compiles `proto/rill/*.proto` once, for real builds and for the simulation (madsim-tonic-build
//! writes both; `tonic::include_proto!` picks the right one).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    std::env::set_var("PROTOC", protoc);
    let dir = "../../proto/rill";
    let files = [
        "common.proto",
        "records.proto",
        "admin.proto",
        "internal.proto",
        "raft.proto",
        "meta.proto",
        "partition.proto",
        "coordinator.proto",
        "groups.proto",
        "transactions.proto",
        "share.proto",
    ]
    .map(|f| format!("{dir}/{f}"));
    // The descriptor set lists every service and method: tests take the list of RPCs from it
    // (see `rill_proto::descriptor`).
    let descriptor = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("rill_descriptor.bin");
    tonic_build::configure().bytes(["."]).file_descriptor_set_path(descriptor).compile_protos(&files, &[dir])?;
    // Rerun when a proto file or this list changes (naming files replaces Cargo's default of
    // rerunning on any change in the package).
    println!("cargo:rerun-if-changed=build.rs");
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    Ok(())
}
