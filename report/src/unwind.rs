//! User stacks of `callchain = "dwarf"` samples: each sample carries the
//! user registers and a copy of the user stack; the return addresses are
//! found here, after the fact, from the unwind tables (`.eh_frame`,
//! `.eh_frame_hdr`, `.debug_frame`) of the files the snapshot names by
//! build-id, with framehop (samply's unwinder). The files are found and
//! checked as symbols' are ([`crate::symbols::find_binary`]); a file not
//! found leaves framehop its frame-pointer fallback.
//!
//! One unwinder per process, made from its maps of the moment and made
//! again after its next map; each file's tables are read once.

use std::collections::HashMap;
use std::sync::Arc;

use framehop::Unwinder;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module};

use crate::model::MapInfo;
use crate::symbols::SymbolSources;
use crate::symbols::elf_layout::{LoadSegments, section_at};

/// Most return addresses taken from one stack (perf's default
/// `kernel.perf_event_max_stack` is 127).
pub const MAX_USER_FRAMES: usize = 256;
/// Largest unwind or text section read from a file.
const MAX_SECTION_BYTES: usize = 256 << 20;
/// Most modules made for one snapshot. Each costs an index of its
/// `.eh_frame` when the file has no `.eh_frame_hdr`, and a file may
/// alternate maps and samples of one process for ever: past this, a
/// process keeps the unwinder it has (its later maps unwound by frame
/// pointers).
const MAX_MODULES_MADE: u64 = 100_000;

/// x86_64 register numbers (`enum perf_event_x86_regs`).
const REG_BP: u64 = 6;
const REG_SP: u64 = 7;
const REG_IP: u64 = 8;

type Bytes = Arc<[u8]>;

/// A live map of a process, as the loader keeps it.
#[derive(Debug, Clone, Copy)]
pub struct LiveMapView {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// Index into `Snapshot::maps`.
    pub map: usize,
}

/// What a file gives an unwinder.
struct UnwindTables {
    segments: LoadSegments,
    text: Option<(std::ops::Range<u64>, Bytes)>,
    eh_frame: Option<(std::ops::Range<u64>, Bytes)>,
    eh_frame_hdr: Option<(std::ops::Range<u64>, Bytes)>,
    debug_frame: Option<Bytes>,
    got: Option<std::ops::Range<u64>>,
}

impl UnwindTables {
    fn read(file: &std::fs::File) -> Option<Self> {
        let segments = LoadSegments::read(file)?;
        let at = |name: &[u8]| {
            section_at(file, name, MAX_SECTION_BYTES).map(|(addr, bytes)| {
                let end = addr.saturating_add(bytes.len() as u64);
                (addr..end, Bytes::from(bytes))
            })
        };
        Some(UnwindTables {
            segments,
            text: at(b".text"),
            eh_frame: at(b".eh_frame"),
            eh_frame_hdr: at(b".eh_frame_hdr"),
            debug_frame: at(b".debug_frame").map(|(_, b)| b),
            got: at(b".got").map(|(r, _)| r),
        })
    }

    /// The module for the map `[start, end)` of this file at `pgoff`.
    fn module(&self, name: &str, view: &LiveMapView) -> Option<Module<Bytes>> {
        // The address the file's address 0 lands at in this process.
        let svma = self.segments.virt_of(view.pgoff)?;
        let base_avma = view.start.wrapping_sub(svma);
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
            name.to_string(),
            view.start..view.end,
            base_avma,
            info,
        ))
    }
}

/// Unwinds the user stacks of one snapshot's samples.
pub struct Unwinding {
    sources: SymbolSources,
    /// By (path, build-id): the file's tables, or None when it was not
    /// found or is not ELF.
    tables: HashMap<(String, Vec<u8>), Option<Arc<UnwindTables>>>,
    /// By pid, made from its maps when first needed.
    processes: HashMap<i32, UnwinderX86_64<Bytes>>,
    cache: CacheX86_64,
    /// Modules made so far (see [`MAX_MODULES_MADE`]).
    modules_made: u64,
}

impl Unwinding {
    pub fn new(sources: &SymbolSources) -> Self {
        Unwinding {
            sources: sources.clone(),
            tables: HashMap::new(),
            processes: HashMap::new(),
            cache: CacheX86_64::new(),
            modules_made: 0,
        }
    }

    /// Process `pid` mapped something: its unwinder is made again.
    pub fn forget(&mut self, pid: i32) {
        if self.modules_made < MAX_MODULES_MADE {
            self.processes.remove(&pid);
        }
    }

    /// The user frames of a sample of `pid` (leaf first: the sampled
    /// address, then return addresses), from its registers (`reg` gives
    /// one by number) and the first `dyn_size` bytes of `stack`, copied at
    /// the stack pointer. `maps` are the process's maps of the moment.
    pub fn unwind(
        &mut self,
        pid: i32,
        reg: impl Fn(u64) -> Option<u64>,
        stack: &[u8],
        dyn_size: u64,
        maps: &[LiveMapView],
        all_maps: &[MapInfo],
    ) -> Option<Vec<u64>> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let (ip, sp, bp) = (reg(REG_IP)?, reg(REG_SP)?, reg(REG_BP)?);
        let valid = usize::try_from(dyn_size)
            .unwrap_or(usize::MAX)
            .min(stack.len());
        let stack = &stack[..valid];
        if !self.processes.contains_key(&pid) {
            let unwinder = self.unwinder_for(pid, maps, all_maps);
            self.processes.insert(pid, unwinder);
        }
        let unwinder = self.processes.get(&pid)?;
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

    fn unwinder_for(
        &mut self,
        pid: i32,
        maps: &[LiveMapView],
        all_maps: &[MapInfo],
    ) -> UnwinderX86_64<Bytes> {
        let mut unwinder = UnwinderX86_64::new();
        for view in maps {
            let Some(info) = all_maps.get(view.map) else {
                continue;
            };
            let Some(build_id) = &info.build_id else {
                continue;
            };
            if !info.path.starts_with('/') {
                continue;
            }
            let key = (info.path.clone(), build_id.clone());
            let sources = &self.sources;
            let tables = self
                .tables
                .entry(key)
                .or_insert_with(|| {
                    let pid = u32::try_from(pid).ok();
                    let file = crate::symbols::find_binary(&info.path, build_id, pid, sources)?;
                    UnwindTables::read(&file).map(Arc::new)
                })
                .clone();
            if let Some(module) = tables.and_then(|t| t.module(&info.path, view)) {
                self.modules_made += 1;
                unwinder.add_module(module);
            }
        }
        unwinder
    }
}
