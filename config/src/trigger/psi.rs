//! The `psi` value of a trigger, `"<cpu|memory|io> <some|full> <stall>
//! <window>"`, and the text the kernel's PSI trigger interface reads.

use std::time::Duration;

use crate::message::quoted;
use crate::units::HumanDuration;

/// The kernel's PSI trigger window bounds (kernel/sched/psi.c).
pub const PSI_WINDOW_MIN: Duration = Duration::from_millis(500);
pub const PSI_WINDOW_MAX: Duration = Duration::from_secs(10);

/// The resource a PSI trigger watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsiResource {
    Cpu,
    Memory,
    Io,
}

impl PsiResource {
    /// The file name, in /proc/pressure and in a cgroup directory (`cpu`,
    /// `cpu.pressure`).
    pub fn as_str(self) -> &'static str {
        match self {
            PsiResource::Cpu => "cpu",
            PsiResource::Memory => "memory",
            PsiResource::Io => "io",
        }
    }
}

/// A parsed `psi` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsiSpec {
    pub resource: PsiResource,
    /// `full` (every task stalled) rather than `some`.
    pub full: bool,
    pub stall: Duration,
    pub window: Duration,
}

impl PsiSpec {
    /// Parses `"cpu some 100ms 1s"`; the error is a sentence.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let usage = || {
            format!(
                "psi = {} is not \"<cpu|memory|io> <some|full> <stall> <window>\", \
                 e.g. \"cpu some 100ms 1s\"",
                quoted(text)
            )
        };
        let [resource, kind, stall, window] = words[..] else {
            return Err(usage());
        };
        let resource = match resource {
            "cpu" => PsiResource::Cpu,
            "memory" => PsiResource::Memory,
            "io" => PsiResource::Io,
            _ => return Err(usage()),
        };
        let full = match kind {
            "some" => false,
            "full" => true,
            _ => return Err(usage()),
        };
        let stall = HumanDuration::parse(stall)?.get();
        let window = HumanDuration::parse(window)?.get();
        if !(PSI_WINDOW_MIN..=PSI_WINDOW_MAX).contains(&window) {
            return Err(format!(
                "psi = {}: the window must be 500ms to 10s (the kernel's PSI limits)",
                quoted(text)
            ));
        }
        if stall.is_zero() || stall > window {
            return Err(format!(
                "psi = {}: the stall must be more than 0 and at most the window",
                quoted(text)
            ));
        }
        Ok(Self {
            resource,
            full,
            stall,
            window,
        })
    }

    /// What the kernel's trigger interface reads: `some 100000 1000000`.
    pub fn kernel_text(&self) -> String {
        format!(
            "{} {} {}",
            if self.full { "full" } else { "some" },
            self.stall.as_micros(),
            self.window.as_micros()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psi_values_are_parsed_and_bounded() {
        let s = PsiSpec::parse("memory full 150ms 2s").unwrap();
        assert_eq!(s.resource, PsiResource::Memory);
        assert!(s.full);
        assert_eq!(s.kernel_text(), "full 150000 2000000");
        for bad in [
            "cpu some 100ms",
            "disk some 1s 2s",
            "cpu most 1s 2s",
            "cpu some x 1s",
        ] {
            assert!(PsiSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(
            PsiSpec::parse("cpu some 100ms 20s")
                .unwrap_err()
                .contains("500ms to 10s")
        );
        assert!(
            PsiSpec::parse("cpu some 2s 1s")
                .unwrap_err()
                .contains("at most the window")
        );
    }
}
