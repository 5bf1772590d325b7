//! A forward ring mapped read-write: the kernel never overwrites what the
//! reader has not released, and the reader drains `[data_tail, data_head)`.
//! The tracking rings and the condition rings read their records this way.

use super::mapping::RingMap;

pub struct ForwardRing {
    map: RingMap,
    tail: u64,
}

impl ForwardRing {
    /// Starts reading at the ring's current head.
    pub fn new(map: RingMap) -> Self {
        let tail = map.data_head();
        Self { map, tail }
    }

    /// Appends every record published since the last drain to `out`
    /// (linearized across the wrap, whole records only, as the kernel
    /// publishes them), then releases the space to the kernel. Returns the
    /// bytes appended.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        self.drain_in_place(&mut |first, second| {
            out.reserve(first.len() + second.len());
            out.extend_from_slice(first);
            out.extend_from_slice(second);
        })
    }

    /// Hands `f` every record published since the last drain where the
    /// kernel wrote them (two parts when they wrap around the end of the
    /// ring), then releases the space to the kernel. Returns the bytes
    /// handed.
    fn drain_in_place(&mut self, f: &mut dyn FnMut(&[u8], &[u8])) -> usize {
        let head = self.map.data_head();
        let size = self.map.data_size();
        let pending = head.wrapping_sub(self.tail);
        // A forward ring never holds more than its size; anything else means
        // the control page cannot be trusted: resynchronize on head.
        let Ok(len) = usize::try_from(pending) else {
            self.release(head);
            return 0;
        };
        if len > size {
            self.release(head);
            return 0;
        }
        let mask = (size - 1) as u64;
        // `tail & mask` < size, so this fits usize.
        let off = usize::try_from(self.tail & mask).unwrap_or(0);
        let first = len.min(size - off);
        // The ranges are `[data_tail, data_head)` of a forward ring: the
        // kernel writes there only after `release` moves `data_tail` past
        // them, which happens after `f` returns and the borrows end.
        // SAFETY: the first range, up to the end of the ring, as above.
        let to_end = unsafe { self.map.reader_owned(off, first) };
        // SAFETY: the rest, from the start of the ring, as above.
        let from_start = unsafe { self.map.reader_owned(0, len - first) };
        let parts = (to_end, from_start);
        let handed = match parts {
            (Some(a), Some(b)) => {
                f(a, b);
                len
            }
            _ => 0,
        };
        self.release(head);
        handed
    }

    fn release(&mut self, head: u64) {
        self.tail = head;
        self.map.set_data_tail(head);
    }
}
