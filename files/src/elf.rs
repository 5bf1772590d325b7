//! The GNU build-id of an ELF file, reading a few KiB of it at most.
//!
//! A build-id note is 36 bytes; the file it is in may be anyone's (a
//! process maps what it likes, and a sparse file can claim a note section
//! of 4 GiB). So the file header, the program header table (or, without a
//! `PT_NOTE` there, the section header table) and each note are read
//! separately, each piece bounded, [`MAX_READ`] bytes in all; what does not
//! fit is treated as having no build-id. The notes are parsed by the
//! `object` crate's `NoteIterator`, the one note parser of the project.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use object::Endianness;
use object::elf::{FileHeader32, FileHeader64, NT_GNU_BUILD_ID, PT_NOTE, SHT_NOTE};
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader};

use crate::untrusted::{Links, open_regular, read_at_most};

/// Bytes read from one file, at most.
pub const MAX_READ: usize = 16 << 10;
/// A program or section header table larger than this is not read.
const MAX_TABLE: usize = 8 << 10;
/// A note segment or section larger than this is not read.
const MAX_NOTES: usize = 4 << 10;
/// An ELF64 file header (an ELF32 one is shorter).
const HEADER_BYTES: usize = 64;

/// What is left of the bytes one lookup may read.
struct Budget<'a> {
    file: &'a File,
    left: usize,
}

impl Budget<'_> {
    fn read(&mut self, offset: u64, len: u64, max: usize) -> Option<Vec<u8>> {
        let bytes = read_at_most(self.file, offset, len, max.min(self.left)).ok()?;
        self.left -= bytes.len();
        Some(bytes)
    }
}

/// How long [`copy_if_build_id`] waits for a file's bytes.
pub const READ_DEADLINE: Duration = Duration::from_secs(10);

/// A copy of the regular file at `path` (opened without blocking), in an
/// anonymous temporary file read from its start, if its build-id is
/// `wanted` and it is at most `max` bytes; `None` otherwise, or when its
/// reads take longer than [`READ_DEADLINE`] (a file system that never
/// answers). Copied a piece at a time: a large file costs disk, never
/// memory. The reads run on a thread of their own, which a hung read
/// leaves behind until the process ends.
pub fn copy_if_build_id(path: &Path, links: Links, wanted: &[u8], max: u64) -> Option<File> {
    let (file, md) = open_regular(path, links).ok()?;
    if md.len() > max {
        return None;
    }
    let wanted = wanted.to_vec();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let copy = (build_id(&file).as_deref() == Some(&wanted[..]))
            .then(|| copy_whole(file, md.len()))
            .and_then(Result::ok);
        let _ = tx.send(copy);
    });
    rx.recv_timeout(READ_DEADLINE).ok().flatten()
}

fn copy_whole(mut file: File, len: u64) -> io::Result<File> {
    use std::io::Seek;
    let mut copy = tempfile::tempfile()?;
    io::copy(&mut Read::by_ref(&mut file).take(len), &mut copy)?;
    copy.rewind()?;
    Ok(copy)
}

/// The GNU build-id of `file` (an ELF file of either class and byte
/// order), or `None`.
pub fn build_id(file: &File) -> Option<Vec<u8>> {
    let len = file.metadata().ok()?.len();
    let mut budget = Budget {
        file,
        left: MAX_READ,
    };
    let head = budget.read(0, len.min(HEADER_BYTES as u64), HEADER_BYTES)?;
    // e_ident[EI_CLASS], the fifth byte.
    match head.get(4).copied() {
        Some(c) if c == object::elf::ELFCLASS64.0 => {
            build_id_of::<FileHeader64<Endianness>>(&head, budget)
        }
        Some(c) if c == object::elf::ELFCLASS32.0 => {
            build_id_of::<FileHeader32<Endianness>>(&head, budget)
        }
        _ => None,
    }
}

fn build_id_of<H: FileHeader<Endian = Endianness>>(
    head: &[u8],
    mut budget: Budget,
) -> Option<Vec<u8>> {
    let header = H::parse(head).ok()?;
    let endian = header.endian().ok()?;
    let phoff: u64 = header.e_phoff(endian).into();
    let phnum = usize::from(header.e_phnum(endian));
    let ph_size = std::mem::size_of::<H::ProgramHeader>();
    // 0xffff (PN_XNUM) means more headers than fit: not a file to read.
    if phoff != 0
        && (1..0xffff).contains(&phnum)
        && usize::from(header.e_phentsize(endian)) == ph_size
        && let Some(table) = budget.read(phoff, (phnum * ph_size) as u64, MAX_TABLE)
        && let Ok(headers) = object::pod::slice_from_all_bytes::<H::ProgramHeader>(&table)
    {
        for ph in headers.iter().filter(|p| p.p_type(endian) == PT_NOTE) {
            let notes = budget.read(
                ph.p_offset(endian).into(),
                ph.p_filesz(endian).into(),
                MAX_NOTES,
            );
            if let Some(id) = notes.and_then(|n| gnu_build_id::<H>(endian, ph.p_align(endian), &n))
            {
                return Some(id);
            }
        }
    }
    let shoff: u64 = header.e_shoff(endian).into();
    let shnum = usize::from(header.e_shnum(endian));
    let sh_size = std::mem::size_of::<H::SectionHeader>();
    // 0 with an offset means the count is in section 0: not a file to read.
    if shoff == 0 || shnum == 0 || usize::from(header.e_shentsize(endian)) != sh_size {
        return None;
    }
    let table = budget.read(shoff, (shnum * sh_size) as u64, MAX_TABLE)?;
    let headers = object::pod::slice_from_all_bytes::<H::SectionHeader>(&table).ok()?;
    for sh in headers.iter().filter(|s| s.sh_type(endian) == SHT_NOTE) {
        let notes = budget.read(
            sh.sh_offset(endian).into(),
            sh.sh_size(endian).into(),
            MAX_NOTES,
        );
        if let Some(id) = notes.and_then(|n| gnu_build_id::<H>(endian, sh.sh_addralign(endian), &n))
        {
            return Some(id);
        }
    }
    None
}

