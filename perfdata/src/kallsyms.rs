//! Where the kernel's text starts, as perf's kernel MMAP record
//! (`[kernel.kallsyms]_text`) gives it: `_text` in a kallsyms file.

/// `_text` from a kallsyms file (`ffffffff81000000 T _text`); `None` when
/// absent or hidden (kptr_restrict shows zeros). Read a line at a time up
/// to `_text`, one of the first: the whole file is megabytes.
pub fn kallsyms_text(kallsyms: impl std::io::BufRead) -> Option<u64> {
    kallsyms.lines().map_while(Result::ok).find_map(|line| {
        let mut f = line.split_whitespace();
        let addr = f.next()?;
        let _kind = f.next()?;
        (f.next()? == "_text")
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
            .filter(|&a| a != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_text_is_found_and_zero_means_hidden() {
        let k = "ffffffff81000000 T startup_64\nffffffff81000000 T _text\n";
        assert_eq!(kallsyms_text(k.as_bytes()), Some(0xffff_ffff_8100_0000));
        assert_eq!(kallsyms_text(&b"0000000000000000 T _text\n"[..]), None);
        assert_eq!(kallsyms_text(&b"ffffffff81000000 T _stext\n"[..]), None);
    }
}
