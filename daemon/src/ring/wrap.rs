//! Byte copies across the end of a circular buffer: at most two pieces.

/// Copies `out.len()` bytes starting at `start` of `buf`, continuing at the
/// beginning of `buf` past its end. `start < buf.len()` and
/// `out.len() <= buf.len()` are the caller's to ensure.
pub(crate) fn read(buf: &[u8], start: usize, out: &mut [u8]) {
    let first = out.len().min(buf.len() - start);
    let (head, rest) = out.split_at_mut(first);
    head.copy_from_slice(&buf[start..start + first]);
    rest.copy_from_slice(&buf[..rest.len()]);
}

/// Appends `len` bytes starting at `start` of `buf` to `out`, wrapping like
/// [`read`]. Same preconditions.
pub(crate) fn append(buf: &[u8], start: usize, len: usize, out: &mut Vec<u8>) {
    let first = len.min(buf.len() - start);
    out.extend_from_slice(&buf[start..start + first]);
    out.extend_from_slice(&buf[..len - first]);
}

/// Writes `bytes` into `buf` at `start`, wrapping like [`read`]. Same
/// preconditions.
pub(crate) fn write(buf: &mut [u8], start: usize, bytes: &[u8]) {
    let first = bytes.len().min(buf.len() - start);
    buf[start..start + first].copy_from_slice(&bytes[..first]);
    buf[..bytes.len() - first].copy_from_slice(&bytes[first..]);
}

/// The `u64` (little-endian) at `start`, wrapping. `buf.len() >= 8`.
pub(crate) fn read_u64(buf: &[u8], start: usize) -> u64 {
    let mut b = [0u8; 8];
    read(buf, start, &mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_and_write_split_across_the_end() {
        let mut buf = [0u8; 8];
        write(&mut buf, 6, &[1, 2, 3, 4]);
        assert_eq!(buf, [3, 4, 0, 0, 0, 0, 1, 2]);
        let mut out = [0u8; 4];
        read(&buf, 6, &mut out);
        assert_eq!(out, [1, 2, 3, 4]);
        let mut v = vec![9];
        append(&buf, 7, 3, &mut v);
        assert_eq!(v, [9, 2, 3, 4]);
        append(&buf, 0, 2, &mut v);
        assert_eq!(v, [9, 2, 3, 4, 3, 4]);
    }
}
