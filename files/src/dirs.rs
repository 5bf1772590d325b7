//! Whether a directory is the daemon's own: one where no one but root (the
//! daemon's user) and one trusted group can create, rename or remove
//! entries, so nothing in it was planted by someone else.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// S_ISVTX: in a directory with it, only an entry's owner may rename or
/// remove it (/tmp).
const STICKY: u32 = 0o1000;

/// Why a directory is not private.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotPrivate {
    /// The directory at fault: the one asked about or one above it.
    pub dir: PathBuf,
    pub reason: String,
}

impl std::fmt::Display for NotPrivate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.dir.display(), self.reason)
    }
}

/// Checks `dir` (or, while it does not exist, the directory it would be
/// created in) and every directory above it: each must belong to root or
/// to `owner`, and be writable by no one else but members of
/// `trusted_group` (or root's group). Directories above `dir` may be
/// writable by others when they have the sticky bit (/tmp): an entry
/// there can be renamed only by its owner.
pub fn check_private(dir: &Path, owner: u32, trusted_group: Option<u32>) -> Result<(), NotPrivate> {
    check(dir, owner, trusted_group, false)
}

/// [`check_private`] with no group trusted, and `dir` itself writable by
/// its owner alone (not even by root's group): for what root reads back
/// as its own, such as the history's segments.
pub fn check_owner_only(dir: &Path, owner: u32) -> Result<(), NotPrivate> {
    check(dir, owner, None, true)
}

fn check(
    dir: &Path,
    owner: u32,
    trusted_group: Option<u32>,
    owner_only: bool,
) -> Result<(), NotPrivate> {
    let mut probe: PathBuf = dir.to_path_buf();
    // The nearest existing directory, followed to what it really is.
    let existing = loop {
        match std::fs::canonicalize(&probe) {
            Ok(p) => break p,
            Err(_) => match probe.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => probe = parent.to_path_buf(),
                _ => return Ok(()),
            },
        }
    };
    let exists = probe == dir;
    for (depth, d) in existing.ancestors().enumerate() {
        let md = std::fs::metadata(d).map_err(|e| NotPrivate {
            dir: d.to_path_buf(),
            reason: format!("cannot be checked: {e}"),
        })?;
        let fault = |reason: String| NotPrivate {
            dir: d.to_path_buf(),
            reason,
        };
        if !md.is_dir() {
            return Err(fault("is not a directory".into()));
        }
        if md.uid() != 0 && md.uid() != owner {
            return Err(fault(format!(
                "belongs to uid {} ({}), not root: that user could plant files there",
                md.uid(),
                user_name(md.uid())
            )));
        }
        let mode = md.mode();
        // The target itself must be private even with the sticky bit:
        // others could still create entries under names the daemon uses.
        let sticky = mode & STICKY != 0 && !(exists && depth == 0);
        if mode & 0o002 != 0 && !sticky {
            return Err(fault(format!(
                "is writable by every user (mode {:04o}): chmod o-w it, or choose another \
                 directory",
                mode & 0o7777
            )));
        }
        let group_ok = (md.gid() == 0 || Some(md.gid()) == trusted_group)
            && !(owner_only && exists && depth == 0);
        if owner_only && exists && depth == 0 && mode & 0o020 != 0 {
            return Err(fault(format!(
                "is writable by group {} (mode {:04o}): no one but its owner may write here; \
                 chmod g-w it",
                group_name(md.gid()),
                mode & 0o7777
            )));
        }
        if mode & 0o020 != 0 && !group_ok && !sticky {
            return Err(fault(format!(
                "is writable by group {} (mode {:04o}), which is not the socket group: chmod \
                 g-w it, or choose another directory",
                group_name(md.gid()),
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| "no such user".into(), |u| u.name)
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid))
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| format!("{} ({gid})", g.name))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn writable_by_others_is_refused_and_a_sticky_parent_is_not() {
        let me = nix::unistd::geteuid().as_raw();
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("out");
        std::fs::create_dir(&dir).unwrap();
        chmod(top.path(), 0o755);
        chmod(&dir, 0o750);
        check_private(&dir, me, None).unwrap();
        // Not there yet: its parent decides.
        check_private(&dir.join("a/b"), me, None).unwrap();

        chmod(&dir, 0o757);
        let e = check_private(&dir, me, None).unwrap_err();
        assert_eq!(e.dir, std::fs::canonicalize(&dir).unwrap());
        assert!(
            e.reason.contains("writable by every user (mode 0757)"),
            "{e}"
        );
        // Sticky does not make the target itself private.
        chmod(&dir, 0o1777);
        assert!(check_private(&dir, me, None).is_err());
        // A sticky, world-writable parent (/tmp) is fine.
        chmod(&dir, 0o750);
        chmod(top.path(), 0o1777);
        check_private(&dir, me, None).unwrap();
        // Without the sticky bit anyone could rename `out` away.
        chmod(top.path(), 0o777);
        let e = check_private(&dir, me, None).unwrap_err();
        assert_eq!(e.dir, std::fs::canonicalize(top.path()).unwrap());
        assert!(check_private(&dir.join("new"), me, None).is_err());
        chmod(top.path(), 0o755);
    }

    #[test]
    fn a_group_may_write_only_if_it_is_the_trusted_one() {
        let me = nix::unistd::geteuid().as_raw();
        let top = tempfile::tempdir().unwrap();
        let gid = std::fs::metadata(top.path()).unwrap().gid();
        chmod(top.path(), 0o770);
        let trusted = check_private(top.path(), me, Some(gid));
        let untrusted = check_private(top.path(), me, Some(gid + 1));
        if gid == 0 {
            // Root's own group is always trusted.
            assert!(trusted.is_ok() && untrusted.is_ok());
        } else {
            assert!(trusted.is_ok());
            assert!(untrusted.unwrap_err().reason.contains("writable by group"));
        }
    }

    #[test]
    fn an_owner_only_directory_refuses_every_group_even_roots() {
        let me = nix::unistd::geteuid().as_raw();
        let top = tempfile::tempdir().unwrap();
        let dir = top.path().join("history");
        std::fs::create_dir(&dir).unwrap();
        chmod(top.path(), 0o755);
        chmod(&dir, 0o750);
        check_owner_only(&dir, me).unwrap();
        // What check_private lets through when the group is root's or the
        // trusted one.
        chmod(&dir, 0o770);
        let e = check_owner_only(&dir, me).unwrap_err();
        assert!(e.reason.contains("no one but its owner"), "{e}");
        assert_eq!(e.dir, dir);
        // Not yet created: its parent is checked as usual.
        check_owner_only(&top.path().join("later"), me).unwrap();
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        let top = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        // Asked on behalf of another owner, our own directory is foreign
        // (unless we are root, whose directories are always trusted).
        let r = check_private(top.path(), me + 1, None);
        if me == 0 {
            assert!(r.is_ok());
        } else {
            assert!(r.unwrap_err().reason.contains("not root"));
        }
    }
}
