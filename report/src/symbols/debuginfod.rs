//! A debuginfod client, as elfutils' (and so perf's and gdb's) behaves:
//! the servers of `DEBUGINFOD_URLS` (space-separated) or of `--debuginfod
//! URL`, tried in turn; `GET URL/buildid/HEX/debuginfo` (or `executable`);
//! answers kept in elfutils' cache (`$DEBUGINFOD_CACHE_PATH`, else
//! `$XDG_CACHE_HOME/debuginfod_client`, else `~/.cache/debuginfod_client`,
//! as `HEX/debuginfo`), so the tools share what one fetched.
//!
//! Nothing is fetched unless a URL was given. A server is a machine on the
//! network: every request has a deadline for each read and write
//! (`DEBUGINFOD_TIMEOUT` seconds, default [`DEFAULT_TIMEOUT`]) and for the
//! whole transfer (`DEBUGINFOD_MAXTIME`, default [`DEFAULT_MAX_TIME`]), and
//! a size cap (`DEBUGINFOD_MAXSIZE` bytes, default [`DEFAULT_MAX_BYTES`])
//! checked against the announced length before the body is read and
//! against the bytes as they come. The body streams to a file in the
//! cache, never whole into memory; the caller uses it only if its build-id
//! is the one asked for.
//!
//! HTTP/1.1 by hand over a `TcpStream` (with rustls for `https://`), the
//! headers parsed by httparse: one GET, `Connection: close`, a body by
//! `Content-Length`, chunks or the end of the connection, a few redirects.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flightrec_files::{Access, Existing, NewFile};

/// Read and write deadline of one request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of one whole transfer.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(120);
/// Largest file fetched.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;
/// Largest response head read.
const MAX_HEAD: usize = 64 << 10;
/// Redirects followed at most.
const MAX_REDIRECTS: usize = 4;

/// What to fetch for a build-id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    Debuginfo,
    Executable,
}

impl Artifact {
    fn as_str(self) -> &'static str {
        match self {
            Artifact::Debuginfo => "debuginfo",
            Artifact::Executable => "executable",
        }
    }
}

/// The servers and the limits of every request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Debuginfod {
    pub urls: Vec<String>,
    pub cache: PathBuf,
    pub timeout: Duration,
    pub max_time: Duration,
    pub max_bytes: u64,
}

