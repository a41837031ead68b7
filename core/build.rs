//! Compiles the BPF programs (src/bpf/offcpu.bpf.c) with clang into an object that
//! the library embeds and loads at run time.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SOURCE: &str = "src/bpf/offcpu.bpf.c";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The UAPI headers include <asm/types.h>, which Debian keeps under the target's triplet.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("cargo sets CARGO_CFG_TARGET_ARCH");
    let asm_headers = format!("-I/usr/include/{arch}-linux-gnu");
    // v3: the stack table's ids come from an atomic fetch-and-add (kernel 5.12 and later)
    SkeletonBuilder::new()
        .source(SOURCE)
        .obj(out_dir.join("offcpu.bpf.o"))
        .clang_args(["-g", "-O2", "-Wall", "-mcpu=v3", asm_headers.as_str()])
        .build()
        .expect("the BPF programs compile (clang and libbpf's headers are needed: scripts/setup)");
    println!("cargo:rerun-if-changed={SOURCE}");
}
