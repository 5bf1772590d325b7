//! The tracefs text perf needs to decode tracepoint samples.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::HostInfoError;

/// Where tracefs lives, newest convention first.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracefs text perf needs to decode tracepoint samples (TRACING_DATA).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingSource {
    /// `events/header_page`.
    pub header_page: Vec<u8>,
    /// `events/header_event`.
    pub header_event: Vec<u8>,
    /// `events/<system>/<name>/format` of every tracepoint gathered.
    pub formats: Vec<TracepointFormat>,
    /// `printk_formats` (lets perf print `%s` arguments given as pointers).
    pub printk_formats: Vec<u8>,
}

/// One tracepoint's format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointFormat {
    pub system: String,
    pub name: String,
    /// The `ID:` line of the format: the attr's `config` must equal it.
    pub id: Option<u64>,
    pub format: Vec<u8>,
}

impl TracingSource {
    /// The format gathered for `system:name`, if any.
    pub fn format(&self, system: &str, name: &str) -> Option<&TracepointFormat> {
        self.formats
            .iter()
            .find(|f| f.system == system && f.name == name)
    }
}

fn tracefs_root() -> Result<&'static Path, HostInfoError> {
    TRACEFS_ROOTS
        .iter()
        .map(Path::new)
        .find(|root| root.join("events/header_page").exists())
        .ok_or_else(|| HostInfoError::NoTracefs {
            tried: TRACEFS_ROOTS.join(", "),
        })
}

/// Reads a tracefs file with large reads: some tracefs files (6.x
/// `events/header_page`) answer a short first read and then report EOF,
/// which `fs::read`'s small probing read would hit.
fn read_tracefs(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = fs::File::open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn read_nonempty(path: PathBuf) -> Result<Vec<u8>, HostInfoError> {
    match read_tracefs(&path) {
        Ok(b) if b.is_empty() => Err(HostInfoError::Empty { path }),
        Ok(b) => Ok(b),
        Err(source) => Err(HostInfoError::Read { path, source }),
    }
}

pub(super) fn gather_tracing(
    tracepoints: &[(String, String)],
) -> Result<TracingSource, HostInfoError> {
    let root = tracefs_root()?;
    let mut formats = Vec::with_capacity(tracepoints.len());
    for (system, name) in tracepoints {
        let format = read_nonempty(root.join("events").join(system).join(name).join("format"))?;
        formats.push(TracepointFormat {
            system: system.clone(),
            name: name.clone(),
            id: format_id(&format),
            format,
        });
    }
    // printk_formats may be missing (old kernels, lockdown): perf copes.
    let printk_formats = read_tracefs(&root.join("printk_formats")).unwrap_or_default();
    Ok(TracingSource {
        header_page: read_nonempty(root.join("events/header_page"))?,
        header_event: read_nonempty(root.join("events/header_event"))?,
        formats,
        printk_formats,
    })
}

/// The number on the `ID: n` line of a tracepoint format.
pub fn format_id(format: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(format).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("ID:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Where field `name` is in a tracepoint's raw data: `(offset, size)`
/// from a `field:TYPE NAME;\toffset:N;\tsize:N;...` line of its format.
pub fn format_field(format: &[u8], name: &str) -> Option<(usize, usize)> {
    let text = std::str::from_utf8(format).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.trim().split(';').map(str::trim);
        let decl = parts.next()?.strip_prefix("field:")?;
        let field = decl
            .rsplit(|c: char| c.is_whitespace() || c == '*')
            .next()?;
        let field = field.split('[').next()?;
        if field != name {
            return None;
        }
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        Some((offset?, size?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_found_by_name_with_their_offset_and_size() {
        let format = b"name: sched_switch\nID: 316\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
            \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
            \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
            \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";
        assert_eq!(format_field(format, "prev_comm"), Some((8, 16)));
        assert_eq!(format_field(format, "next_pid"), Some((56, 4)));
        assert_eq!(format_field(format, "prev"), None);
    }

    #[test]
    fn format_id_reads_the_id_line() {
        assert_eq!(
            format_id(b"name: sched_switch\nID: 372\nformat:\n"),
            Some(372)
        );
        assert_eq!(format_id(b"name: x\nformat:\n"), None);
    }
}
