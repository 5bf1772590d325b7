//! Loaded kernel modules, named and identified as perf synthesizes them.

use std::fs;

/// A loaded kernel module as perf synthesizes its map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelModule {
    pub name: String,
    pub start: u64,
    pub size: u64,
    /// The `.ko` file (from modules.dep), else `[name]` as perf names it.
    pub path: String,
    /// /sys/module/NAME/notes/.note.gnu.build-id.
    pub build_id: Option<Vec<u8>>,
}

/// `(name, size, address)` of each live module of /proc/modules (`name
/// size refcount deps state address`); none when the addresses are hidden.
pub fn parse_proc_modules(text: &str) -> Vec<(String, u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let addr = u64::from_str_radix(f.get(5)?.trim_start_matches("0x"), 16).ok()?;
            (f.get(4) == Some(&"Live") && addr != 0)
                .then(|| Some((f[0].to_string(), f[1].parse().ok()?, addr)))
                .flatten()
        })
        .collect()
}

/// The live modules of a /proc/modules text as perf names them without
/// their files (`[name]`) and build-ids: what a watch starts from.
pub fn bare_modules(text: &str) -> Vec<KernelModule> {
    parse_proc_modules(text)
        .into_iter()
        .map(|(name, size, start)| KernelModule {
            path: format!("[{name}]"),
            name,
            start,
            size,
            build_id: None,
        })
        .collect()
}

/// Module name -> `.ko` path (under `dir`) from a modules.dep text: the
/// file name without `.ko*`, with `-` read as `_` as the kernel does.
pub fn parse_modules_dep(text: &str, dir: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let file = line.split(':').next()?.trim();
            let base = file.rsplit('/').next()?;
            let name = &base[..base.find(".ko")?];
            Some((name.replace('-', "_"), format!("{dir}/{file}")))
        })
        .collect()
}

pub(super) fn gather_modules() -> Vec<KernelModule> {
    let Ok(text) = fs::read_to_string(PROC_MODULES) else {
        return Vec::new();
    };
    describe_modules(parse_proc_modules(&text))
}

/// Where the kernel lists its loaded modules (absent without module support).
pub const PROC_MODULES: &str = "/proc/modules";

/// Each `(name, size, address)` of /proc/modules with its `.ko` path (from
/// modules.dep) and build-id (from sysfs), as perf names and identifies it.
pub fn describe_modules(live: Vec<(String, u64, u64)>) -> Vec<KernelModule> {
    if live.is_empty() {
        return Vec::new();
    }
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let dir = format!("/lib/modules/{}", release.trim());
    let paths = fs::read_to_string(format!("{dir}/modules.dep"))
        .map(|t| parse_modules_dep(&t, &dir))
        .unwrap_or_default();
    live.into_iter()
        .map(|(name, size, start)| KernelModule {
            path: paths
                .get(&name)
                .cloned()
                .unwrap_or_else(|| format!("[{name}]")),
            build_id: fs::read(format!("/sys/module/{name}/notes/.note.gnu.build-id"))
                .ok()
                .and_then(|n| parse_build_id_note(&n)),
            name,
            start,
            size,
        })
        .collect()
}

/// The GNU build-id among ELF notes laid end to end (the format of
/// /sys/kernel/notes and /sys/module/*/notes/.note.gnu.build-id).
pub fn parse_build_id_note(notes: &[u8]) -> Option<Vec<u8>> {
    flightrec_files::elf::build_id_in_notes(notes).filter(|id| id.len() <= 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_id_is_found_among_notes() {
        // /sys/kernel/notes of a 6.x kernel: a Xen note, then the build-id.
        let mut notes = Vec::new();
        for (name, kind, desc) in [
            (&b"Xen\0"[..], 6u32, vec![1u8; 6]),
            (&b"GNU\0"[..], 3, (1..=20).collect()),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(&desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(parse_build_id_note(&notes), Some((1..=20).collect()));
        assert_eq!(parse_build_id_note(&notes[..notes.len() - 4]), None);
        assert_eq!(parse_build_id_note(&notes[..20]), None);
    }

    #[test]
    fn modules_are_read_as_perf_synthesizes_them() {
        let text = "nf_tables 372736 0 - Live 0xffffffffc0a00000\n\
                    loading 16384 0 - Loading 0xffffffffc0b00000\n\
                    ext4 1200128 1 mbcache, Live 0xffffffffc0c00000 (E)\n";
        assert_eq!(
            parse_proc_modules(text),
            [
                ("nf_tables".to_string(), 372_736, 0xffff_ffff_c0a0_0000),
                ("ext4".to_string(), 1_200_128, 0xffff_ffff_c0c0_0000)
            ]
        );
        // kptr_restrict hides the addresses: no maps then.
        assert!(parse_proc_modules("ext4 1200128 1 - Live 0x0000000000000000\n").is_empty());
        let dep = parse_modules_dep(
            "kernel/net/netfilter/nf_tables.ko.zst: kernel/lib/x.ko\nkernel/drivers/a/snd-hda.ko:\n",
            "/lib/modules/6.1",
        );
        assert_eq!(
            dep["nf_tables"],
            "/lib/modules/6.1/kernel/net/netfilter/nf_tables.ko.zst"
        );
        assert_eq!(
            dep["snd_hda"],
            "/lib/modules/6.1/kernel/drivers/a/snd-hda.ko"
        );
    }
}
