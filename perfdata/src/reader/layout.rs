//! Where the parts of a perf.data file lie, read from its header and
//! feature index through any `Read + Seek` and every one checked against
//! the file's length before anything is read from it: a file another host
//! wrote may claim a section of 2^47 bytes, and a parser that allocates
//! what a header claims (`linux-perf-data` does) aborts the process.
//!
//! [`FileLayout::read`] checks the sections; [`FileLayout::check_contents`]
//! also checks the inside of the parts `linux-perf-data` parses as soon as
//! it opens a file (EVENT_DESC, the attrs and event_types tables), whose
//! counts it turns into allocations.

use std::io::{Read, Seek, SeekFrom};

use crate::abi::{get_u32, get_u64};
use crate::format::{FILE_HEADER_SIZE, bit, feature_bits, is_perf_data};

use super::ReadError;

/// `PERF_ATTR_SIZE_VER0`: the smallest `perf_event_attr` there is.
const ATTR_SIZE_VER0: u64 = 64;
/// The largest attr size believed (the kernel's is 136 bytes today).
const ATTR_SIZE_MAX: u64 = 4096;
/// An attrs or event_types entry: the attr, then the file section of its
/// ids.
const FILE_SECTION_SIZE: u64 = 16;
/// The largest event_types table read (perf no longer writes one).
const MAX_EVENT_TYPES_BYTES: u64 = 1 << 20;

/// `offset..offset + size` of a file, inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    pub offset: u64,
    pub size: u64,
}

impl Section {
    pub fn end(self) -> u64 {
        self.offset + self.size
    }
}

/// A PERFILE2 file's header and the sections it names, each inside the
/// file.
#[derive(Debug, Clone)]
pub struct FileLayout {
    /// The file's length when it was read.
    pub len: u64,
    pub header: [u8; FILE_HEADER_SIZE],
    /// The size of one entry of the attrs table (attr and ids section).
    pub attr_size: u64,
    pub attrs: Section,
    pub data: Section,
    pub event_types: Section,
    /// `(feature bit, body)` in ascending bit order.
    pub features: Vec<(u32, Section)>,
}

