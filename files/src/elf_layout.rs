//! The few parts of an ELF file read before its symbols: where a file
//! offset lies in its virtual address space (what a separate debug file's
//! symbols and DWARF are addressed by), and one section's bytes by name
//! (`.gnu_debuglink`, `.gnu_debugdata`).
//!
//! A debug file (`objcopy --only-keep-debug`) keeps the program headers'
//! addresses but not their file offsets, so the translation uses the
//! binary's own `PT_LOAD` headers. Only the headers, the tables and the
//! section asked for are read, each bounded: the file may be anyone's.

use std::fs::File;

use crate::untrusted::read_at_most;
use object::Endianness;
use object::elf::{FileHeader32, FileHeader64, PT_LOAD, SHT_NOBITS};
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};

/// An ELF64 file header (an ELF32 one is shorter).
const HEADER_BYTES: usize = 64;
/// A program or section header table larger than this is not read.
const MAX_TABLE: usize = 256 << 10;
/// A section name table larger than this is not read.
const MAX_NAMES: usize = 256 << 10;

/// The bytes of the section named `name` of the ELF file `file`, if it
/// has one of at most `max` bytes (not `SHT_NOBITS`).
pub fn section(file: &File, name: &[u8], max: usize) -> Option<Vec<u8>> {
    section_at(file, name, max).map(|(_, bytes)| bytes)
}

/// [`section`], with the section's address (`sh_addr`).
pub fn section_at(file: &File, name: &[u8], max: usize) -> Option<(u64, Vec<u8>)> {
    let len = file.metadata().ok()?.len();
    let head = read_at_most(file, 0, len.min(HEADER_BYTES as u64), HEADER_BYTES).ok()?;
    match head.get(4).copied() {
        Some(c) if c == object::elf::ELFCLASS64.0 => {
            section_of::<FileHeader64<Endianness>>(file, &head, name, max)
        }
        Some(c) if c == object::elf::ELFCLASS32.0 => {
            section_of::<FileHeader32<Endianness>>(file, &head, name, max)
        }
        _ => None,
    }
}

fn section_of<H: FileHeader<Endian = Endianness>>(
    file: &File,
    head: &[u8],
    name: &[u8],
    max: usize,
) -> Option<(u64, Vec<u8>)> {
    let header = H::parse(head).ok()?;
    let endian = header.endian().ok()?;
    let shoff: u64 = header.e_shoff(endian).into();
    let shnum = usize::from(header.e_shnum(endian));
    let size = std::mem::size_of::<H::SectionHeader>();
    // 0 with an offset: the count is in section 0; not a file to read.
    if shoff == 0 || shnum == 0 || usize::from(header.e_shentsize(endian)) != size {
        return None;
    }
    let table = read_at_most(file, shoff, (shnum * size) as u64, MAX_TABLE).ok()?;
    let headers = object::pod::slice_from_all_bytes::<H::SectionHeader>(&table).ok()?;
    let names_header = headers.get(usize::from(header.e_shstrndx(endian).index()?))?;
    let names = read_at_most(
        file,
        names_header.sh_offset(endian).into(),
        names_header.sh_size(endian).into(),
        MAX_NAMES,
    )
    .ok()?;
    let wanted = headers.iter().find(|h| {
        let at = h.sh_name(endian) as usize;
        names
            .get(at..)
            .and_then(|n| n.split(|&b| b == 0).next())
            .is_some_and(|n| n == name)
    })?;
    if wanted.sh_type(endian) == SHT_NOBITS {
        return None;
    }
    let bytes = read_at_most(
        file,
        wanted.sh_offset(endian).into(),
        wanted.sh_size(endian).into(),
        max,
    )
    .ok()?;
    Some((wanted.sh_addr(endian).into(), bytes))
}

/// The file name a `.gnu_debuglink` section names (its CRC is not
/// needed: a debug file is used only with the binary's build-id).
pub fn debuglink(file: &File) -> Option<String> {
    let bytes = section(file, b".gnu_debuglink", 4096)?;
    let name = bytes.split(|&b| b == 0).next()?;
    let name = std::str::from_utf8(name).ok()?;
    // A base name, never a path.
    (!name.is_empty() && !name.contains('/') && name != "." && name != "..")
        .then(|| name.to_string())
}

