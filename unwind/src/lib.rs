//! User stacks of `callchain = "dwarf"` samples: each sample carries the
//! user registers and a copy of the user stack; the return addresses are
//! found from the unwind tables (`.eh_frame`, `.eh_frame_hdr`,
//! `.debug_frame`) of the files the process maps, with framehop (samply's
//! unwinder). A file whose tables are not found leaves framehop its
//! frame-pointer fallback.
//!
//! Two users: `snapctl report` and `export` (files found by build-id after
//! the fact) and the daemon's history writer (files read through the
//! process as it drains, so that minutes of history hold call chains
//! rather than stack copies). Each says how a file is found
//! ([`TableSource`]) and how much may be kept ([`Limits`]).
//!
//! One unwinder per address space, made from its maps when first needed
//! and again after [`Unwinding::forget`]; each file's tables are read
//! once. The caller names the address space: the report by pid, the
//! daemon by what the maps are (the processes of one forked program
//! share an unwinder, and with it framehop's cache of rules).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use flightrec_files::elf_layout::{LoadSegments, section_at};
use framehop::Unwinder;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module};

/// Most return addresses taken from one stack (perf's default
/// `kernel.perf_event_max_stack` is 127).
pub const MAX_USER_FRAMES: usize = 256;

/// x86_64 register numbers (`enum perf_event_x86_regs`); the IP is where
/// a sample was taken, which callers check against the maps they hold.
const REG_BP: u64 = 6;
const REG_SP: u64 = 7;
pub const REG_IP: u64 = 8;

type Bytes = Arc<[u8]>;

/// What an unwinder may read and keep.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest unwind section read from a file.
    pub max_section_bytes: usize,
    /// Largest `.text` read (framehop looks at the instructions around a
    /// leaf address for prologues and epilogues; without them it unwinds
    /// a leaf by the tables alone).
    pub max_text_bytes: usize,
    /// Tables kept at most, summed over files: past this the cache and
    /// every process's unwinder are dropped and made again as needed.
    pub max_cached_bytes: usize,
    /// Most modules made before [`Unwinding::forget`] stops forgetting.
    /// Each costs an index of its `.eh_frame` when the file has no
    /// `.eh_frame_hdr`, and a hostile snapshot may alternate maps and
    /// samples of one process for ever: past this, a process keeps the
    /// unwinder it has (its later maps unwound by frame pointers).
    pub max_modules: u64,
}

/// A map of a process, as the caller knows it.
#[derive(Debug, Clone, Copy)]
pub struct MapView<'a> {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// The path as the kernel recorded it.
    pub path: &'a str,
    pub build_id: &'a [u8],
    /// The caller's own index of this map, for its [`TableSource`].
    pub tag: usize,
}

/// Where a map's file is found: an open file whose build-id is the map's,
/// or `None`.
pub trait TableSource {
    /// The tables of the file `map` of process `pid` maps.
    fn tables(&mut self, pid: i32, map: &MapView<'_>, limits: &Limits) -> Option<UnwindTables>;
}

/// What a file gives an unwinder.
pub struct UnwindTables {
    segments: LoadSegments,
    text: Option<(Range<u64>, Bytes)>,
    eh_frame: Option<(Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    got: Option<Range<u64>>,
}

impl UnwindTables {
    /// The tables of `file` (an ELF file), each section bounded by
    /// `limits`; `None` when it is not an ELF file.
    pub fn read(file: &File, limits: &Limits) -> Option<Self> {
        let segments = LoadSegments::read(file)?;
        let at = |name: &[u8], max: usize| {
            section_at(file, name, max).map(|(addr, bytes)| {
                let end = addr.saturating_add(bytes.len() as u64);
                (addr..end, Bytes::from(bytes))
            })
        };
        Some(UnwindTables {
            segments,
            text: at(b".text", limits.max_text_bytes),
            eh_frame: at(b".eh_frame", limits.max_section_bytes),
            eh_frame_hdr: at(b".eh_frame_hdr", limits.max_section_bytes),
            debug_frame: at(b".debug_frame", limits.max_section_bytes).map(|(_, b)| b),
            got: at(b".got", limits.max_section_bytes).map(|(r, _)| r),
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        let len = |s: &Option<(Range<u64>, Bytes)>| s.as_ref().map_or(0, |(_, b)| b.len());
        len(&self.text)
            + len(&self.eh_frame)
            + len(&self.eh_frame_hdr)
            + self.debug_frame.as_ref().map_or(0, |b| b.len())
    }

    /// The module for `map` of this file.
    fn module(&self, map: &MapView<'_>) -> Option<Module<Bytes>> {
        // The address the file's address 0 lands at in this process.
        let svma = self.segments.virt_of(map.pgoff)?;
        let base_avma = map.start.wrapping_sub(svma);
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.as_ref().map(|(r, _)| r.clone()),
            text: self.text.as_ref().map(|(_, b)| b.clone()),
            eh_frame_svma: self.eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: self.eh_frame.as_ref().map(|(_, b)| b.clone()),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|(_, b)| b.clone()),
            debug_frame: self.debug_frame.clone(),
            got_svma: self.got.clone(),
            ..Default::default()
        };
        Some(Module::new(
            map.path.to_string(),
            map.start..map.end,
            base_avma,
            info,
        ))
    }
}

/// Unwinds user stacks.
pub struct Unwinding<S> {
    source: S,
    limits: Limits,
    /// By (path, build-id): the file's tables, or None when it was not
    /// found or is not ELF.
    tables: HashMap<(String, Vec<u8>), Option<Arc<UnwindTables>>>,
    cached_bytes: usize,
    /// By address space, made from its maps when first needed.
    processes: HashMap<u64, UnwinderX86_64<Bytes>>,
    cache: CacheX86_64,
    modules_made: u64,
}

impl<S: TableSource> Unwinding<S> {
    pub fn new(source: S, limits: Limits) -> Self {
        Unwinding {
            source,
            limits,
            tables: HashMap::new(),
            cached_bytes: 0,
            processes: HashMap::new(),
            cache: CacheX86_64::new(),
            modules_made: 0,
        }
    }

