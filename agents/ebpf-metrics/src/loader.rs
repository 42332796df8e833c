//! Loading and attaching the BPF programs.
//!
//! [`EbpfMetrics::load`] opens the skeleton built from `ebpf/lachesis.bpf.c`,
//! sizes the maps, fills the syscall table, loads, attaches every program
//! to its BTF tracepoint, then keeps only what it needs: the links (which
//! keep the programs in the kernel) and handles on the maps user space
//! reads and writes. Dropping [`EbpfMetrics`] detaches everything.

use crate::error::{Error, Result};
use crate::maps::MetricsMaps;
use libbpf_rs::{Link, MapHandle};
use std::ops::Deref;
use std::path::{Path, PathBuf};

/// Where the kernel exposes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
/// Default pin directory, read by `lachesis-top` and `lachesis-agent top`.
pub const DEFAULT_PIN_DIR: &str = "/sys/fs/bpf/lachesis";

/// How to load the programs.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Tenant slots (tenant ids are `0..max_tenants`). Per-CPU counters
    /// take about 2.2 KiB per slot and CPU.
    pub max_tenants: u32,
    /// Ring buffer size for samples: a power of two, at least a page.
    pub ring_buffer_bytes: u32,
    /// Pin the maps top reads (stats, tenant_cfg, cgroup_tenants, state)
    /// under this directory so another process can read them. The
    /// directory must be on a bpf filesystem; it is created if missing and
    /// the pins are removed on drop.
    pub pin_dir: Option<PathBuf>,
    /// Layers to count besides the block layer (which SHARDS needs and is
    /// always on). Each costs CPU on every IO of the host; see
    /// docs/benchmarks/ebpf.md for what each costs.
    pub layers: Layers,
    /// Count the syscall layer through the `raw_syscalls` hook (which runs
    /// on every syscall of the host) even where the IO syscalls' own
    /// tracepoints are available. For tests and cost comparisons; the
    /// hook is also what is used when those tracepoints are not.
    pub raw_syscalls: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            max_tenants: 256,
            ring_buffer_bytes: 4 << 20,
            pin_dir: None,
            layers: Layers::default(),
            raw_syscalls: false,
        }
    }
}

/// Optional layers; all on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    /// read/write-family syscalls (through the per-syscall tracepoints of
    /// the IO syscalls; where the kernel lacks them, through the
    /// raw_syscalls hook, which runs on every syscall of the host).
    pub syscall: bool,
    /// io_uring read/write requests.
    pub io_uring: bool,
    /// Request issue to completion (device service time), from the
    /// request's own issue timestamp at completion: no extra program runs
    /// per IO, only the block-layer completion does a little more.
    pub device: bool,
}

impl Default for Layers {
    fn default() -> Self {
        Layers {
            syscall: true,
            io_uring: true,
            device: true,
        }
    }
}

impl Layers {
    /// Block layer and SHARDS only: the cheapest configuration.
    pub const BLOCK_ONLY: Layers = Layers {
        syscall: false,
        io_uring: false,
        device: false,
    };

    fn enables(&self, program: &str) -> bool {
        match program {
            "lx_sys_enter" | "lx_sys_exit" | "lx_sc_enter" | "lx_sc_exit" => self.syscall,
            "lx_uring_submit" | "lx_uring_complete" => self.io_uring,
            "lx_bio_split" => self.device,
            _ => true,
        }
    }
}

/// One BPF program and the tracepoint it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeStatus {
    /// Program name in `lachesis.bpf.c`.
    pub program: &'static str,
    /// `category:name` of the tracepoint.
    pub tracepoint: &'static str,
    /// Required probes fail [`EbpfMetrics::load`]; optional ones are
    /// skipped with a reason (their layer or feature is then missing).
    pub required: bool,
    pub attached: bool,
    pub reason: Option<String>,
}

struct Probe {
    program: &'static str,
    /// `category:name`; the BTF type is `btf_trace_<name>`.
    tracepoint: &'static str,
    required: bool,
    /// What is lost when an optional probe is missing.
    loses: &'static str,
}

/// The IO syscalls whose `syscalls:sys_enter_<name>` / `sys_exit_<name>`
/// tracepoints carry the syscall layer (the same set as the syscall-number
/// table of the raw_syscalls fallback).
const IO_SYSCALLS: [&str; 10] = [
    "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2",
    "pwritev2",
];

