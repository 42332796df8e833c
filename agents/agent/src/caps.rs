//! Host capabilities for the registration, and the flash devices given with `--device`.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use lachesis_switch::names::{is_valid_name, name_error};
use lachesis_switch::{ClassifierKind, Op};

use crate::bus::{Capabilities, DataPath, DataPaths, Device, DeviceKind, Kernel};

/// How a device is driven (`devices.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Data in a file, an FDP SSD's FTL simulated beside it: media bytes are measured.
    Measured,
    /// io_uring on the file or block device.
    Uring,
}

/// A `--device NAME=[BACKEND:]PATH:SIZE` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    pub name: String,
    pub path: PathBuf,
    pub size_bytes: u64,
    /// None: measured for a file, uring for a block device.
    pub backend: Option<Backend>,
}

/// Parse a size: a number of bytes, optionally with a unit: `B`, `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024; `K`, `M`, `G`, `T` mean the same) or `KB`, `MB`, `GB`, `TB` (powers of
/// 1000). Units are case-insensitive. Zero is refused. The device layer's parser, so the
/// agent and `lachesis-fs` read `--device` sizes alike.
pub fn parse_size(s: &str) -> Result<u64, String> {
    lachesis_device::measured::parse_size(s).map_err(|e| match e {
        lachesis_device::Error::Config(m) => m,
        other => other.to_string(),
    })
}

/// Parse `NAME=[BACKEND:]PATH:SIZE` (BACKEND `measured` or `uring`; the path may itself
/// contain `:` and `=`; the size is after the last `:`).
pub fn parse_device_spec(s: &str) -> Result<DeviceSpec, String> {
    let usage =
        "expected NAME=[measured:|uring:]PATH:SIZE, e.g. flash0=/var/lib/lachesis/flash0.img:1GiB";
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("invalid device {s:?}: {usage}"))?;
    let (backend, rest) = match rest.split_once(':') {
        Some(("measured", r)) => (Some(Backend::Measured), r),
        Some(("uring", r)) => (Some(Backend::Uring), r),
        _ => (None, rest),
    };
    let (path, size) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("invalid device {s:?}: {usage}"))?;
    if !is_valid_name(name) {
        return Err(format!("invalid device {s:?}: {}", name_error(name)));
    }
    if path.is_empty() {
        return Err(format!("invalid device {s:?}: empty path; {usage}"));
    }
    let size_bytes = parse_size(size).map_err(|e| format!("invalid device {s:?}: {e}"))?;
    Ok(DeviceSpec {
        name: name.to_string(),
        path: PathBuf::from(path),
        size_bytes,
        backend,
    })
}

/// Make a device ready: a missing path is created as a sparse file of the given size
/// (parent directories too); an existing regular file shorter than the size is extended
/// (sparsely, never truncated); an existing block device is used as it is.
pub fn prepare_device(spec: &DeviceSpec) -> Result<Device, String> {
    let p = &spec.path;
    let ctx = |what: &str, e: std::io::Error| {
        format!("device {}: cannot {what} {}: {e}", spec.name, p.display())
    };
    let kind = match fs::metadata(p) {
        Ok(m) if m.is_file() => {
            if m.len() < spec.size_bytes {
                let f = OpenOptions::new()
                    .write(true)
                    .open(p)
                    .map_err(|e| ctx("open", e))?;
                f.set_len(spec.size_bytes).map_err(|e| ctx("extend", e))?;
            }
            DeviceKind::File
        }
        Ok(m) if m.file_type().is_block_device() => DeviceKind::Block,
        Ok(_) => {
            return Err(format!(
                "device {}: {} exists and is neither a regular file nor a block device",
                spec.name,
                p.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| ctx("create the directory of", e))?;
            }
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .map_err(|e| ctx("create", e))?;
            f.set_len(spec.size_bytes).map_err(|e| ctx("size", e))?;
            DeviceKind::File
        }
        Err(e) => return Err(ctx("inspect", e)),
    };
    Ok(Device {
        name: spec.name.clone(),
        path: p.to_string_lossy().into_owned(),
        kind,
        size_bytes: spec.size_bytes,
        fdp: false,
        placement_handles: 0,
        reclaim_unit_bytes: None,
    })
}

/// The kernel release (`uname -r`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_string())
}

/// Whether io_uring works here: set up a small ring and run a no-op through it (a kernel
/// without it, or a seccomp policy refusing it, fails).
pub fn io_uring_available() -> bool {
    let Ok(mut ring) = io_uring::IoUring::new(2) else {
        return false;
    };
    let nop = io_uring::opcode::Nop::new().build().user_data(7);
    // SAFETY: a NOP references no buffers.
    if unsafe { ring.submission().push(&nop) }.is_err() {
        return false;
    }
    if ring.submit_and_wait(1).is_err() {
        return false;
    }
    let done = ring
        .completion()
        .next()
        .is_some_and(|c| c.user_data() == 7 && c.result() >= 0);
    done
}

/// Whether FUSE mounts can be served (`/dev/fuse` opens read-write).
pub fn fuse_available() -> bool {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .is_ok()
}

/// Whether the kernel exposes BTF (needed by CO-RE eBPF programs).
pub fn btf_available() -> bool {
    Path::new("/sys/kernel/btf/vmlinux").exists()
}