    /// Address space `space` mapped something: its unwinder is made again.
    pub fn forget(&mut self, space: u64) {
        if self.modules_made < self.limits.max_modules {
            self.processes.remove(&space);
        }
    }

    /// Whether `space` has an unwinder now.
    pub fn knows(&self, space: u64) -> bool {
        self.processes.contains_key(&space)
    }

    /// Address spaces with an unwinder now.
    pub fn spaces(&self) -> usize {
        self.processes.len()
    }

    /// Drops every process's unwinder (not the files' tables).
    pub fn forget_all(&mut self) {
        self.processes.clear();
        self.modules_made = 0;
    }

    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Bytes of tables cached.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// The user frames of a sample of `pid` in address space `space`
    /// (leaf first: the sampled address, then return addresses), from its
    /// registers (`reg` gives one by number) and the first `dyn_size`
    /// bytes of `stack`, copied at the stack pointer. `maps` gives the
    /// space's maps of the moment, asked only when it has no unwinder yet.
    pub fn unwind<'m>(
        &mut self,
        space: u64,
        pid: i32,
        reg: impl Fn(u64) -> Option<u64>,
        stack: &[u8],
        dyn_size: u64,
        maps: impl FnOnce() -> Vec<MapView<'m>>,
    ) -> Option<Vec<u64>> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let (ip, sp, bp) = (reg(REG_IP)?, reg(REG_SP)?, reg(REG_BP)?);
        let valid = usize::try_from(dyn_size)
            .unwrap_or(usize::MAX)
            .min(stack.len());
        let stack = &stack[..valid];
        if !self.processes.contains_key(&space) {
            let unwinder = self.unwinder_for(pid, &maps());
            self.processes.insert(space, unwinder);
        }
        let unwinder = self.processes.get(&space)?;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let at = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut frames = Vec::new();
        let mut iter = unwinder.iter_frames(
            ip,
            UnwindRegsX86_64::new(ip, sp, bp),
            &mut self.cache,
            &mut read_stack,
        );
        while frames.len() < MAX_USER_FRAMES {
            match iter.next() {
                Ok(Some(frame)) => frames.push(frame.address()),
                Ok(None) | Err(_) => break,
            }
        }
        Some(frames)
    }

    fn unwinder_for(&mut self, pid: i32, maps: &[MapView<'_>]) -> UnwinderX86_64<Bytes> {
        let mut unwinder = UnwinderX86_64::new();
        for map in maps {
            if map.build_id.is_empty() || !map.path.starts_with('/') {
                continue;
            }
            let key = (map.path.to_string(), map.build_id.to_vec());
            let tables = match self.tables.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let read = self.source.tables(pid, map, &self.limits).map(Arc::new);
                    let bytes = read.as_ref().map_or(0, |t| t.bytes());
                    if self.cached_bytes + bytes > self.limits.max_cached_bytes {
                        // Modules of processes made before hold their
                        // tables: both go, and are made again as needed.
                        self.tables.clear();
                        self.processes.clear();
                        self.cached_bytes = 0;
                    }
                    self.cached_bytes += bytes;
                    self.tables.insert(key, read.clone());
                    read
                }
            };
            if let Some(module) = tables.and_then(|t| t.module(map)) {
                self.modules_made += 1;
                unwinder.add_module(module);
            }
        }
        unwinder
    }
}
