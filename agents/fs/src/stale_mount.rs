//! A mountpoint left behind by an agent that died (kill -9, OOM): its FUSE mount stays in the
//! mount table with nobody serving it, and every access to it fails with ENOTCONN, so the
//! restarted agent could neither see the directory nor mount over it.
//!
//! ENOTCONN is what tells a dead mount from a live one: a FUSE mount another running agent
//! (or `lachesis-fs mount`) serves answers `stat`, and is never detached here; the caller
//! refuses to mount over it instead.

use std::io;
use std::path::{Path, PathBuf};

/// What is at a mountpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountState {
    /// A directory with no FUSE mount on it.
    Free,
    /// A FUSE mount whose server is gone (ENOTCONN).
    Dead,
    /// A FUSE mount that answers: someone serves it.
    Live,
}

/// The mountpoints of FUSE file systems in `mountinfo` (the text of /proc/self/mountinfo),
/// unescaped.
pub fn fuse_mountpoints(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let dash = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(dash + 1)?;
            let point = fields.get(4)?;
            (*fstype == "fuse" || fstype.starts_with("fuse."))
                .then(|| PathBuf::from(unescape(point)))
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `p` absolute with symlinks resolved in its parent (the mountpoint itself may not answer
/// `stat`), as the mount table names it.
fn as_listed(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match (
        abs.parent().and_then(|d| d.canonicalize().ok()),
        abs.file_name(),
    ) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => abs,
    }
}

/// What is at `mountpoint`.
pub fn state(mountpoint: &Path) -> io::Result<MountState> {
    let listed = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| fuse_mountpoints(&t).contains(&as_listed(mountpoint)))?;
    match std::fs::metadata(mountpoint) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(MountState::Dead),
        Err(e) => Err(e),
        Ok(_) if listed => Ok(MountState::Live),
        Ok(_) => Ok(MountState::Free),
    }
}

/// Detaches the dead FUSE mount at `mountpoint` (lazily: nothing can be using it).
fn detach(mountpoint: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let umount_err = io::Error::last_os_error();
    // Without CAP_SYS_ADMIN the setuid helper may still detach our own mount.
    match std::process::Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(mountpoint)
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        _ => Err(umount_err),
    }
}

/// Makes `mountpoint` usable: a dead FUSE mount there is detached (and logged); a live one is
/// refused. The error says which mountpoint and why.
pub fn clear(mountpoint: &Path) -> Result<(), String> {
    let shown = mountpoint.display();
    match state(mountpoint).map_err(|e| format!("mountpoint {shown}: {e}"))? {
        MountState::Free => Ok(()),
        MountState::Live => Err(format!(
            "mountpoint {shown} is a live FUSE mount: another agent or lachesis-fs serves it; stop that one first"
        )),
        MountState::Dead => {
            detach(mountpoint).map_err(|e| {
                format!("mountpoint {shown}: a dead FUSE mount is left there and detaching it failed: {e}")
            })?;
            tracing::warn!(mountpoint = %shown, "detached the dead FUSE mount a previous agent left (ENOTCONN)");
            match state(mountpoint).map_err(|e| format!("mountpoint {shown}: {e}"))? {
                MountState::Free => Ok(()),
                other => Err(format!(
                    "mountpoint {shown}: still {other:?} after detaching its dead FUSE mount"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_mounts_are_found_in_mountinfo_with_escapes_undone() {
        let text = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
91 30 0:50 / /tmp/a\\040b/mnt rw,nosuid,nodev,relatime shared:60 - fuse.lachesis-fs lachesis rw,user_id=0
92 30 0:51 / /srv/mnt rw - fuse lachesis rw
93 30 0:52 / /srv/fuseblk rw - fuseblk /dev/sdb1 rw
";
        assert_eq!(
            fuse_mountpoints(text),
            [PathBuf::from("/tmp/a b/mnt"), PathBuf::from("/srv/mnt")]
        );
    }

    #[test]
    fn a_plain_directory_is_free_and_clearing_it_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(state(d.path()).unwrap(), MountState::Free);
        clear(d.path()).unwrap();
        assert!(d.path().is_dir());
        let e = clear(&d.path().join("missing")).unwrap_err();
        assert!(e.contains("missing"), "{e}");
    }
}