/// The GNU build-id among the notes in `data` (aligned to `align`).
fn gnu_build_id<H: FileHeader<Endian = Endianness>>(
    endian: Endianness,
    align: H::Word,
    data: &[u8],
) -> Option<Vec<u8>> {
    let mut notes = NoteIterator::<H>::new(endian, align, data).ok()?;
    while let Ok(Some(note)) = notes.next() {
        if note.name() == b"GNU"
            && note.n_type(endian) == NT_GNU_BUILD_ID
            && !note.desc().is_empty()
        {
            return Some(note.desc().to_vec());
        }
    }
    None
}

/// The GNU build-id among ELF notes laid end to end in this machine's byte
/// order, 4-aligned: the format of `/sys/kernel/notes` and
/// `/sys/module/*/notes/.note.gnu.build-id`.
pub fn build_id_in_notes(notes: &[u8]) -> Option<Vec<u8>> {
    gnu_build_id::<FileHeader64<Endianness>>(Endianness::default(), 4, notes)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// The build-id as `readelf -n` would print it, read by the object
    /// crate over the whole file.
    fn reference_build_id(path: &std::path::Path) -> Vec<u8> {
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
    fn this_test_binary_has_the_build_id_readelf_shows() {
        let exe = std::env::current_exe().unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(build_id(&file), Some(reference_build_id(&exe)));
    }

    /// An ELF64 header with no program headers and one SHT_NOTE section
    /// of `note_size` bytes at `note_at`, holding a build-id note first.
    fn sparse_elf(note_at: u64, note_size: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = object::elf::ELFCLASS64.0;
        h[5] = object::elf::ELFDATA2LSB.0;
        h[6] = 1;
        h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        h[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[40..48].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        h[60..62].copy_from_slice(&2u16.to_le_bytes()); // e_shnum
        let mut sections = vec![0u8; 128]; // section 0 is null
        let s = &mut sections[64..];
        s[4..8].copy_from_slice(&SHT_NOTE.0.to_le_bytes());
        s[24..32].copy_from_slice(&note_at.to_le_bytes());
        s[32..40].copy_from_slice(&note_size.to_le_bytes());
        s[48..56].copy_from_slice(&4u64.to_le_bytes());
        h.extend_from_slice(&sections);
        h
    }

    fn note(id: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&4u32.to_le_bytes());
        n.extend_from_slice(&(id.len() as u32).to_le_bytes());
        n.extend_from_slice(&NT_GNU_BUILD_ID.0.to_le_bytes());
        n.extend_from_slice(b"GNU\0");
        n.extend_from_slice(id);
        n
    }

    #[test]
    fn a_small_note_section_is_read_and_a_huge_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small");
        let mut bytes = sparse_elf(192, 36);
        bytes.extend_from_slice(&note(&[7; 20]));
        std::fs::write(&small, &bytes).unwrap();
        assert_eq!(build_id(&File::open(&small).unwrap()), Some(vec![7; 20]));

        // A sparse 4 GiB note section: refused after reading 192 bytes.
        let huge = dir.path().join("huge");
        let mut f = File::create(&huge).unwrap();
        f.write_all(&sparse_elf(192, 4 << 30)).unwrap();
        f.write_all(&note(&[7; 20])).unwrap();
        f.set_len(192 + (4 << 30)).unwrap();
        assert_eq!(build_id(&File::open(&huge).unwrap()), None);
        // Not ELF, or cut short: no build-id.
        std::fs::write(dir.path().join("text"), b"#!/bin/sh\n").unwrap();
        assert_eq!(
            build_id(&File::open(dir.path().join("text")).unwrap()),
            None
        );
        std::fs::write(dir.path().join("cut"), &bytes[..100]).unwrap();
        assert_eq!(build_id(&File::open(dir.path().join("cut")).unwrap()), None);
    }

    #[test]
    fn build_ids_are_found_among_kernel_notes() {
        // /sys/kernel/notes of a 6.x kernel: a Xen note, then the build-id.
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 6u32, vec![1u8; 6]),
            (&b"GNU\0"[..], 3, (1..=20).collect()),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&kind.to_ne_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(&desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(build_id_in_notes(&notes), Some((1..=20).collect()));
        assert_eq!(build_id_in_notes(&notes[..notes.len() - 4]), None);
        assert_eq!(build_id_in_notes(&notes[..20]), None);
    }
}