/// Reason given for the raw_syscalls pair when the per-syscall
/// tracepoints carry the syscall layer: not a loss (see `degraded`).
const SUPERSEDED: &str = "superseded by the per-syscall tracepoints";

const PROBES: &[Probe] = &[
    // The syscall layer: lx_sc_* on syscalls:sys_{enter,exit}_<IO syscall>
    // when tracefs ids are available, else lx_sys_* on raw_syscalls.
    Probe {
        program: "lx_sc_enter",
        tracepoint: "syscalls:sys_enter_{read,write,pread64,pwrite64,readv,writev,preadv,pwritev,preadv2,pwritev2}",
        required: false,
        loses: "",
    },
    Probe {
        program: "lx_sc_exit",
        tracepoint: "syscalls:sys_exit_{read,write,pread64,pwrite64,readv,writev,preadv,pwritev,preadv2,pwritev2}",
        required: false,
        loses: "",
    },
    Probe { program: "lx_sys_enter", tracepoint: "raw_syscalls:sys_enter", required: true, loses: "" },
    Probe { program: "lx_sys_exit", tracepoint: "raw_syscalls:sys_exit", required: true, loses: "" },
    Probe { program: "lx_bio_queue", tracepoint: "block:block_bio_queue", required: true, loses: "" },
    Probe { program: "lx_bio_complete", tracepoint: "block:block_bio_complete", required: true, loses: "" },
    Probe { program: "lx_rq_complete", tracepoint: "block:block_rq_complete", required: true, loses: "" },
    Probe {
        program: "lx_bio_split",
        tracepoint: "block:block_split",
        required: false,
        loses: "requests made of bios split for the device's limits are not charged at the device layer",
    },
    Probe {
        program: "lx_uring_submit",
        tracepoint: "io_uring:io_uring_submit_req",
        required: false,
        loses: "the io_uring layer is not counted",
    },
    Probe {
        program: "lx_uring_complete",
        tracepoint: "io_uring:io_uring_complete",
        required: false,
        loses: "the io_uring layer is not counted",
    },
    Probe {
        program: "lx_dirty_folio",
        tracepoint: "writeback:writeback_dirty_folio",
        required: false,
        loses: "buffered writes flushed by writeback are charged to a tenant only under cgroup v2 writeback",
    },
];

/// The loaded, attached programs and their maps.
///
/// Dereferences to [`MetricsMaps`], where the tenant and counter API
/// lives, so `metrics.tenant_stats(t)` works on either.
pub struct EbpfMetrics {
    maps: MetricsMaps,
    samples: MapHandle,
    probes: Vec<ProbeStatus>,
    pinned: Vec<PathBuf>,
    // Declared last: dropped after the handles, though order does not
    // matter to the kernel.
    _links: Vec<Link>,
}

impl Deref for EbpfMetrics {
    type Target = MetricsMaps;
    fn deref(&self) -> &MetricsMaps {
        &self.maps
    }
}

impl std::fmt::Debug for EbpfMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfMetrics")
            .field("max_tenants", &self.maps.max_tenants())
            .field("probes", &self.probes)
            .field("pinned", &self.pinned)
            .finish()
    }
}

impl EbpfMetrics {
    /// Load and attach. Errors name the missing kernel feature
    /// ([`Error::is_unsupported`] is true for all of those).
    pub fn load(opts: &LoadOptions) -> Result<Self> {
        imp::load(opts)
    }

    /// Every probe, attached or not (optional probes the kernel lacks are
    /// listed with the reason).
    pub fn probes(&self) -> &[ProbeStatus] {
        &self.probes
    }

    /// Features lost to missing optional tracepoints (or turned off in
    /// [`LoadOptions::layers`]), for the agent's log.
    pub fn degraded(&self) -> Vec<String> {
        self.probes
            .iter()
            .filter(|p| !p.attached)
            .filter_map(|p| p.reason.clone())
            .filter(|r| !r.starts_with(SUPERSEDED))
            .collect()
    }

    /// The sample ring buffer; see [`crate::samples::SampleReader`].
    pub(crate) fn samples_map(&self) -> &MapHandle {
        &self.samples
    }

    /// Paths of the pinned maps (empty unless `pin_dir` was set).
    pub fn pinned(&self) -> &[PathBuf] {
        &self.pinned
    }
}

