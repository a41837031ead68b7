//! The files the core opens, as root, where others may have put something first: every
//! file it reads is opened with `open_regular` (or mapped with `map_regular`) and every file
//! it writes is made with `create_private`; no other module opens a file.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use memmap2::Mmap;

/// Readable by its owner only, as everything in a capture: it shows what the machine's threads did.
const PRIVATE: u32 = 0o600;

/// `path` opened for reading if it is a regular file (a link to one is followed); an error
/// otherwise, at once: a FIFO is never waited on (O_NONBLOCK), a device never read, and a
/// terminal never becomes the process's own (O_NOCTTY). (std opens every file O_CLOEXEC.)
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a pipe, device or directory)",
        ));
    }
    Ok(file)
}

/// A regular file (as `open_regular` opens it) mapped whole, read only: its bytes are read
/// where the page cache holds them, never copied. A file cut short while it is mapped ends the
/// process when the bytes it lost are read (SIGBUS), as it ends perf reading its perf.data.
pub fn map_regular(path: &Path) -> io::Result<Mmap> {
    let file = open_regular(path)?;
    // SAFETY: the map is read only and read as bytes; see above for a file cut short meanwhile
    unsafe { Mmap::map(&file) }
}

/// A new file at `path` for writing, readable by its owner only: an error if anything is
/// there, a link planted at the name included (it is never followed), so that nothing
/// another user put there is written. Its mode is set through the open file, whatever the umask.
pub fn create_private(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.set_permissions(Permissions::from_mode(PRIVATE))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::symlink;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("offcpu-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("a scratch directory");
        dir
    }

    #[test]
    fn a_fifo_a_device_and_a_directory_are_refused_without_waiting() {
        let dir = scratch("read");
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.expect("mkfifo runs").success());
        symlink("/dev/zero", dir.join("zero")).expect("a link");
        for path in [fifo, dir.join("zero"), dir.clone()] {
            let error = open_regular(&path).expect_err("not a regular file");
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{path:?}");
        }
        std::fs::write(dir.join("plain"), b"x").expect("a file");
        assert!(open_regular(&dir.join("plain")).is_ok());
        std::fs::remove_dir_all(dir).expect("cleaned up");
    }

    #[test]
    fn a_link_at_a_new_files_name_is_not_written_through() {
        let dir = scratch("write");
        let target = dir.join("target");
        std::fs::write(&target, b"kept").expect("a target");
        symlink(&target, dir.join("link")).expect("a link");
        let error = create_private(&dir.join("link")).expect_err("a link is there");
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&target).expect("the target"), b"kept");
        let mut file = create_private(&dir.join("new")).expect("a new file");
        file.write_all(b"x").expect("written");
        let mode = std::fs::metadata(dir.join("new"))
            .expect("it is there")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, PRIVATE);
        std::fs::remove_dir_all(dir).expect("cleaned up");
    }
}