impl Debuginfod {
    /// The client for `urls` (from `--debuginfod`), else for the
    /// environment's `DEBUGINFOD_URLS` when `from_env`; `None` when there
    /// is no URL: nothing is fetched then.
    pub fn configured(urls: &[String], from_env: bool) -> Option<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let urls: Vec<String> = if urls.is_empty() {
            let from = env("DEBUGINFOD_URLS").filter(|_| from_env)?;
            from.split_whitespace().map(str::to_string).collect()
        } else {
            urls.to_vec()
        };
        if urls.is_empty() {
            return None;
        }
        let secs = |name: &str, default: Duration| {
            env(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&s| s > 0)
                .map_or(default, Duration::from_secs)
        };
        let cache = env("DEBUGINFOD_CACHE_PATH").map_or_else(
            || {
                env("XDG_CACHE_HOME")
                    .map(PathBuf::from)
                    .or_else(|| env("HOME").map(|h| Path::new(&h).join(".cache")))
                    .unwrap_or_else(|| std::env::temp_dir().join("flightrec-cache"))
                    .join("debuginfod_client")
            },
            PathBuf::from,
        );
        Some(Debuginfod {
            urls: urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_string())
                .collect(),
            cache,
            timeout: secs("DEBUGINFOD_TIMEOUT", DEFAULT_TIMEOUT),
            max_time: secs("DEBUGINFOD_MAXTIME", DEFAULT_MAX_TIME),
            max_bytes: env("DEBUGINFOD_MAXSIZE")
                .and_then(|v| v.trim().parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or(DEFAULT_MAX_BYTES),
        })
    }

    /// Where the cache keeps `what` of `build_id_hex`.
    pub fn cache_path(&self, build_id_hex: &str, what: Artifact) -> PathBuf {
        self.cache.join(build_id_hex).join(what.as_str())
    }

    /// The file of `what` for `build_id_hex`: from the cache, else fetched
    /// from the first server that has it into the cache. Without it, why
    /// (each server's answer).
    pub fn fetch(&self, build_id_hex: &str, what: Artifact) -> Result<PathBuf, String> {
        let cached = self.cache_path(build_id_hex, what);
        if std::fs::metadata(&cached).is_ok_and(|m| m.is_file() && m.len() > 0) {
            return Ok(cached);
        }
        let mut why = Vec::new();
        for url in &self.urls {
            let full = format!("{url}/buildid/{build_id_hex}/{}", what.as_str());
            match self.download(&full, &cached) {
                Ok(()) => return Ok(cached),
                Err(e) => why.push(format!("{url}: {e}")),
            }
        }
        Err(why.join("; "))
    }

    /// GETs `url` into `to` (created in the cache under a temporary name,
    /// renamed when complete).
    fn download(&self, url: &str, to: &Path) -> Result<(), String> {
        let dir = to.parent().ok_or("no cache directory")?;
        let started = Instant::now();
        let mut url = url.to_string();
        for _ in 0..=MAX_REDIRECTS {
            let mut response = self.get(&url, started)?;
            match response.status {
                200 => {}
                301 | 302 | 303 | 307 | 308 => {
                    let location = response
                        .location
                        .take()
                        .ok_or("a redirect without Location")?;
                    url = url::Url::parse(&url)
                        .and_then(|base| base.join(&location))
                        .map_err(|e| format!("a redirect to {location:?}: {e}"))?
                        .to_string();
                    continue;
                }
                404 => return Err("not found (404)".into()),
                s => return Err(format!("HTTP status {s}")),
            }
            if let Some(len) = response.length
                && len > self.max_bytes
            {
                return Err(format!(
                    "{len} bytes, more than the {} fetched at most (DEBUGINFOD_MAXSIZE)",
                    self.max_bytes
                ));
            }
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let name = to
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or("no cache file name")?;
            let mut new = NewFile::create(dir, name, Access::new(0o644, None))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            let copied = io::copy(
                &mut response.body.by_ref().take(self.max_bytes + 1),
                new.file_mut(),
            )
            .map_err(|e| e.to_string())?;
            if copied > self.max_bytes {
                return Err(format!(
                    "more than the {} bytes fetched at most (DEBUGINFOD_MAXSIZE)",
                    self.max_bytes
                ));
            }
            if response.length.is_some_and(|l| l != copied) {
                return Err(format!("the body ended after {copied} bytes"));
            }
            // Another client may have put the same file there meanwhile.
            return match new.commit(Existing::Replace) {
                Ok(_) => Ok(()),
                Err(e) => Err(format!("{}: {}", to.display(), e.into_io())),
            };
        }
        Err(format!("more than {MAX_REDIRECTS} redirects"))
    }

    /// Sends one GET and reads the response head.
    fn get(&self, url: &str, started: Instant) -> Result<Response, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
        let host = parsed.host_str().ok_or("no host")?.to_string();
        let tls = match parsed.scheme() {
            "http" => false,
            "https" => true,
            s => return Err(format!("{s}: only http and https are supported")),
        };
        let port = parsed.port_or_known_default().ok_or("no port")?;
        let addr = (host.trim_start_matches('[').trim_end_matches(']'), port)
            .to_socket_addrs()
            .map_err(|e| format!("{host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host}: no address"))?;
        let tcp = TcpStream::connect_timeout(&addr, self.timeout).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(self.timeout))
            .and_then(|()| tcp.set_write_timeout(Some(self.timeout)))
            .map_err(|e| e.to_string())?;
        let mut stream: Box<dyn Stream> = if tls {
            Box::new(tls_stream(&host, tcp)?)
        } else {
            Box::new(tcp)
        };
        let path = match parsed.query() {
            Some(q) => format!("{}?{q}", parsed.path()),
            None => parsed.path().to_string(),
        };
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: snapctl/{}\r\nAccept: */*\r\n\
             Connection: close\r\n\r\n",
            &parsed[url::Position::BeforeHost..url::Position::AfterPort],
            env!("CARGO_PKG_VERSION"),
        );
        stream
            .write_all(request.as_bytes())
            .and_then(|()| stream.flush())
            .map_err(|e| e.to_string())?;
        let deadline = started + self.max_time;
        let mut reader = BufReader::new(Deadline {
            inner: stream,
            deadline,
        });
        let head = read_head(&mut reader).map_err(|e| e.to_string())?;
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut parsed_head = httparse::Response::new(&mut headers);
        match parsed_head.parse(&head) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => return Err("a cut response head".into()),
            Err(e) => return Err(format!("a malformed response: {e}")),
        }
        let status = parsed_head.code.unwrap_or(0);
        let header = |name: &str| {
            parsed_head
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .and_then(|h| std::str::from_utf8(h.value).ok())
                .map(str::trim)
        };
        let chunked = header("Transfer-Encoding").is_some_and(|v| {
            v.rsplit(',')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
        });
        let length = if chunked {
            None
        } else {
            header("Content-Length")
                .or(header("X-DEBUGINFOD-SIZE"))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let location = header("Location").map(str::to_string);
        let body: Box<dyn Read> = match (chunked, length) {
            (true, _) => Box::new(Chunked {
                inner: reader,
                left: 0,
                done: false,
            }),
            (false, Some(len)) => Box::new(reader.take(len)),
            (false, None) => Box::new(reader),
        };
        Ok(Response {
            status,
            length,
            location,
            body,
        })
    }
}

/// A response whose head was read.
struct Response {
    status: u16,
    /// The body's announced length.
    length: Option<u64>,
    location: Option<String>,
    body: Box<dyn Read>,
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// A stream whose reads fail once `deadline` has passed.
struct Deadline {
    inner: Box<dyn Stream>,
    deadline: Instant,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if Instant::now() > self.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the transfer took longer than allowed (DEBUGINFOD_MAXTIME)",
            ));
        }
        self.inner.read(buf)
    }
}

/// The response head, up to and including the blank line.
fn read_head(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    loop {
        let n = reader
            .by_ref()
            .take((MAX_HEAD - head.len()) as u64)
            .read_until(b'\n', &mut head)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection before its answer",
            ));
        }
        if head.ends_with(b"\r\n\r\n") || head.ends_with(b"\n\n") {
            return Ok(head);
        }
        if head.len() >= MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a response head of more than 64 KiB",
            ));
        }
    }
}

/// A `Transfer-Encoding: chunked` body.
struct Chunked<R> {
    inner: R,
    /// Bytes left in the current chunk.
    left: u64,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = Vec::new();
            self.inner
                .by_ref()
                .take(1024)
                .read_until(b'\n', &mut line)?;
            let text = std::str::from_utf8(&line).map_err(|_| bad("a bad chunk size"))?;
            let size = text.split(';').next().unwrap_or("").trim();
            self.left = u64::from_str_radix(size, 16).map_err(|_| bad("a bad chunk size"))?;
            if self.left == 0 {
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the body ended inside a chunk",
            ));
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = Vec::new();
            self.inner.by_ref().take(2).read_until(b'\n', &mut crlf)?;
        }
        Ok(n)
    }
}

/// A TLS connection to `host` over `tcp`, checked against the system's
/// certificate authorities.
fn tls_stream(
    host: &str,
    tcp: TcpStream,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    let config = CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no certificate authorities found on this machine".to_string());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
                .map_err(|e| e.to_string())
        })
        .clone()?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    let conn = rustls::ClientConnection::new(config, name).map_err(|e| e.to_string())?;
    Ok(rustls::StreamOwned::new(conn, tcp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server on 127.0.0.1 answering each connection with `answer(path)`.
    fn serve(answer: impl Fn(&str) -> Vec<u8> + Send + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let Ok(head) = read_head(&mut reader) else {
                    continue;
                };
                let text = String::from_utf8_lossy(&head).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("").to_string();
                let _ = conn.write_all(&answer(&path));
            }
        });
        format!("http://{addr}")
    }

    fn client(urls: Vec<String>, cache: &Path) -> Debuginfod {
        Debuginfod {
            urls,
            cache: cache.to_path_buf(),
            timeout: Duration::from_secs(5),
            max_time: Duration::from_secs(10),
            max_bytes: 1 << 20,
        }
    }

    #[test]
    fn a_file_is_fetched_from_the_server_that_has_it_into_the_cache() {
        let missing = serve(|_| b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec());
        let chunked = serve(|path| {
            assert_eq!(path, "/buildid/abcd/debuginfo");
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                .to_vec()
        });
        let dir = tempfile::tempdir().unwrap();
        let d = client(vec![missing.clone(), chunked], dir.path());
        let got = d.fetch("abcd", Artifact::Debuginfo).unwrap();
        assert_eq!(got, dir.path().join("abcd/debuginfo"));
        assert_eq!(std::fs::read(&got).unwrap(), b"hello world");
        // Cached: no server needed any more.
        let offline = client(vec!["http://127.0.0.1:1".into()], dir.path());
        assert_eq!(offline.fetch("abcd", Artifact::Debuginfo).unwrap(), got);
        // No server has it: each one's answer is said.
        let err = client(vec![missing], dir.path())
            .fetch("ef01", Artifact::Executable)
            .unwrap_err();
        assert!(err.contains("not found (404)"), "{err}");
        assert!(!dir.path().join("ef01/executable").exists());
    }

    #[test]
    fn too_large_cut_and_garbage_answers_leave_nothing_in_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let big = serve(|_| b"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\nxx".to_vec());
        let err = client(vec![big], dir.path())
            .fetch("aa", Artifact::Debuginfo)
            .unwrap_err();
        assert!(err.contains("more than the 1048576"), "{err}");
        let endless = serve(|_| {
            let mut r = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
            r.extend(std::iter::repeat_n(b'x', 2 << 20));
            r
        });
        let err = client(vec![endless], dir.path())
            .fetch("bb", Artifact::Debuginfo)
            .unwrap_err();
        assert!(err.contains("fetched at most"), "{err}");
        let cut = serve(|_| b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec());
        let err = client(vec![cut], dir.path())
            .fetch("cc", Artifact::Debuginfo)
            .unwrap_err();
        assert!(err.contains("ended after 3 bytes"), "{err}");
        let garbage = serve(|_| b"\x00\x01 not http\r\n\r\n".to_vec());
        assert!(
            client(vec![garbage], dir.path())
                .fetch("dd", Artifact::Debuginfo)
                .is_err()
        );
        for id in ["aa", "bb", "cc", "dd"] {
            let left: Vec<_> = std::fs::read_dir(dir.path().join(id))
                .map(|d| d.flatten().map(|e| e.file_name()).collect())
                .unwrap_or_default();
            assert!(left.is_empty(), "{id}: {left:?}");
        }
    }

    #[test]
    fn a_server_that_never_answers_is_given_up_after_the_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let dir = tempfile::tempdir().unwrap();
        let d = Debuginfod {
            timeout: Duration::from_millis(300),
            ..client(vec![url], dir.path())
        };
        let started = Instant::now();
        let err = d.fetch("aa", Artifact::Debuginfo).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
        drop(listener);
    }

    #[test]
    fn nothing_is_configured_without_a_url() {
        assert_eq!(Debuginfod::configured(&[], false), None);
        let d = Debuginfod::configured(&["http://127.0.0.1:8002/".into()], false).unwrap();
        assert_eq!(d.urls, vec!["http://127.0.0.1:8002".to_string()]);
    }
}