/// The data paths this agent runs (`fuse`: a `--mount`; `kv`: `--kv-listen`) and the
/// classifier kinds each decides, as their crates define them.
pub fn data_paths(fuse: bool, kv: bool) -> DataPaths {
    let path = |kinds: &[ClassifierKind], ops: &[Op]| DataPath {
        classifiers: kinds.to_vec(),
        ops: Some(ops.to_vec()),
    };
    DataPaths {
        fuse: fuse.then(|| {
            path(
                &lachesis_fs::embed::CLASSIFIER_KINDS,
                &lachesis_fs::embed::OPS,
            )
        }),
        kv: kv.then(|| {
            path(
                &lachesis_kv::tenant::CLASSIFIER_KINDS,
                &lachesis_kv::tenant::OPS,
            )
        }),
    }
}

/// Detect the host's capabilities; `devices` are the prepared `--device`s.
pub fn detect(devices: Vec<Device>) -> Capabilities {
    let cpus = std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1);
    Capabilities {
        cpus,
        devices,
        kernel: Kernel {
            release: kernel_release(),
            btf: btf_available(),
            io_uring: io_uring_available(),
            fuse: fuse_available(),
        },
        data_paths: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("512mib"), Ok(512 << 20));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("10B"), Ok(10));
        for bad in [
            "",
            "GiB",
            "1.5GiB",
            "-1",
            "1XB",
            "0",
            "0GiB",
            "99999999999999999999",
            "17179869184GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn device_specs() {
        let d = parse_device_spec("flash0=/var/lib/lachesis/flash0.img:1GiB").unwrap();
        assert_eq!(d.name, "flash0");
        assert_eq!(d.path, PathBuf::from("/var/lib/lachesis/flash0.img"));
        assert_eq!(d.size_bytes, 1 << 30);
        assert_eq!(d.backend, None);
        let d = parse_device_spec("f=/odd:path=x:4096").unwrap();
        assert_eq!(d.path, PathBuf::from("/odd:path=x"));
        let d = parse_device_spec("f=uring:/dev/vdb:1GiB").unwrap();
        assert_eq!(
            (d.backend, d.path),
            (Some(Backend::Uring), PathBuf::from("/dev/vdb"))
        );
        let d = parse_device_spec("f=measured:/x:1GiB").unwrap();
        assert_eq!(d.backend, Some(Backend::Measured));
        for bad in [
            "flash0",
            "flash0=/x",
            "Flash=/x:1GiB",
            "f=:1GiB",
            "f=/x:",
            "f=/x:big",
            "=/x:1",
        ] {
            let e = parse_device_spec(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn devices_are_created_sparse_and_never_shrunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/flash0.img");
        let spec = DeviceSpec {
            name: "flash0".into(),
            path: path.clone(),
            size_bytes: 64 << 20,
            backend: None,
        };
        let d = prepare_device(&spec).unwrap();
        assert_eq!(d.kind, DeviceKind::File);
        assert_eq!(d.size_bytes, 64 << 20);
        let m = fs::metadata(&path).unwrap();
        assert_eq!(m.len(), 64 << 20);
        assert!(m.blocks() * 512 < 1 << 20, "sparse: {} blocks", m.blocks());

        // Existing and larger: kept as is.
        let small = DeviceSpec {
            size_bytes: 1 << 20,
            ..spec.clone()
        };
        assert_eq!(prepare_device(&small).unwrap().size_bytes, 1 << 20);
        assert_eq!(fs::metadata(&path).unwrap().len(), 64 << 20);
        // Existing and smaller: extended.
        let big = DeviceSpec {
            size_bytes: 128 << 20,
            ..spec
        };
        prepare_device(&big).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().len(), 128 << 20);

        let on_dir = DeviceSpec {
            name: "d".into(),
            path: dir.path().to_path_buf(),
            size_bytes: 1,
            backend: None,
        };
        assert!(prepare_device(&on_dir)
            .unwrap_err()
            .contains("neither a regular file"));
    }

    #[test]
    fn data_paths_list_what_each_one_classifies_by() {
        let none = data_paths(false, false);
        assert_eq!((none.fuse, none.kv), (None, None));
        let both = data_paths(true, true);
        let fuse_path = both.fuse.unwrap();
        let fuse = fuse_path.classifiers;
        assert!(fuse.contains(&ClassifierKind::PathPrefix), "{fuse:?}");
        assert!(!fuse.contains(&ClassifierKind::Process), "{fuse:?}");
        // The switch routes reads and writes; names are created and removed in the backing
        // directory, so a create or delete rule is the controller's to refuse.
        assert_eq!(fuse_path.ops, Some(vec![Op::Read, Op::Write]));
        let kv = both.kv.unwrap();
        assert_eq!(kv.classifiers, vec![ClassifierKind::KeyPrefix]);
        assert_eq!(kv.ops, Some(vec![Op::Read, Op::Write, Op::Delete]));
    }

    #[test]
    fn capabilities_are_detected() {
        let c = detect(vec![]);
        assert!(c.cpus >= 1);
        assert!(!c.kernel.release.is_empty());
    }
}
