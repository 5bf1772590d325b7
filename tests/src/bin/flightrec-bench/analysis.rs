//! What a snapshot holds, read the same way for both tools: the records by
//! an independent parser (`linux-perf-data`), comm resolution by `perf script`.

use anyhow::{Context, Result, bail};
use linux_perf_data::linux_perf_event_reader::{EventRecord, RecordType};
use linux_perf_data::{PerfFileReader, PerfFileRecord};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The content of one snapshot file.
#[derive(Debug, Clone, Default)]
pub struct Content {
    pub samples: u64,
    /// Bytes of SAMPLE records per CPU (header included), as they sat in the ring.
    pub sample_bytes_per_cpu: BTreeMap<u32, u64>,
    /// Newest minus oldest sample time.
    pub span_ns: u64,
    /// Bytes of the data section on disk (compressed if compressed).
    pub data_bytes_on_disk: u64,
    /// Bytes of all records after decompression.
    pub record_bytes: u64,
    /// PERF_RECORD_COMPRESSED records: bytes on disk (headers included) and
    /// the bytes their payloads decompress to.
    pub compressed_on_disk: u64,
    pub compressed_payload: u64,
    /// Samples `perf script` prints, and those whose comm is `:PID` (unresolved).
    pub script_samples: u64,
    pub unresolved_comm: u64,
}

impl Content {
    /// Share of samples whose pid `perf script` resolves to a comm.
    pub fn resolved_share(&self) -> f64 {
        if self.script_samples == 0 {
            return 0.0;
        }
        1.0 - self.unresolved_comm as f64 / self.script_samples as f64
    }

    /// Lowest share, over CPUs, of the ring's data area recovered as samples.
    pub fn min_ring_share(&self, ring_bytes: u64) -> f64 {
        self.sample_bytes_per_cpu
            .values()
            .map(|&b| b as f64 / ring_bytes as f64)
            .fold(f64::INFINITY, f64::min)
    }

    /// Compression ratio of the whole data section (1.0 when uncompressed):
    /// what the file's size gains, records left uncompressed included.
    pub fn compression_ratio(&self) -> f64 {
        self.record_bytes as f64 / self.data_bytes_on_disk.max(1) as f64
    }

    /// Compression ratio of the compressed records alone: how well the same
    /// kind of bytes (ring data) compress, whatever else the file holds.
    pub fn compressed_records_ratio(&self) -> f64 {
        self.compressed_payload as f64 / self.compressed_on_disk.max(1) as f64
    }
}

pub fn analyze(path: &Path) -> Result<Content> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() < 104 || &bytes[..8] != b"PERFILE2" {
        bail!("{} is not a perf.data file", path.display());
    }
    let mut content = Content {
        data_bytes_on_disk: u64::from_le_bytes(bytes[0x30..0x38].try_into()?),
        ..Default::default()
    };
    let data_offset = u64::from_le_bytes(bytes[0x28..0x30].try_into()?);
    (content.compressed_on_disk, content.compressed_payload) =
        compressed_records(&bytes, data_offset, content.data_bytes_on_disk)?;
    let PerfFileReader {
        mut perf_file,
        mut record_iter,
    } = PerfFileReader::parse_file(std::io::Cursor::new(&bytes[..]))
        .with_context(|| format!("parsing {}", path.display()))?;
    let (mut oldest, mut newest) = (u64::MAX, 0u64);
    while let Some(record) = record_iter.next_record(&mut perf_file)? {
        let PerfFileRecord::EventRecord { record, .. } = record else {
            continue;
        };
        let size = record.data.len() as u64 + 8;
        content.record_bytes += size;
        if record.record_type != RecordType::SAMPLE {
            continue;
        }
        if let EventRecord::Sample(sample) = record.parse()? {
            content.samples += 1;
            *content
                .sample_bytes_per_cpu
                .entry(sample.cpu.unwrap_or(u32::MAX))
                .or_default() += size;
            if let Some(t) = sample.timestamp {
                oldest = oldest.min(t);
                newest = newest.max(t);
            }
        }
    }
    content.span_ns = newest.saturating_sub(oldest);
    count_resolved_comms(path, &mut content)?;
    Ok(content)
}

/// `perf script ARGS -i PATH`: its output, or an error with perf's.
pub fn perf_script(path: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("perf")
        .arg("script")
        .args(args)
        .arg("-i")
        .arg(path)
        .output()
        .context("running perf script")?;
    if !out.status.success() {
        bail!(
            "perf script -i {} failed: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// perf prints `:PID` as the comm of a thread it has no COMM record for.
fn count_resolved_comms(path: &Path, content: &mut Content) -> Result<()> {
    for line in perf_script(path, &["-F", "comm,pid"])?.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        content.script_samples += 1;
        if line.starts_with(':') {
            content.unresolved_comm += 1;
        }
    }
    Ok(())
}

/// Walks the data section's records as written (before any decompression)
/// and decompresses the payloads of the PERF_RECORD_COMPRESSED ones as one
/// zstd stream (perf writes one stream, flightrec one frame per record:
/// both decode as a sequence).
fn compressed_records(bytes: &[u8], offset: u64, size: u64) -> Result<(u64, u64)> {
    const COMPRESSED: u32 = 81;
    let start = usize::try_from(offset)?;
    let end = start
        .checked_add(usize::try_from(size)?)
        .filter(|&e| e <= bytes.len())
        .context("data section past the end of the file")?;
    let (mut pos, mut on_disk, mut payload) = (start, 0u64, Vec::new());
    while pos + 8 <= end {
        let kind = u32::from_le_bytes(bytes[pos..pos + 4].try_into()?);
        let len = usize::from(u16::from_le_bytes(bytes[pos + 6..pos + 8].try_into()?));
        if len < 8 || pos + len > end {
            bail!("bad record header at offset {pos}");
        }
        if kind == COMPRESSED {
            on_disk += len as u64;
            payload.extend_from_slice(&bytes[pos + 8..pos + len]);
        }
        pos += len;
    }
    if payload.is_empty() {
        return Ok((0, 0));
    }
    // perf flushes its stream after every record but never ends the frame,
    // so the decoder reports the end of input as an error once everything
    // was decoded: count what it produced up to there.
    let mut decoder = zstd::stream::read::Decoder::new(&payload[..])?;
    let (mut buf, mut decompressed) = (vec![0u8; 1 << 20], 0u64);
    loop {
        match std::io::Read::read(&mut decoder, &mut buf) {
            Ok(0) => break,
            Ok(n) => decompressed += n as u64,
            Err(_) if decompressed > 0 => break,
            Err(e) => return Err(e).context("decompressing"),
        }
    }
    Ok((on_disk, decompressed))
}
