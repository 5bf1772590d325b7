//! PSI conditions: the kernel's pressure-stall trigger interface. Writing
//! `some 100000 1000000` to /proc/pressure/cpu (or a cgroup's
//! cpu.pressure) arms a trigger that lives as long as the file stays open;
//! poll(2) reports POLLPRI when tasks stalled that long within the window,
//! and POLLERR when the file went away (the cgroup was removed).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use flightrec_config::PsiSpec;

/// Where system-wide pressure files are.
pub const PROC_PRESSURE: &str = "/proc/pressure";

/// The pressure file for `spec`: `/proc/pressure/<res>`, or
/// `<cgroup>/<res>.pressure`.
pub fn pressure_path(spec: &PsiSpec, cgroup: Option<&Path>) -> PathBuf {
    match cgroup {
        Some(dir) => dir.join(format!("{}.pressure", spec.resource.as_str())),
        None => Path::new(PROC_PRESSURE).join(spec.resource.as_str()),
    }
}

/// An armed PSI trigger.
pub struct PsiTrigger {
    pub file: File,
    pub path: PathBuf,
}

/// Opens the pressure file and arms the trigger. The error says what to
/// check (a kernel without PSI, a cgroup that does not exist).
pub fn arm(spec: &PsiSpec, cgroup: Option<&Path>) -> Result<PsiTrigger, String> {
    let path = pressure_path(spec, cgroup);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound if cgroup.is_none() => format!(
                "{} does not exist: this kernel has no pressure stall information \
                 (CONFIG_PSI, or psi=0 on the kernel command line)",
                path.display()
            ),
            std::io::ErrorKind::NotFound => format!(
                "{} does not exist: is the cgroup a cgroup v2 directory with the {} \
                 controller?",
                path.display(),
                spec.resource.as_str()
            ),
            _ => format!("cannot open {}: {e}", path.display()),
        })?;
    // The kernel turns the last byte written into the string's end: send
    // the NUL too, as Documentation/accounting/psi.rst does.
    let mut text = spec.kernel_text().into_bytes();
    text.push(0);
    file.write_all(&text).map_err(|e| {
        format!(
            "{} refused the trigger {:?}: {e}",
            path.display(),
            spec.kernel_text()
        )
    })?;
    Ok(PsiTrigger { file, path })
}
