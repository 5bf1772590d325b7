//! Build-ids of mapped files, for MMAP2 records the kernel wrote without
//! one (kernels before 5.12, or a note the kernel could not read at map
//! time). The file is read when the record is drained, never at dump time,
//! and each file once (cached by device, inode and path).
//!
//! The paths come from processes the daemon does not trust: a file is only
//! read if, opened without blocking and without following a final symlink,
//! it is a regular file on the device and inode the kernel reported.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::sync::Arc;

use crate::abi::{misc, record_type};

use super::state::BuildId;

/// Entries kept before the cache starts over (bounds its memory).
const MAX_CACHED: usize = 8192;
/// MMAP2 body offsets (after the 8-byte header).
const MMAP2_DEV: usize = 40;
const MMAP2_PROT: usize = 64;
const MMAP2_FILENAME: usize = 72;
const PROT_EXEC: u32 = 4;

/// The GNU build-id of an ELF file, reading only its headers and notes.
pub fn elf_build_id(file: &File) -> Option<BuildId> {
    use object::Object;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    BuildId::new(elf.build_id().ok()??)
}

/// Opens `path` for reading only if it is the regular file `(maj, min,
/// ino)`.
pub fn open_mapped_file(path: &str, maj: u32, min: u32, ino: u64) -> Option<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    let dev = meta.dev();
    let same = meta.file_type().is_file()
        && meta.ino() == ino
        && nix::sys::stat::major(dev) as u32 == maj
        && nix::sys::stat::minor(dev) as u32 == min;
    same.then_some(file)
}

type Key = (u32, u32, u64, u64, Arc<str>);

/// Build-ids already read, by `(maj, min, ino, ino_generation, path)`.
#[derive(Debug, Default)]
pub struct BuildIdCache {
    known: HashMap<Key, Option<BuildId>>,
}

impl BuildIdCache {
    /// The build-id of the file an MMAP2 record names (by its device and
    /// inode), read once.
    pub fn lookup(
        &mut self,
        path: &str,
        maj: u32,
        min: u32,
        ino: u64,
        gen_: u64,
    ) -> Option<BuildId> {
        let key: Key = (maj, min, ino, gen_, path.into());
        if let Some(known) = self.known.get(&key) {
            return *known;
        }
        let id = open_mapped_file(path, maj, min, ino).and_then(|f| elf_build_id(&f));
        if self.known.len() >= MAX_CACHED {
            self.known.clear();
        }
        self.known.insert(key, id);
        id
    }

    /// Gives an executable file MMAP2 record without a build-id the
    /// file's build-id, in place, as the kernel writes it (MISC_MMAP_BUILD_ID:
    /// u8 size, 3 reserved bytes, 20 id bytes where maj/min/ino/generation
    /// were; the record keeps its size). Returns whether it did.
    pub fn fill_mmap2(&mut self, record: &mut [u8]) -> bool {
        let u16_at = |r: &[u8], at: usize| u16::from_le_bytes([r[at], r[at + 1]]);
        let u32_at = |r: &[u8], at: usize| u32::from_le_bytes(r[at..at + 4].try_into().unwrap());
        let u64_at = |r: &[u8], at: usize| u64::from_le_bytes(r[at..at + 8].try_into().unwrap());
        if record.len() <= MMAP2_FILENAME
            || u32_at(record, 0) != record_type::MMAP2
            || u16_at(record, 4) & misc::MMAP_BUILD_ID != 0
            || u32_at(record, MMAP2_PROT) & PROT_EXEC == 0
        {
            return false;
        }
        let size = usize::from(u16_at(record, 6)).min(record.len());
        let name = &record[MMAP2_FILENAME..size];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let Ok(path) = std::str::from_utf8(name) else {
            return false;
        };
        if !path.starts_with('/') {
            return false;
        }
        let (maj, min) = (u32_at(record, MMAP2_DEV), u32_at(record, MMAP2_DEV + 4));
        let (ino, gen_) = (
            u64_at(record, MMAP2_DEV + 8),
            u64_at(record, MMAP2_DEV + 16),
        );
        let Some(id) = self.lookup(path, maj, min, ino, gen_) else {
            return false;
        };
        let misc_bits = u16_at(record, 4) | misc::MMAP_BUILD_ID;
        record[4..6].copy_from_slice(&misc_bits.to_le_bytes());
        let area = &mut record[MMAP2_DEV..MMAP2_DEV + 24];
        area.fill(0);
        area[0] = id.as_bytes().len() as u8;
        area[4..4 + id.as_bytes().len()].copy_from_slice(id.as_bytes());
        true
    }

    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracking::record::{TrackingRecord, build, parse};
    use crate::tracking::state::MapState;

    fn own_exe() -> (String, std::fs::Metadata) {
        let path = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        (path.to_str().unwrap().to_string(), meta)
    }

    /// The build-id as `readelf -n` would print it, read independently
    /// from the ELF section headers by the object crate over the whole file.
    fn reference_build_id(path: &str) -> Vec<u8> {
        use object::Object;
        let data = std::fs::read(path).unwrap();
        object::File::parse(&*data)
            .unwrap()
            .build_id()
            .unwrap()
            .unwrap()
            .to_vec()
    }

    #[test]
    fn an_mmap2_record_of_this_test_binary_gets_its_build_id() {
        let (path, meta) = own_exe();
        let expected = reference_build_id(&path);
        let map = MapState {
            start: 0x1000,
            len: 0x2000,
            prot: PROT_EXEC | 1,
            flags: 2,
            maj: nix::sys::stat::major(meta.dev()) as u32,
            min: nix::sys::stat::minor(meta.dev()) as u32,
            ino: meta.ino(),
            filename: path.as_str().into(),
            ..MapState::default()
        };
        let mut rec = build::mmap2(7, 7, &map, 99);
        let before = rec.len();
        let mut cache = BuildIdCache::default();
        assert!(cache.fill_mmap2(&mut rec));
        assert_eq!(rec.len(), before);
        let parsed = parse(&rec).unwrap();
        let TrackingRecord::Mmap { map: got, .. } = parsed.record else {
            panic!("not an mmap: {parsed:?}")
        };
        assert_eq!(got.build_id.unwrap().as_bytes(), expected);
        assert_eq!(
            (got.start, got.len, &*got.filename),
            (0x1000, 0x2000, path.as_str())
        );
        assert_eq!(parsed.time, 99, "the trailer is untouched");
        // Once filled, a record is left alone; the file was read once.
        assert!(!cache.fill_mmap2(&mut rec));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_file_that_is_not_the_mapped_inode_is_not_read() {
        let (path, meta) = own_exe();
        let mut cache = BuildIdCache::default();
        let maj = nix::sys::stat::major(meta.dev()) as u32;
        let min = nix::sys::stat::minor(meta.dev()) as u32;
        assert_eq!(cache.lookup(&path, maj, min, meta.ino() + 1, 0), None);
        // A symlink to the right file is not followed.
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(
            cache.lookup(link.to_str().unwrap(), maj, min, meta.ino(), 0),
            None
        );
        // A FIFO does not block the drain.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(cache.lookup(fifo.to_str().unwrap(), 0, 0, 0, 0), None);
        assert!(cache.lookup(&path, maj, min, meta.ino(), 0).is_some());
    }
}