/// One `PT_LOAD` segment: file bytes `[offset, offset + filesz)` at
/// `vaddr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// The loadable segments of an ELF file.
#[derive(Debug, Clone, Default)]
pub struct LoadSegments(Vec<Segment>);

impl LoadSegments {
    /// The `PT_LOAD` headers of `file`; `None` when it is not an ELF file
    /// whose table could be read.
    pub fn read(file: &File) -> Option<Self> {
        let len = file.metadata().ok()?.len();
        let head = read_at_most(file, 0, len.min(HEADER_BYTES as u64), HEADER_BYTES).ok()?;
        match head.get(4).copied() {
            Some(c) if c == object::elf::ELFCLASS64.0 => {
                segments::<FileHeader64<Endianness>>(file, &head)
            }
            Some(c) if c == object::elf::ELFCLASS32.0 => {
                segments::<FileHeader32<Endianness>>(file, &head)
            }
            _ => None,
        }
    }

    /// The virtual address of file offset `offset`, if a segment maps it.
    pub fn virt_of(&self, offset: u64) -> Option<u64> {
        self.0
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.filesz)
            .map(|s| s.vaddr + (offset - s.offset))
    }
}

fn segments<H: FileHeader<Endian = Endianness>>(file: &File, head: &[u8]) -> Option<LoadSegments> {
    let header = H::parse(head).ok()?;
    let endian = header.endian().ok()?;
    let phoff: u64 = header.e_phoff(endian).into();
    let phnum = usize::from(header.e_phnum(endian));
    let size = std::mem::size_of::<H::ProgramHeader>();
    if phoff == 0 || usize::from(header.e_phentsize(endian)) != size {
        return None;
    }
    let table = read_at_most(file, phoff, (phnum * size) as u64, MAX_TABLE).ok()?;
    let headers = object::pod::slice_from_all_bytes::<H::ProgramHeader>(&table).ok()?;
    Some(LoadSegments(
        headers
            .iter()
            .filter(|p| p.p_type(endian) == PT_LOAD)
            .map(|p| Segment {
                offset: p.p_offset(endian).into(),
                filesz: p.p_filesz(endian).into(),
                vaddr: p.p_vaddr(endian).into(),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_this_test_binary_land_where_its_headers_say() {
        use object::{Object, ObjectSegment};
        let exe = std::env::current_exe().unwrap();
        let segs = LoadSegments::read(&File::open(&exe).unwrap()).unwrap();
        let data = std::fs::read(&exe).unwrap();
        let parsed = object::File::parse(&*data).unwrap();
        let text = parsed
            .segments()
            .find(|s| s.file_range().1 > 0x1000)
            .unwrap();
        let (off, _) = text.file_range();
        assert_eq!(segs.virt_of(off + 0x10), Some(text.address() + 0x10));
        assert_eq!(segs.virt_of(u64::MAX - 1), None);
        // Not ELF: nothing.
        let dir = tempfile::tempdir().unwrap();
        let text_file = dir.path().join("t");
        std::fs::write(&text_file, b"#!/bin/sh\n").unwrap();
        assert!(LoadSegments::read(&File::open(&text_file).unwrap()).is_none());
        assert!(section(&File::open(&text_file).unwrap(), b".text", 1).is_none());
    }

    #[test]
    fn sections_are_found_by_name_and_bounded() {
        use object::{Object, ObjectSection};
        let exe = std::env::current_exe().unwrap();
        let data = std::fs::read(&exe).unwrap();
        let parsed = object::File::parse(&*data).unwrap();
        let comment = parsed.section_by_name(".comment").unwrap();
        let file = File::open(&exe).unwrap();
        assert_eq!(
            section(&file, b".comment", 1 << 20).as_deref(),
            Some(comment.data().unwrap())
        );
        assert!(section(&file, b".comment", 1).is_none(), "past the bound");
        assert!(section(&file, b".flightrec-none", 1 << 20).is_none());
        assert!(section(&file, b".bss", 1 << 20).is_none(), "NOBITS");
    }
}