impl FileLayout {
    /// Reads the header and the feature index of the file `src` and checks
    /// every section they name against its length.
    pub fn read<R: Read + Seek>(src: &mut R) -> Result<Self, ReadError> {
        let len = src.seek(SeekFrom::End(0)).map_err(ReadError::Io)?;
        let mut header = [0u8; FILE_HEADER_SIZE];
        if len < FILE_HEADER_SIZE as u64 {
            return Err(ReadError::NotPerfData);
        }
        read_at(src, 0, &mut header)?;
        if !is_perf_data(&header) {
            return Err(ReadError::NotPerfData);
        }
        let attr_size = get_u64(&header, 0x10);
        if !(ATTR_SIZE_VER0 + FILE_SECTION_SIZE..=ATTR_SIZE_MAX + FILE_SECTION_SIZE)
            .contains(&attr_size)
        {
            return Err(ReadError::BadAttrSize { size: attr_size });
        }
        let section_at = |what: &'static str, at: usize| {
            inside(
                what,
                Section {
                    offset: get_u64(&header, at),
                    size: get_u64(&header, at + 8),
                },
                len,
            )
        };
        let attrs = section_at("attrs", 0x18)?;
        let data = section_at("data", 0x28)?;
        let event_types = section_at("event_types", 0x38)?;
        if data.offset < FILE_HEADER_SIZE as u64 || attrs.end() > data.offset {
            return Err(ReadError::OutOfBounds {
                what: "data",
                offset: data.offset,
                size: data.size,
                len,
            });
        }
        let bits = feature_bits(&header);
        let index = inside(
            "feature index",
            Section {
                offset: data.end(),
                size: bits.len() as u64 * 16,
            },
            len,
        )?;
        let mut entries = vec![0u8; bits.len() * 16];
        read_at(src, index.offset, &mut entries)?;
        let mut features = Vec::with_capacity(bits.len());
        for (i, b) in bits.into_iter().enumerate() {
            let body = Section {
                offset: get_u64(&entries, i * 16),
                size: get_u64(&entries, i * 16 + 8),
            };
            features.push((b, inside(feature_name(b), body, len)?));
        }
        Ok(FileLayout {
            len,
            header,
            attr_size,
            attrs,
            data,
            event_types,
            features,
        })
    }

    /// The body of feature `bit`, if the file has it.
    pub fn feature(&self, bit: u32) -> Option<Section> {
        self.features
            .iter()
            .find(|(b, _)| *b == bit)
            .map(|(_, s)| *s)
    }

    /// Whether the records are zstd-compressed (the COMPRESSED feature).
    pub fn is_compressed(&self) -> bool {
        self.feature(bit::COMPRESSED).is_some()
    }

    /// Reads the body of feature `bit` (none without it).
    pub fn read_feature<R: Read + Seek>(
        &self,
        src: &mut R,
        bit: u32,
    ) -> Result<Option<Vec<u8>>, ReadError> {
        let Some(s) = self.feature(bit) else {
            return Ok(None);
        };
        let size = usize::try_from(s.size).map_err(|_| ReadError::TooLarge {
            what: feature_name(bit),
            size: s.size,
        })?;
        let mut body = vec![0u8; size];
        read_at(src, s.offset, &mut body)?;
        Ok(Some(body))
    }

    /// Checks what a parser reads as soon as it opens the file: every
    /// count in EVENT_DESC, the attrs table and the event_types table
    /// fits in the bytes that hold it, and every ids section they name
    /// lies inside the file. Returns the EVENT_DESC body it checked, so a
    /// reader can hand on those very bytes.
    pub fn check_contents<R: Read + Seek>(
        &self,
        src: &mut R,
    ) -> Result<Option<Vec<u8>>, ReadError> {
        let event_desc = self.read_feature(src, bit::EVENT_DESC)?;
        if let Some(body) = &event_desc {
            check_event_desc(body).map_err(|why| ReadError::BadFeature {
                what: "EVENT_DESC",
                why,
            })?;
        }
        // Without EVENT_DESC, a reader takes the events from the
        // event_types table (as `linux-perf-data` reads it: entries of an
        // attr and the section of its ids), allocating what each ids
        // section claims. perf has not written the table in years.
        if event_desc.is_none() && self.event_types.size > 0 {
            if self.event_types.size > MAX_EVENT_TYPES_BYTES {
                return Err(ReadError::TooLarge {
                    what: "event_types table",
                    size: self.event_types.size,
                });
            }
            let mut table = vec![0u8; to_usize(self.event_types.size).unwrap_or(0)];
            read_at(src, self.event_types.offset, &mut table)?;
            let entry = to_usize(self.attr_size + FILE_SECTION_SIZE).unwrap_or(usize::MAX);
            let attr = to_usize(self.attr_size).unwrap_or(usize::MAX);
            for e in table.chunks_exact(entry) {
                let ids = Section {
                    offset: get_u64(e, attr),
                    size: get_u64(e, attr + 8),
                };
                inside("event_types ids", ids, self.len)?;
            }
        }
        Ok(event_desc)
    }
}

/// `section` if it lies inside a file of `len` bytes.
fn inside(what: &'static str, section: Section, len: u64) -> Result<Section, ReadError> {
    match section.offset.checked_add(section.size) {
        Some(end) if end <= len => Ok(section),
        _ => Err(ReadError::OutOfBounds {
            what,
            offset: section.offset,
            size: section.size,
            len,
        }),
    }
}

fn read_at<R: Read + Seek>(src: &mut R, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
    src.seek(SeekFrom::Start(offset))
        .and_then(|_| src.read_exact(buf))
        .map_err(ReadError::Io)
}

/// A feature's name, as perf calls it, for error messages.
pub fn feature_name(b: u32) -> &'static str {
    match b {
        bit::TRACING_DATA => "TRACING_DATA feature",
        bit::BUILD_ID => "BUILD_ID feature",
        bit::HOSTNAME => "HOSTNAME feature",
        bit::OSRELEASE => "OSRELEASE feature",
        bit::EVENT_DESC => "EVENT_DESC feature",
        bit::COMPRESSED => "COMPRESSED feature",
        _ => "feature",
    }
}

