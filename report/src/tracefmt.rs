//! Where `sched:sched_switch` keeps its fields, read from the format text the
//! snapshot carries in its TRACING_DATA section (the same text perf script
//! parses), so a kernel that moves a field is read right or not at all.

/// Byte offsets and sizes of the `sched_switch` fields the report reads,
/// inside a sample's raw data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchFields {
    pub prev_comm: Field,
    pub prev_pid: Field,
    pub prev_state: Field,
    pub next_comm: Field,
    pub next_pid: Field,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub offset: usize,
    pub size: usize,
}

/// One `sched_switch` record's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchRecord {
    pub prev_comm: String,
    pub prev_pid: i32,
    /// `TASK_RUNNING` (0) when the task was preempted, else why it slept.
    pub prev_state: u64,
    pub next_comm: String,
    pub next_pid: i32,
}

impl SwitchFields {
    /// The fields from the event's format text in `tracing_data`, or `None`
    /// when the section has no `sched_switch` format or it lacks a field.
    pub fn from_tracing_data(tracing_data: &[u8]) -> Option<Self> {
        let text = format_text(tracing_data, "sched_switch")?;
        let field = |name: &str| field_of(text, name);
        Some(SwitchFields {
            prev_comm: field("prev_comm")?,
            prev_pid: field("prev_pid")?,
            prev_state: field("prev_state")?,
            next_comm: field("next_comm")?,
            next_pid: field("next_pid")?,
        })
    }

    /// The record in `raw`, or `None` when `raw` is shorter than the format.
    pub fn parse(&self, raw: &[u8]) -> Option<SwitchRecord> {
        Some(SwitchRecord {
            prev_comm: comm(raw, self.prev_comm)?,
            prev_pid: int(raw, self.prev_pid)? as i32,
            prev_state: int(raw, self.prev_state)?,
            next_comm: comm(raw, self.next_comm)?,
            next_pid: int(raw, self.next_pid)? as i32,
        })
    }
}

/// The format text of event `name` (`name: NAME\nID: ...\nformat:...`),
/// up to its `print fmt` line.
fn format_text<'a>(data: &'a [u8], name: &str) -> Option<&'a str> {
    let needle = format!("name: {name}\n");
    let start = find(data, needle.as_bytes())?;
    let rest = &data[start..];
    let end = find(rest, b"print fmt").unwrap_or(rest.len());
    std::str::from_utf8(&rest[..end]).ok()
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;`
fn field_of(format: &str, name: &str) -> Option<Field> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        // The name is the declaration's last word, before any `[N]`.
        let last = decl.split_whitespace().last()?;
        let declared = last.split('[').next()?;
        if declared != name {
            return None;
        }
        let value = |key: &str| -> Option<usize> {
            rest.split(';')
                .find_map(|kv| kv.trim().strip_prefix(key))?
                .trim()
                .parse()
                .ok()
        };
        Some(Field {
            offset: value("offset:")?,
            size: value("size:")?,
        })
    })
}

fn comm(raw: &[u8], f: Field) -> Option<String> {
    let bytes = raw.get(f.offset..f.offset + f.size)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

fn int(raw: &[u8], f: Field) -> Option<u64> {
    let bytes = raw.get(f.offset..f.offset + f.size)?;
    Some(match f.size {
        1 => u64::from(bytes[0]),
        2 => u64::from(u16::from_le_bytes(bytes.try_into().ok()?)),
        4 => u64::from(u32::from_le_bytes(bytes.try_into().ok()?)),
        8 => u64::from_le_bytes(bytes.try_into().ok()?),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The format of Linux 6.x on x86_64, as tracefs prints it.
    pub const SCHED_SWITCH_FORMAT: &str = "name: sched_switch\nID: 316\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
        \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
        \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
        \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n\
        print fmt: \"prev_comm=%s\"\n";

    fn raw(prev: &str, prev_pid: i32, state: u64, next: &str, next_pid: i32) -> Vec<u8> {
        let mut r = vec![0u8; 64];
        r[8..8 + prev.len()].copy_from_slice(prev.as_bytes());
        r[24..28].copy_from_slice(&prev_pid.to_le_bytes());
        r[32..40].copy_from_slice(&state.to_le_bytes());
        r[40..40 + next.len()].copy_from_slice(next.as_bytes());
        r[56..60].copy_from_slice(&next_pid.to_le_bytes());
        r
    }

    #[test]
    fn fields_are_read_from_the_format_among_other_events() {
        let mut data = b"\x17\x08Dtracing0.6\0...name: sched_wakeup\nID: 1\nformat:\n\
            \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\nprint fmt: \"\"\n"
            .to_vec();
        data.extend_from_slice(SCHED_SWITCH_FORMAT.as_bytes());
        let f = SwitchFields::from_tracing_data(&data).unwrap();
        assert_eq!(
            f.prev_pid,
            Field {
                offset: 24,
                size: 4
            }
        );
        assert_eq!(
            f.prev_state,
            Field {
                offset: 32,
                size: 8
            }
        );
        assert_eq!(
            f.next_comm,
            Field {
                offset: 40,
                size: 16
            }
        );
        let rec = f.parse(&raw("burner", 4242, 1, "swapper/1", 0)).unwrap();
        assert_eq!(
            rec,
            SwitchRecord {
                prev_comm: "burner".into(),
                prev_pid: 4242,
                prev_state: 1,
                next_comm: "swapper/1".into(),
                next_pid: 0,
            }
        );
    }

    #[test]
    fn a_missing_format_or_field_or_short_record_gives_none() {
        assert_eq!(
            SwitchFields::from_tracing_data(b"name: sched_wakeup\n"),
            None
        );
        let without_next = SCHED_SWITCH_FORMAT.replace("next_pid", "other_pid");
        assert_eq!(
            SwitchFields::from_tracing_data(without_next.as_bytes()),
            None
        );
        let f = SwitchFields::from_tracing_data(SCHED_SWITCH_FORMAT.as_bytes()).unwrap();
        assert_eq!(f.parse(&[0u8; 40]), None);
    }
}
