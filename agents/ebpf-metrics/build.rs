//! Builds `ebpf/lachesis.bpf.c` into a libbpf skeleton.
//!
//! `vmlinux.h` is generated here, into OUT_DIR, from the build host's
//! kernel BTF (`bpftool btf dump file /sys/kernel/btf/vmlinux format c`);
//! CO-RE relocations make the object portable to other kernels, so only the
//! build host needs BTF. `LACHESIS_VMLINUX_H` points at a pre-generated
//! header instead, `BPFTOOL` and `CLANG` override the tools.
//!
//! Without BTF, bpftool or clang the crate still builds, without the BPF
//! object: `EbpfMetrics::load` then returns `Error::NotBuilt` and the agent
//! runs without eBPF metrics. The reason is printed as a cargo warning.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

fn main() {
    let manifest =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let ebpf = manifest.join("../../ebpf");
    let source = ebpf.join("lachesis.bpf.c");

    println!("cargo::rustc-check-cfg=cfg(lachesis_no_bpf)");
    println!("cargo::rerun-if-env-changed=LACHESIS_VMLINUX_H");
    println!("cargo::rerun-if-env-changed=BPFTOOL");
    println!("cargo::rerun-if-env-changed=CLANG");
    for entry in fs::read_dir(&ebpf).into_iter().flatten().flatten() {
        let p = entry.path();
        if matches!(p.extension().and_then(|e| e.to_str()), Some("c" | "h")) {
            println!("cargo::rerun-if-changed={}", p.display());
        }
    }

    if let Err(reason) = build(&source, &ebpf, &out) {
        println!("cargo::warning=lachesis-ebpf-metrics: building without BPF programs: {reason}");
        println!("cargo::rustc-cfg=lachesis_no_bpf");
        // Expose the reason so Error::NotBuilt can say why.
        println!(
            "cargo::rustc-env=LACHESIS_NO_BPF_REASON={}",
            reason.replace('\n', " ")
        );
    }
}

fn build(source: &Path, ebpf: &Path, out: &Path) -> Result<(), String> {
    let vmlinux_dir = out.join("vmlinux");
    fs::create_dir_all(&vmlinux_dir)
        .map_err(|e| format!("creating {}: {e}", vmlinux_dir.display()))?;
    let header = vmlinux_dir.join("vmlinux.h");
    vmlinux_h(&header)?;

    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    let skel = out.join("lachesis.skel.rs");
    libbpf_cargo::SkeletonBuilder::new()
        .source(source)
        .clang(&clang)
        .clang_args([
            "-Wall".into(),
            "-Werror".into(),
            format!("-I{}", vmlinux_dir.display()),
            format!("-I{}", ebpf.display()),
        ])
        .build_and_generate(&skel)
        .map_err(|e| format!("compiling {} with {:?}: {e:#}", source.display(), clang))?;
    Ok(())
}

fn vmlinux_h(dest: &Path) -> Result<(), String> {
    if let Some(pre) = env::var_os("LACHESIS_VMLINUX_H") {
        fs::copy(&pre, dest).map_err(|e| format!("copying LACHESIS_VMLINUX_H {pre:?}: {e}"))?;
        return Ok(());
    }
    if !Path::new(VMLINUX_BTF).exists() {
        return Err(format!(
            "{VMLINUX_BTF} is missing (kernel built without CONFIG_DEBUG_INFO_BTF); \
             set LACHESIS_VMLINUX_H to a vmlinux.h generated on a BTF kernel"
        ));
    }
    let bpftool = env::var_os("BPFTOOL").unwrap_or_else(|| "bpftool".into());
    let output = Command::new(&bpftool)
        .args(["btf", "dump", "file", VMLINUX_BTF, "format", "c"])
        .output()
        .map_err(|e| format!("running {bpftool:?} (apt-get install bpftool): {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{bpftool:?} btf dump failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    fs::write(dest, &output.stdout).map_err(|e| format!("writing {}: {e}", dest.display()))
}
