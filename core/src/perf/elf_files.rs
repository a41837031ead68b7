//! Where the files a capture mapped are found, as perf finds them: at their path, in
//! perf's build-id cache (`$PERF_BUILDID_DIR`, else `~/.debug`), and their separate debug
//! files by build id (Debian's -dbg and -dbgsym packages, or perf's cache).

use std::fs::File;
use std::ops::Range;
use std::path::PathBuf;

use object::{ReadCache, ReadRef};

/// The most of a mapped file read at once, or decompressed (a section: the largest symbol and unwind tables
/// are tens of MB), for a sparse file's section headers may ask for any size its holes allow.
pub const MAX_READ: u64 = 512 << 20;

/// A mapped file, read through object's cache (which refuses what lies past the file's end)
/// MAX_READ bytes at a time at most.
#[derive(Clone, Copy)]
pub struct Bounded<'a>(pub &'a ReadCache<File>);

impl<'a> ReadRef<'a> for Bounded<'a> {
    fn len(self) -> Result<u64, ()> {
        self.0.len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        if size > MAX_READ {
            return Err(());
        }
        self.0.read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        self.0.read_bytes_at_until(range, delimiter) // object reads 4096 bytes at most
    }
}

/// The copies of a mapped file to read, in perf's order: the file at its path (when it is
/// one on disk), then those in perf's build-id cache.
pub fn copies(on_disk: Option<PathBuf>, build_id: Option<&[u8]>) -> Vec<PathBuf> {
    let cached = build_id.map(perf_cache_copies).unwrap_or_default();
    on_disk.into_iter().chain(cached).collect()
}

/// The copies of a file perf keeps in its build-id cache: the ELF file, or the vdso.
fn perf_cache_copies(build_id: &[u8]) -> Vec<PathBuf> {
    perf_build_id_dir(build_id)
        .map(|dir| vec![dir.join("elf"), dir.join("vdso")])
        .unwrap_or_default()
}

/// Where a file's separate debug file may be, by its build id, in the order perf looks.
pub fn debug_files(build_id: &[u8]) -> Vec<PathBuf> {
    let Some((dir, rest)) = build_id_path(build_id) else {
        return vec![];
    };
    let system = PathBuf::from(format!("/usr/lib/debug/.build-id/{dir}/{rest}.debug"));
    let perf_cache = perf_build_id_dir(build_id).map(|dir| dir.join("debug"));
    std::iter::once(system).chain(perf_cache).collect()
}

/// perf's build-id cache entry, `~/.debug/.build-id/xx/rest` (a link to a folder).
fn perf_build_id_dir(build_id: &[u8]) -> Option<PathBuf> {
    let (dir, rest) = build_id_path(build_id)?;
    let cache = match std::env::var_os("PERF_BUILDID_DIR").filter(|dir| !dir.is_empty()) {
        Some(cache) => PathBuf::from(cache),
        None => std::env::home_dir()?.join(".debug"),
    };
    Some(cache.join(".build-id").join(dir).join(rest))
}

/// A build id in hex split after its first byte, as the build-id folders name files.
fn build_id_path(build_id: &[u8]) -> Option<(String, String)> {
    let hex: String = build_id.iter().map(|byte| format!("{byte:02x}")).collect();
    let rest = hex.get(2..).filter(|rest| !rest.is_empty())?;
    Some((hex.get(..2)?.to_owned(), rest.to_owned()))
}

/// perf pads the build ids it records with zeros (to 20 bytes).
pub fn same_build_id(recorded: &[u8], actual: &[u8]) -> bool {
    let padding = recorded.get(actual.len()..).unwrap_or(&[1]);
    recorded.starts_with(actual) && padding.iter().all(|&byte| byte == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_ids_match_through_perfs_padding() {
        assert!(same_build_id(&[0xab, 0xcd, 0, 0], &[0xab, 0xcd]));
        assert!(!same_build_id(&[0xab, 0xcd, 0, 1], &[0xab, 0xcd]));
        assert!(!same_build_id(&[0xab], &[0xab, 0xcd]));
        assert!(!same_build_id(&[0xab, 0xce], &[0xab, 0xcd]));
    }

    #[test]
    fn build_id_paths_split_after_the_first_byte() {
        let (dir, rest) = build_id_path(&[0x93, 0xac, 0x61]).expect("three bytes");
        assert_eq!((dir.as_str(), rest.as_str()), ("93", "ac61"));
        assert_eq!(build_id_path(&[0x93]), None);
    }
}
