//! Containers' names and labels, asked of their runtimes: the Docker
//! Engine API, which Docker and `podman system service` serve on a Unix
//! socket (`GET /containers/json?all=true`).
//!
//! Asked by a thread of its own, never on a path a dump or a request
//! waits on: every few seconds it looks for containers the recorder has
//! seen and this cache has not named, and asks each socket once, with a
//! deadline and a size cap. A dump takes what the cache knows. A socket
//! that is absent, refuses or does not answer costs nothing but the names;
//! the answer's text is another program's, bounded and parsed as data.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Containers named at most: the oldest go first.
pub const MAX_NAMED: usize = 4096;
/// How long one answer may take, connection included.
pub const DEADLINE: Duration = Duration::from_secs(1);
/// Largest answer read (a listing of thousands of containers).
pub const MAX_ANSWER: usize = 8 << 20;
/// How often the thread looks for containers it has not named.
const ROUND: Duration = Duration::from_secs(2);

/// What a runtime says of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named {
    /// Without Docker's leading `/`.
    pub name: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Default)]
struct Cache {
    by_id: HashMap<String, Named>,
    order: std::collections::VecDeque<String>,
    stop: bool,
}

/// The names known, and the thread that asks for more.
pub struct RuntimeNames {
    cache: Arc<(Mutex<Cache>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

fn lock(m: &Mutex<Cache>) -> std::sync::MutexGuard<'_, Cache> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RuntimeNames {
    /// Starts asking `sockets` about the containers `seen` gives (their
    /// ids), now and every few seconds.
    pub fn start(
        sockets: Vec<PathBuf>,
        seen: Box<dyn Fn() -> Vec<String> + Send>,
    ) -> io::Result<Self> {
        let cache: Arc<(Mutex<Cache>, Condvar)> = Arc::default();
        let c2 = Arc::clone(&cache);
        let thread = std::thread::Builder::new()
            .name("flightrec-names".into())
            .spawn(move || run(&c2, &sockets, &*seen))?;
        Ok(RuntimeNames {
            cache,
            thread: Some(thread),
        })
    }

    /// What the runtimes said of container `id`, if they said anything.
    pub fn get(&self, id: &str) -> Option<Named> {
        lock(&self.cache.0).by_id.get(id).cloned()
    }

    /// The ids of the containers named `name`.
    pub fn ids_named(&self, name: &str) -> Vec<String> {
        let name = name.strip_prefix('/').unwrap_or(name);
        lock(&self.cache.0)
            .by_id
            .iter()
            .filter(|(_, n)| n.name == name)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

impl Drop for RuntimeNames {
    fn drop(&mut self) {
        lock(&self.cache.0).stop = true;
        self.cache.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(cache: &(Mutex<Cache>, Condvar), sockets: &[PathBuf], seen: &dyn Fn() -> Vec<String>) {
    let (m, woken) = cache;
    let mut unanswered: HashMap<PathBuf, u32> = HashMap::new();
    loop {
        let unknown: Vec<String> = {
            let c = lock(m);
            if c.stop {
                return;
            }
            seen()
                .into_iter()
                .filter(|id| !c.by_id.contains_key(id))
                .collect()
        };
        if !unknown.is_empty() {
            for socket in sockets.iter().filter(|s| s.exists()) {
                match list_containers(socket) {
                    Ok(found) => {
                        unanswered.remove(socket);
                        let mut c = lock(m);
                        for (id, named) in found {
                            remember(&mut c, id, named);
                        }
                    }
                    Err(e) => {
                        let n = unanswered.entry(socket.clone()).or_default();
                        *n += 1;
                        if *n == 1 {
                            tracing::info!(
                                socket = %socket.display(),
                                "containers are not named from this runtime socket: {e}"
                            );
                        }
                    }
                }
            }
        }
        let c = lock(m);
        if c.stop {
            return;
        }
        let _ = woken.wait_timeout(c, ROUND);
    }
}

fn remember(c: &mut Cache, id: String, named: Named) {
    if c.by_id.insert(id.clone(), named).is_none() {
        c.order.push_back(id);
        while c.order.len() > MAX_NAMED {
            if let Some(old) = c.order.pop_front() {
                c.by_id.remove(&old);
            }
        }
    }
}

/// Every container `socket`'s runtime knows, exited ones included.
fn list_containers(socket: &Path) -> io::Result<Vec<(String, Named)>> {
    let body = http_get(socket, "/containers/json?all=true")?;
    parse_listing(&body)
}

/// The containers of a `/containers/json` answer.
pub fn parse_listing(body: &[u8]) -> io::Result<Vec<(String, Named)>> {
    let bad = |e: serde_json::Error| io::Error::new(io::ErrorKind::InvalidData, e);
    let list: Vec<serde_json::Value> = serde_json::from_slice(body).map_err(bad)?;
    Ok(list
        .iter()
        .filter_map(|c| {
            let id = c.get("Id")?.as_str()?.to_string();
            let name = c
                .get("Names")
                .and_then(|n| n.as_array())
                .and_then(|n| n.first())
                .and_then(|n| n.as_str())
                .map(|n| n.strip_prefix('/').unwrap_or(n).to_string())
                .unwrap_or_default();
            let labels = c
                .get("Labels")
                .and_then(|l| l.as_object())
                .map(|l| {
                    l.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            Some((id, Named { name, labels }))
        })
        .collect())
}

/// The body of `GET path` on the HTTP server at `socket`, within
/// [`DEADLINE`] and [`MAX_ANSWER`] bytes.
fn http_get(socket: &Path, path: &str) -> io::Result<Vec<u8>> {
    let deadline = std::time::Instant::now() + DEADLINE;
    let mut stream = UnixStream::connect(socket)?;
    stream.set_write_timeout(Some(DEADLINE))?;
    // HTTP/1.0: the server closes the connection after the answer.
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no answer within 1 s",
            ));
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
        if answer.len() > MAX_ANSWER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("an answer of more than {MAX_ANSWER} bytes"),
            ));
        }
    }
    http_body(&answer)
}

/// The body of an HTTP answer with status 200 (chunked or not).
pub fn http_body(answer: &[u8]) -> io::Result<Vec<u8>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("not an HTTP answer"))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(bad(&format!(
            "the runtime answered {}",
            crate::log_limit::cut(status)
        )));
    }
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &answer[split + 4..];
    if !chunked {
        return Ok(body.to_vec());
    }
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("a torn chunk"))?;
        let size = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .ok_or_else(|| bad("a bad chunk size"))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or_else(|| bad("a torn chunk"))?;
        out.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or_else(|| bad("a torn chunk"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_names_containers_with_their_labels() {
        let body = br#"[{"Id":"a2ad","Names":["/busy1"],"Labels":{"app":"busy","io.kubernetes.pod.name":"mypod"}},
            {"Id":"b3","Names":[],"Labels":null},{"Names":["/no-id"]}]"#;
        let found = parse_listing(body).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].0, "a2ad");
        assert_eq!(found[0].1.name, "busy1");
        assert_eq!(found[0].1.labels["io.kubernetes.pod.name"], "mypod");
        assert_eq!(found[1].1, Named::default());
        assert!(parse_listing(b"<html>").is_err());
    }

    #[test]
    fn answers_are_read_plain_or_chunked_and_errors_refused() {
        let plain = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1]";
        assert_eq!(http_body(plain).unwrap(), b"[1]");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[1\r\n1\r\n]\r\n0\r\n\r\n";
        assert_eq!(http_body(chunked).unwrap(), b"[1]");
        let missing = b"HTTP/1.1 404 Not Found\r\n\r\n{}";
        assert!(http_body(missing).unwrap_err().to_string().contains("404"));
        assert!(http_body(b"garbage").is_err());
        let torn = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\nab";
        assert!(http_body(torn).is_err());
    }

    #[test]
    fn a_socket_nobody_answers_costs_its_deadline_at_most() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mute.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let started = std::time::Instant::now();
        let e = http_get(&path, "/containers/json").unwrap_err();
        assert!(
            started.elapsed() < DEADLINE + Duration::from_millis(500),
            "{e}"
        );
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
    }
}