/// EVENT_DESC: `nr`, `attr_size`, then per event the attr, `nr_ids`, a
/// string (`len`, bytes) and `nr_ids` ids; each count must fit in what is
/// left.
fn check_event_desc(body: &[u8]) -> Result<(), String> {
    let u32_at = |at: usize| -> Result<u64, String> {
        body.get(at..at + 4)
            .map(|_| u64::from(get_u32(body, at)))
            .ok_or_else(|| format!("it ends at byte {} of {at}", body.len()))
    };
    let nr = u32_at(0)?;
    let attr_size = u32_at(4)?;
    if !(ATTR_SIZE_VER0..=ATTR_SIZE_MAX).contains(&attr_size) {
        return Err(format!(
            "its attr size {attr_size} is not in {ATTR_SIZE_VER0}..={ATTR_SIZE_MAX}"
        ));
    }
    let len = body.len() as u64;
    // Each event takes at least its attr and two counts.
    if nr.saturating_mul(attr_size + 8) > len - 8 {
        return Err(format!("{nr} events do not fit in its {len} bytes"));
    }
    let mut at = 8u64;
    for event in 0..nr {
        let nr_ids = u32_at(to_usize(at + attr_size)?)?;
        let str_len = u32_at(to_usize(at + attr_size + 4)?)?;
        at += attr_size + 8;
        let need = str_len.saturating_add(nr_ids.saturating_mul(8));
        if need > len - at {
            return Err(format!(
                "event {event}: a name of {str_len} bytes and {nr_ids} ids do not fit in \
                 the {} bytes left",
                len - at
            ));
        }
        at += need;
    }
    Ok(())
}

fn to_usize(n: u64) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("offset {n} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn event_desc(nr: u32, events: &[(u32, &[u8], u32)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&nr.to_le_bytes());
        b.extend_from_slice(&64u32.to_le_bytes());
        for (nr_ids, name, ids) in events {
            b.extend_from_slice(&[0u8; 64]);
            b.extend_from_slice(&nr_ids.to_le_bytes());
            b.extend_from_slice(&(name.len() as u32).to_le_bytes());
            b.extend_from_slice(name);
            for _ in 0..*ids {
                b.extend_from_slice(&7u64.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn event_desc_counts_must_fit_in_its_bytes() {
        assert_eq!(
            check_event_desc(&event_desc(1, &[(2, b"cpu\0", 2)])),
            Ok(())
        );
        let huge_nr = check_event_desc(&event_desc(u32::MAX, &[(0, b"", 0)])).unwrap_err();
        assert!(
            huge_nr.contains("4294967295 events do not fit"),
            "{huge_nr}"
        );
        let huge_ids = check_event_desc(&event_desc(1, &[(u32::MAX, b"x", 0)])).unwrap_err();
        assert!(huge_ids.contains("4294967295 ids do not fit"), "{huge_ids}");
        assert!(check_event_desc(&[1, 0, 0]).is_err());
        let mut small_attr = event_desc(0, &[]);
        small_attr[4] = 8;
        assert!(check_event_desc(&small_attr).is_err());
    }

    fn file(data_size: u64, feature_size: u64) -> Vec<u8> {
        let mut f = crate::format::file_header((104, 0), (104, 8), &[bit::HOSTNAME]).to_vec();
        f[0x30..0x38].copy_from_slice(&data_size.to_le_bytes());
        f.extend_from_slice(&[0u8; 8]);
        f.extend_from_slice(&(104u64 + 8 + 16).to_le_bytes());
        f.extend_from_slice(&feature_size.to_le_bytes());
        f.extend_from_slice(b"host\0\0\0\0");
        f
    }

    #[test]
    fn sections_must_lie_inside_the_file() {
        let good = file(8, 8);
        let layout = FileLayout::read(&mut Cursor::new(&good)).unwrap();
        assert_eq!(
            layout.data,
            Section {
                offset: 104,
                size: 8
            }
        );
        assert_eq!(
            layout.features,
            vec![(
                bit::HOSTNAME,
                Section {
                    offset: 128,
                    size: 8
                }
            )]
        );
        for size in [0x7fff_ffff_ffff, u64::MAX] {
            let err = FileLayout::read(&mut Cursor::new(file(8, size))).unwrap_err();
            assert!(
                matches!(err, ReadError::OutOfBounds { what: "HOSTNAME feature", size: s, .. } if s == size),
                "{err}"
            );
        }
        let err = FileLayout::read(&mut Cursor::new(file(u64::MAX - 50, 8))).unwrap_err();
        assert!(
            matches!(err, ReadError::OutOfBounds { what: "data", .. }),
            "{err}"
        );
        let mut zero_attr = good.clone();
        zero_attr[0x10..0x18].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            FileLayout::read(&mut Cursor::new(zero_attr)),
            Err(ReadError::BadAttrSize { size: 0 })
        ));
        assert!(matches!(
            FileLayout::read(&mut Cursor::new(&good[..100])),
            Err(ReadError::NotPerfData)
        ));
    }
}
