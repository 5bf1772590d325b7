//! PSI conditions: the kernel's pressure-stall trigger interface. Writing
//! `some 100000 1000000` to /proc/pressure/cpu (or a cgroup's
//! cpu.pressure) arms a trigger that lives as long as the file stays open;
//! poll(2) reports POLLPRI when tasks stalled that long within the window,
//! and POLLERR when the file went away (the cgroup was removed). A
//! trigger with a `cgroup` glob arms the file of each cgroup it names (at
//! most [`MAX_TRIGGER_CGROUPS`]), and of those that appear later.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use flightrec_config::{MAX_TRIGGER_CGROUPS, PsiSpec};

use super::cgroups::{CgroupGlob, RESCAN, dir_of};

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

/// One armed pressure file.
pub struct PsiFile {
    pub file: File,
    pub path: PathBuf,
    /// Its cgroup, relative to the cgroup2 root; None: /proc/pressure.
    pub cgroup: Option<String>,
    /// POLLERR came (its cgroup was removed): not polled any more.
    pub broken: bool,
}

/// The cgroups a PSI trigger's glob names, and where.
pub struct PsiCgroups {
    pub glob: CgroupGlob,
    pub mount: PathBuf,
    /// Cgroups whose file could not be armed (not tried again).
    refused: HashSet<String>,
    /// The glob named more than the files armed (said once).
    over: bool,
    pub next_scan: Instant,
}

/// The files of one PSI trigger.
pub struct PsiWatch {
    pub spec: PsiSpec,
    pub files: Vec<PsiFile>,
    /// None: the system-wide file.
    pub cgroups: Option<PsiCgroups>,
}

impl PsiWatch {
    /// Arms /proc/pressure's file, or the file of each cgroup `glob` names
    /// under the cgroup2 `mount`: more than [`MAX_TRIGGER_CGROUPS`], a
    /// literal path that does not exist or a file that refuses the
    /// trigger are errors.
    pub fn open(
        spec: PsiSpec,
        glob: Option<(CgroupGlob, PathBuf)>,
        now: Instant,
    ) -> Result<Self, String> {
        let Some((glob, mount)) = glob else {
            let armed = arm(&spec, None)?;
            return Ok(PsiWatch {
                spec,
                files: vec![PsiFile {
                    file: armed.file,
                    path: armed.path,
                    cgroup: None,
                    broken: false,
                }],
                cgroups: None,
            });
        };
        let found = glob.expand(&mount, MAX_TRIGGER_CGROUPS);
        if found.len() > MAX_TRIGGER_CGROUPS {
            return Err(format!(
                "cgroup {} names more than {MAX_TRIGGER_CGROUPS} cgroups under {}: narrow the glob",
                glob.text(),
                mount.display()
            ));
        }
        if found.is_empty() {
            if glob.is_literal() {
                // Says which file is missing, as before globs.
                arm(&spec, Some(&dir_of(&mount, glob.text())))?;
            }
            tracing::info!(
                "cgroup {} names no cgroup under {} yet: watched as they appear",
                glob.text(),
                mount.display()
            );
        }
        let mut files = Vec::with_capacity(found.len());
        for cgroup in found {
            let armed = arm(&spec, Some(&dir_of(&mount, &cgroup)))?;
            files.push(PsiFile {
                file: armed.file,
                path: armed.path,
                cgroup: Some(cgroup),
                broken: false,
            });
        }
        Ok(PsiWatch {
            spec,
            files,
            cgroups: Some(PsiCgroups {
                glob,
                mount,
                refused: HashSet::new(),
                over: false,
                next_scan: now + RESCAN,
            }),
        })
    }

    /// Expands the glob again: files of cgroups gone (or broken) are
    /// closed, cgroups new are armed.
    pub fn rescan(&mut self, trigger: &str) {
        let Some(c) = &mut self.cgroups else {
            return;
        };
        let found = c.glob.expand(&c.mount, MAX_TRIGGER_CGROUPS);
        let over = found.len() > MAX_TRIGGER_CGROUPS;
        if over && !c.over {
            tracing::warn!(
                trigger,
                "cgroup {} names more than {MAX_TRIGGER_CGROUPS} cgroups: only the first \
                 {MAX_TRIGGER_CGROUPS} are watched",
                c.glob.text()
            );
        }
        c.over = over;
        let found: Vec<String> = found.into_iter().take(MAX_TRIGGER_CGROUPS).collect();
        self.files
            .retain(|f| !f.broken && f.cgroup.as_ref().is_some_and(|g| found.contains(g)));
        c.refused.retain(|g| found.contains(g));
        for cgroup in found {
            if c.refused.contains(&cgroup)
                || self
                    .files
                    .iter()
                    .any(|f| f.cgroup.as_deref() == Some(cgroup.as_str()))
            {
                continue;
            }
            match arm(&self.spec, Some(&dir_of(&c.mount, &cgroup))) {
                Ok(armed) => self.files.push(PsiFile {
                    file: armed.file,
                    path: armed.path,
                    cgroup: Some(cgroup),
                    broken: false,
                }),
                Err(why) => {
                    tracing::warn!(trigger, "{why}: this cgroup is not watched");
                    c.refused.insert(cgroup);
                }
            }
        }
    }
}
