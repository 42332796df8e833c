//! The switch's and the agent's own state on disk (journals, logs, state directories, the
//! persisted generation): files 0600 and directories 0700, whatever the umask, because they
//! name tenants' paths and rules and are written by root.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` and its missing parents with mode 0700; existing ones are left alone (a log
/// stage may write into a directory others use too).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// [`create_dir`] for a directory that holds only our state: an existing one is narrowed to
/// 0700 too (one an older version left world-readable).
pub fn create_own_dir(dir: &Path) -> io::Result<()> {
    create_dir(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// `opts` (create, append, ...) opening `path` with mode 0600; an existing file is narrowed
/// to 0600 too (files an older version left world-readable).
pub fn open(opts: &mut OpenOptions, path: &Path) -> io::Result<File> {
    let f = opts.mode(FILE_MODE).open(path)?;
    if f.metadata()?.permissions().mode() & 0o7777 != FILE_MODE {
        f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(f)
}

/// An append-only file of ours, created 0600 if missing.
pub fn open_append(path: &Path) -> io::Result<File> {
    open(OpenOptions::new().create(true).append(true), path)
}

/// Replaces `path` with `bytes` atomically: a crash leaves the old content or the new one,
/// never a torn file (temp file 0600 in the same directory, fsync, rename, fsync of the
/// directory).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let res = (|| {
        let mut f = open(
            OpenOptions::new().write(true).create(true).truncate(true),
            &tmp,
        )?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn files_are_0600_and_dirs_0700_whatever_was_there() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!((mode(&dir), mode(&d.path().join("a"))), (0o700, 0o700));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o755, "a shared directory is left as it is");
        create_own_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);

        let f = dir.join("journal");
        std::fs::write(&f, b"old\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        writeln!(open_append(&f).unwrap(), "new").unwrap();
        assert_eq!(mode(&f), 0o600);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "old\nnew\n");
    }

    #[test]
    fn an_atomic_write_replaces_the_whole_file_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        write_atomic(&p, b"first, longer content").unwrap();
        write_atomic(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        assert_eq!(mode(&p), 0o600);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }
}