impl Drop for EbpfMetrics {
    fn drop(&mut self) {
        for p in &self.pinned {
            let _ = std::fs::remove_file(p);
        }
        if let Some(dir) = self.pinned.first().and_then(|p| p.parent()) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Names of the maps pinned under `pin_dir` (what `MetricsMaps::open_pinned`
/// opens).
pub(crate) const PINNED_MAPS: [&str; 4] = ["stats", "tenant_cfg", "cgroup_tenants", "state"];

fn bpffs_magic_ok(dir: &Path) -> bool {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into the zeroed struct we own; c is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    rc == 0 && st.f_type as i64 == BPF_FS_MAGIC
}

#[cfg(lachesis_no_bpf)]
mod imp {
    use super::*;
    pub(super) fn load(_opts: &LoadOptions) -> Result<EbpfMetrics> {
        Err(Error::NotBuilt(env!("LACHESIS_NO_BPF_REASON")))
    }
}

#[cfg(not(lachesis_no_bpf))]
mod imp {
    use super::*;
    use crate::layout::{SYSCALL_TABLE, SYS_READ, SYS_WRITE};
    use crate::skel::{LachesisSkelBuilder, OpenLachesisSkel};
    use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
    use libbpf_rs::{btf::Btf, btf::BtfType, PrintLevel};
    use std::mem::MaybeUninit;
    use std::sync::Mutex;

    /// libbpf's last warnings (the verifier log ends up here), so a load
    /// error can say what the verifier rejected.
    static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());

    fn capture(level: PrintLevel, msg: String) {
        if matches!(level, PrintLevel::Debug) {
            return;
        }
        if let Ok(mut log) = LIBBPF_LOG.lock() {
            log.push_str(&msg);
            // Keep the tail: the verifier's verdict is at the end.
            if log.len() > 16 * 1024 {
                let cut = log.len() - 8 * 1024;
                let cut = (cut..log.len())
                    .find(|&i| log.is_char_boundary(i))
                    .unwrap_or(0);
                log.drain(..cut);
            }
        }
    }

    fn take_log() -> String {
        LIBBPF_LOG
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }

    fn syscall_table() -> [u8; SYSCALL_TABLE] {
        let mut t = [0u8; SYSCALL_TABLE];
        let reads = [
            libc::SYS_read,
            libc::SYS_pread64,
            libc::SYS_readv,
            libc::SYS_preadv,
            libc::SYS_preadv2,
        ];
        let writes = [
            libc::SYS_write,
            libc::SYS_pwrite64,
            libc::SYS_writev,
            libc::SYS_pwritev,
            libc::SYS_pwritev2,
        ];
        for nr in reads {
            if let Some(slot) = usize::try_from(nr).ok().and_then(|i| t.get_mut(i)) {
                *slot = SYS_READ;
            }
        }
        for nr in writes {
            if let Some(slot) = usize::try_from(nr).ok().and_then(|i| t.get_mut(i)) {
                *slot = SYS_WRITE;
            }
        }
        t
    }

    /// Whether the running kernel's `io_uring_complete` tracepoint passes the CQE (Linux 6.14 and
    /// later: ctx, req, cqe) rather than its fields (ctx, req, user_data, res, ...): the argument
    /// count of the tracepoint's prototype in the kernel's BTF. Without BTF the programs cannot
    /// load anyway; the newer shape is assumed.
    fn uring_complete_passes_cqe() -> bool {
        use libbpf_rs::btf::types::FuncProto;
        use libbpf_rs::btf::{Btf, BtfType};
        let Ok(btf) = Btf::from_vmlinux() else {
            return true;
        };
        let Some(t) = btf.type_by_name::<BtfType<'_>>("btf_trace_io_uring_complete") else {
            return true;
        };
        // typedef -> pointer -> prototype (void *data, ctx, req, ...)
        let proto = t
            .skip_mods_and_typedefs()
            .next_type()
            .and_then(|p| FuncProto::try_from(p).ok());
        proto.is_none_or(|p| p.len() == 4)
    }

    /// Whether the io (blkio) controller is on the cgroup v2 hierarchy:
    /// /proc/cgroups lists hierarchy 0 for controllers not bound to a v1
    /// hierarchy. Only then does a bio's blkcg name a v2 cgroup.
    fn io_controller_on_v2() -> bool {
        let Ok(text) = std::fs::read_to_string("/proc/cgroups") else {
            return false;
        };
        text.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            matches!(f.as_slice(), ["blkio" | "io", "0", _, "1", ..])
        })
    }

    /// Missing privileges, as opposed to the verifier rejecting a program
    /// (which also answers EACCES, but to root).
    fn is_eperm(e: &libbpf_rs::Error) -> bool {
        // SAFETY: geteuid has no preconditions.
        matches!(e.kind(), libbpf_rs::ErrorKind::PermissionDenied)
            && unsafe { libc::geteuid() } != 0
    }

    pub(super) fn load(opts: &LoadOptions) -> Result<EbpfMetrics> {
        if opts.max_tenants == 0 {
            return Err(Error::TenantOutOfRange { tenant: 0, max: 0 });
        }
        if !Path::new(VMLINUX_BTF).exists() {
            return Err(Error::NoBtf {
                path: VMLINUX_BTF.into(),
            });
        }
        let btf = Btf::from_vmlinux().map_err(|e| Error::Load {
            message: format!("reading {VMLINUX_BTF}: {e}"),
        })?;
        // (enter ids, exit ids) of the IO syscalls' tracepoints, or why not.
        let sc_ids = match (opts.layers.syscall, opts.raw_syscalls) {
            (false, _) => Err(String::new()),
            (true, true) => Err("LoadOptions::raw_syscalls".into()),
            (true, false) => tracefs::syscall_event_ids(),
        };
        let mut probes = Vec::with_capacity(PROBES.len());
        for p in PROBES {
            let event = p
                .tracepoint
                .split_once(':')
                .map_or(p.tracepoint, |(_, e)| e);
            let wanted = opts.layers.enables(p.program);
            let present = || {
                btf.type_by_name::<BtfType<'_>>(&format!("btf_trace_{event}"))
                    .is_some()
            };
            let missing = || Error::MissingTracepoint {
                probe: p.program,
                tracepoint: p.tracepoint.to_string(),
            };
            let unattached = |reason| ProbeStatus {
                program: p.program,
                tracepoint: p.tracepoint,
                required: p.required,
                attached: false,
                reason,
            };
            if p.program.starts_with("lx_sc_") || p.program.starts_with("lx_sys_") {
                let narrow = p.program.starts_with("lx_sc_");
                let reason = match (&sc_ids, narrow) {
                    _ if !wanted => Some(format!("{} disabled by LoadOptions::layers", p.program)),
                    (Ok(_), true) | (Err(_), false) => None,
                    (Ok(_), false) => Some(format!("{SUPERSEDED}: {}", p.program)),
                    (Err(why), true) => Some(format!(
                        "{SUPERSEDED} unavailable ({why}): raw_syscalls used"
                    )),
                };
                // The fallback's tracepoint must exist when it is the one used.
                if reason.is_none() && !narrow && !present() {
                    return Err(missing());
                }
                probes.push(unattached(reason));
                continue;
            }
            let present = present();
            if wanted && !present && p.required {
                return Err(missing());
            }
            probes.push(unattached(if !wanted {
                Some(format!("{} disabled by LoadOptions::layers", p.program))
            } else {
                (!present)
                    .then(|| format!("kernel has no tracepoint {}: {}", p.tracepoint, p.loses))
            }));
        }
        drop(btf);

        let prev = libbpf_rs::set_print(Some((PrintLevel::Info, capture)));
        let result = open_load_attach(opts, &mut probes, sc_ids.as_ref().ok());
        libbpf_rs::set_print(prev);
        let log = take_log();
        let (maps, samples, links) = result.map_err(|e| match e {
            Error::Load { message } => Error::Load {
                message: with_log(message, &log),
            },
            other => other,
        })?;

        let mut pinned = Vec::new();
        if let Some(dir) = &opts.pin_dir {
            pinned = pin(&maps, dir)?;
        }
        Ok(EbpfMetrics {
            maps,
            samples,
            probes,
            pinned,
            _links: links,
        })
    }

    fn with_log(message: String, log: &str) -> String {
        let tail: Vec<&str> = log.lines().rev().take(12).collect();
        if tail.is_empty() {
            message
        } else {
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("{message}; libbpf: {}", tail.join(" | "))
        }
    }

    type Loaded = (MetricsMaps, MapHandle, Vec<Link>);

    fn open_load_attach(
        opts: &LoadOptions,
        probes: &mut [ProbeStatus],
        sc_ids: Option<&(Vec<u32>, Vec<u32>)>,
    ) -> Result<Loaded> {
        let mut storage = MaybeUninit::uninit();
        let mut open: OpenLachesisSkel<'_> = LachesisSkelBuilder::default()
            .open(&mut storage)
            .map_err(|e| Error::Load {
                message: format!("opening the BPF object: {e}"),
            })?;

        let resize = |m: &mut libbpf_rs::OpenMapMut<'_>, n: u32, name: &str| {
            m.set_max_entries(n).map_err(|e| Error::Load {
                message: format!("sizing map {name}: {e}"),
            })
        };
        resize(&mut open.maps.stats, opts.max_tenants, "stats")?;
        resize(&mut open.maps.tenant_cfg, opts.max_tenants, "tenant_cfg")?;
        resize(&mut open.maps.samples, opts.ring_buffer_bytes, "samples")?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Load {
                message: "BPF object has no .rodata".into(),
            })?;
        rodata.sys_op_of_nr = syscall_table();
        rodata.max_tenants = opts.max_tenants;
        rodata.io_on_dfl = io_controller_on_v2();
        rodata.uring_complete_cqe = uring_complete_passes_cqe();
        // The device layer is counted at block_rq_complete from the
        // request's own timestamps; there is no issue-side program.
        rodata.count_device = opts.layers.device;

        for prog in open.open_object_mut().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            if let Some(st) = probes.iter().find(|p| p.program == name) {
                if st.reason.is_some() {
                    let mut prog = prog;
                    prog.set_autoload(false);
                }
            }
        }

        let skel = open.load().map_err(|e| {
            if is_eperm(&e) {
                Error::NotPermitted(e.to_string())
            } else {
                Error::Load {
                    message: e.to_string(),
                }
            }
        })?;

        let mut links = Vec::new();
        for prog in skel.object().progs_mut() {
            let name = prog.name().to_string_lossy().into_owned();
            let Some(st) = probes.iter_mut().find(|p| p.program == name) else {
                continue;
            };
            if st.reason.is_some() {
                continue;
            }
            if let ("lx_sc_enter" | "lx_sc_exit", Some((enter, exit))) = (name.as_str(), sc_ids) {
                let ids = if name == "lx_sc_enter" { enter } else { exit };
                for &id in ids {
                    let link = tracefs::attach_tracepoint_id(&prog, id).map_err(|source| {
                        Error::Attach {
                            probe: st.program,
                            tracepoint: format!("tracepoint id {id}"),
                            source,
                        }
                    })?;
                    links.push(link);
                }
                st.attached = true;
                continue;
            }
            match prog.attach() {
                Ok(link) => {
                    st.attached = true;
                    links.push(link);
                }
                Err(e) if st.required => {
                    return Err(if is_eperm(&e) {
                        Error::NotPermitted(e.to_string())
                    } else {
                        Error::Attach {
                            probe: st.program,
                            tracepoint: st.tracepoint.to_string(),
                            source: e,
                        }
                    });
                }
                Err(e) => st.reason = Some(format!("attaching to {} failed: {e}", st.tracepoint)),
            }
        }

        let handle = |m: &libbpf_rs::MapMut<'_>, name: &'static str| {
            MapHandle::try_from(m).map_err(|source| Error::Map {
                map: name,
                op: "dup",
                source,
            })
        };
        let maps = MetricsMaps::new(
            handle(&skel.maps.stats, "stats")?,
            handle(&skel.maps.tenant_cfg, "tenant_cfg")?,
            handle(&skel.maps.cgroup_tenants, "cgroup_tenants")?,
            handle(&skel.maps.state, "state")?,
            opts.max_tenants,
        );
        let samples = handle(&skel.maps.samples, "samples")?;
        // The skeleton (and its program fds) goes here; the links hold the
        // programs and the handles hold the maps.
        drop(skel);
        Ok((maps, samples, links))
    }

    /// The per-syscall tracepoints: their ids (from tracefs) and attaching
    /// a program to one through a perf event.
    mod tracefs {
        use super::super::IO_SYSCALLS;
        use libbpf_rs::libbpf_sys;
        use std::path::{Path, PathBuf};

        const MOUNTED: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

        fn read_ids(root: &Path) -> Result<(Vec<u32>, Vec<u32>), String> {
            let id = |event: String| -> Result<u32, String> {
                let path = root.join("events/syscalls").join(&event).join("id");
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                text.trim()
                    .parse()
                    .map_err(|e| format!("{}: {e}", path.display()))
            };
            let mut enter = Vec::new();
            let mut exit = Vec::new();
            for name in IO_SYSCALLS {
                enter.push(id(format!("sys_enter_{name}"))?);
                exit.push(id(format!("sys_exit_{name}"))?);
            }
            Ok((enter, exit))
        }

        /// Ids of syscalls:sys_enter_<IO syscall> and sys_exit_<...>, in
        /// IO_SYSCALLS order. Uses a mounted tracefs if there is one;
        /// otherwise mounts one on a private directory just for the lookup
        /// and unmounts it (the ids stay valid: events are not unregistered
        /// by unmounting).
        pub(super) fn syscall_event_ids() -> Result<(Vec<u32>, Vec<u32>), String> {
            for root in MOUNTED {
                if Path::new(root).join("events/syscalls").is_dir() {
                    return read_ids(Path::new(root));
                }
            }
            // Unique per load, so two loads in one process do not share it.
            static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = PathBuf::from(format!(
                "/run/lachesis-tracefs-{}-{seq}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating {}: {e}", dir.display()))?;
            let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
            let target = c(&dir.to_string_lossy());
            // SAFETY: valid C strings; mount(2) does not keep the pointers.
            let rc = unsafe {
                libc::mount(
                    c("nodev").as_ptr(),
                    target.as_ptr(),
                    c("tracefs").as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
            if rc != 0 {
                let e = std::io::Error::last_os_error();
                let _ = std::fs::remove_dir(&dir);
                return Err(format!("mounting tracefs: {e}"));
            }
            let ids = read_ids(&dir);
            // SAFETY: as above.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            let _ = std::fs::remove_dir(&dir);
            ids
        }

        /// One perf event for tracepoint `id` (all CPUs: a tracepoint's BPF
        /// programs run wherever it fires) carrying `prog`; the link owns
        /// and closes the event.
        pub(super) fn attach_tracepoint_id(
            prog: &libbpf_rs::ProgramMut<'_>,
            id: u32,
        ) -> libbpf_rs::Result<libbpf_rs::Link> {
            // SAFETY: zeroed is a valid perf_event_attr; the syscall reads it.
            let mut attr: libbpf_sys::perf_event_attr = unsafe { std::mem::zeroed() };
            attr.type_ = libbpf_sys::PERF_TYPE_TRACEPOINT;
            attr.size = std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32;
            attr.config = u64::from(id);
            // SAFETY: perf_event_open with a valid attr pointer.
            let pfd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const _,
                    -1 as libc::pid_t,
                    0 as libc::c_int,
                    -1 as libc::c_int,
                    libbpf_sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
                )
            } as i32;
            if pfd < 0 {
                return Err(libbpf_rs::Error::from(std::io::Error::last_os_error()));
            }
            prog.attach_perf_event(pfd).inspect_err(|_| {
                // SAFETY: pfd is ours and not owned by a link on failure.
                unsafe { libc::close(pfd) };
            })
        }
    }

    fn pin(maps: &MetricsMaps, dir: &Path) -> Result<Vec<PathBuf>> {
        let err = |message: String| Error::Pin {
            path: dir.to_path_buf(),
            message,
        };
        std::fs::create_dir_all(dir).map_err(|e| err(format!("creating the directory: {e}")))?;
        if !bpffs_magic_ok(dir) {
            return Err(err(
                "not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)".into(),
            ));
        }
        let mut out = Vec::new();
        for (name, h) in PINNED_MAPS.iter().zip(maps.handles_for_pinning()) {
            let path = dir.join(name);
            // A previous agent that died keeps its pins: replace them.
            let _ = std::fs::remove_file(&path);
            let mut h = MapHandle::try_from(h).map_err(|e| err(format!("dup {name}: {e}")))?;
            h.pin(&path)
                .map_err(|e| err(format!("pinning {name}: {e}")))?;
            out.push(path);
        }
        Ok(out)
    }
}
