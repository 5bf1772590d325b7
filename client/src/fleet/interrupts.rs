//! Signals that would end snapctl, caught while it has something to
//! clean up first (a partial download).

/// SIGINT, SIGTERM and SIGHUP caught during a download (instead of
/// ending snapctl at once), so the partial file can be removed first.
pub struct Interrupts {
    pipes: Vec<(i32, signal_hook::SigId, tokio::net::UnixStream)>,
}

impl Interrupts {
    pub fn catch() -> std::io::Result<Self> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut pipes = Vec::new();
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            let (read, write) = std::os::unix::net::UnixStream::pair()?;
            read.set_nonblocking(true)?;
            let id = signal_hook::low_level::pipe::register(signal, write)?;
            pipes.push((signal, id, tokio::net::UnixStream::from_std(read)?));
        }
        Ok(Self { pipes })
    }

    /// The first of the signals that arrives.
    pub async fn wait(&self) -> i32 {
        let [(int, _, a), (term, _, b), (hup, _, c)] = &self.pipes[..] else {
            unreachable!("three signals are caught");
        };
        tokio::select! {
            () = arrived(a) => *int,
            () = arrived(b) => *term,
            () = arrived(c) => *hup,
        }
    }
}

/// Once the signal's handler wrote to `pipe` (readiness alone may be
/// spurious).
async fn arrived(pipe: &tokio::net::UnixStream) {
    loop {
        if pipe.readable().await.is_err() {
            break;
        }
        match pipe.try_read(&mut [0u8; 1]) {
            Ok(1) => return,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Closed or failed: no signal will come this way.
            _ => break,
        }
    }
    std::future::pending().await
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        for (_, id, _) in &self.pipes {
            signal_hook::low_level::unregister(*id);
        }
    }
}
