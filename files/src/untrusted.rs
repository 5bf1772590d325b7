//! Opening and reading a file whose path someone else chose (a mapped
//! file a process named, an entry of a directory others could write).
//!
//! `open` itself must not wait: `O_NONBLOCK` makes a FIFO or a device open
//! at once (and is harmless on a regular file), `O_NOCTTY` keeps a terminal
//! from becoming ours, `O_NOFOLLOW` refuses a planted symlink. The file is
//! then used only if `fstat` says it is a regular file, and read in pieces
//! whose size the caller bounds, never by the file's own account of itself.
//! (A file on a file system that never answers, such as a stuck FUSE
//! mount, can still block a read: callers that must not wait read on a
//! worker with a deadline.)

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Whether the last component of the path may be a symbolic link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Refuse it (ELOOP): the path must name the file itself.
    Refuse,
    /// Follow it: for the kernel's own links such as
    /// `/proc/PID/map_files/RANGE`.
    Follow,
}

/// Opens `path` read-only without blocking, and returns it with its
/// metadata only if it is a regular file (else `InvalidInput`, naming
/// what it is).
pub fn open_regular(path: &Path, links: Links) -> io::Result<(File, Metadata)> {
    let mut flags = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY;
    if links == Links::Refuse {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)?;
    let md = file.metadata()?;
    if !md.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file ({})", path.display(), kind(&md)),
        ));
    }
    Ok((file, md))
}

/// Opens `rel` under the directory `dir` read-only without blocking, as
/// [`open_regular`] does, resolving no symbolic link at all and never
/// leaving `dir` (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`):
/// for a path inside another process's root (`/proc/PID/root`), where an
/// absolute link would otherwise lead into this process's own tree. `dir`
/// itself may be a link (the kernel's `/proc/PID/root`).
pub fn open_regular_beneath(dir: &Path, rel: &Path) -> io::Result<(File, Metadata)> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, open, openat2};
    use nix::sys::stat::Mode;
    let root = open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .resolve(
            ResolveFlag::RESOLVE_BENEATH
                | ResolveFlag::RESOLVE_NO_SYMLINKS
                | ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
    let file = File::from(openat2(&root, rel, how)?);
    let md = file.metadata()?;
    if !md.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file ({})",
                dir.join(rel).display(),
                kind(&md)
            ),
        ));
    }
    Ok((file, md))
}

/// What a file that is not regular is, in words.
pub fn kind(md: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Reads `len` bytes at `offset`, refusing (`InvalidData`) when `len` is
/// more than `max`.
pub fn read_at_most(file: &File, offset: u64, len: u64, max: usize) -> io::Result<Vec<u8>> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{len} bytes at offset {offset} is more than the {max} read at most"),
            )
        })?;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// Reads a whole small file from where it stands: more than `max` bytes
/// is an error (`InvalidData`), read no further than that.
pub fn read_small(file: &mut File, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    file.by_ref().take(limit).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {max} bytes"),
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_symlinks_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = open_regular(&fifo, Links::Follow).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        let file = dir.path().join("file");
        std::fs::write(&file, b"0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(
            open_regular(&link, Links::Refuse)
                .unwrap_err()
                .raw_os_error(),
            Some(nix::libc::ELOOP)
        );
        assert!(open_regular(&link, Links::Follow).is_ok());
        assert!(open_regular(dir.path(), Links::Refuse).is_err());
        let (f, md) = open_regular(&file, Links::Refuse).unwrap();
        assert_eq!(md.len(), 10);
        assert_eq!(read_at_most(&f, 2, 3, 3).unwrap(), b"234");
        assert!(read_at_most(&f, 0, 4, 3).is_err());
        assert!(read_at_most(&f, 8, 3, 3).is_err(), "past the end");
        let (mut f, _) = open_regular(&file, Links::Refuse).unwrap();
        assert!(read_small(&mut f, 9).is_err());
        let (mut f, _) = open_regular(&file, Links::Refuse).unwrap();
        assert_eq!(read_small(&mut f, 10).unwrap(), b"0123456789");
    }

    #[test]
    fn beneath_a_root_no_link_is_followed_and_nothing_outside_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::write(root.join("tmp/map"), b"1 2 f\n").unwrap();
        let (_, md) = open_regular_beneath(&root, Path::new("tmp/map")).unwrap();
        assert_eq!(md.len(), 6);
        // An absolute link (planted by the process whose root this is)
        // would name this process's file: refused, as is any link.
        std::os::unix::fs::symlink("/etc/hostname", root.join("tmp/abs")).unwrap();
        std::os::unix::fs::symlink("map", root.join("tmp/rel")).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink("real", root.join("linkdir")).unwrap();
        for planted in ["tmp/abs", "tmp/rel", "linkdir/x", "../root/tmp/map"] {
            assert!(
                open_regular_beneath(&root, Path::new(planted)).is_err(),
                "{planted}"
            );
        }
        let fifo = root.join("tmp/fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = open_regular_beneath(&root, Path::new("tmp/fifo")).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
    }
}
