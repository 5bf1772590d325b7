//! The history's directory and files.

use std::fs::File;
use std::io;
use std::path::Path;

/// Creates `dir` (and its parents) 0750 with the group, as the store does
/// for its own directory.
pub(super) fn create_dir(dir: &Path, group: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Ok(md) if md.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(io::Error::other(format!(
                "{} exists and is not a directory",
                dir.display()
            )));
        }
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)?;
    let d = File::open(dir)?;
    d.set_permissions(std::fs::Permissions::from_mode(0o750))?;
    if let Some(gid) = group {
        std::os::unix::fs::fchown(&d, None, Some(gid))?;
    }
    Ok(())
}

pub(super) fn remove_segment(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(segment = %path.display(), "removing a history segment failed: {e}");
    }
}
