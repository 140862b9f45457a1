//! A small HTTP/1.0 server on the host's loopback interface for the Linux guests' network
//! tests: one file of reproducible pseudo-random contents, answered to `GET` with its
//! `Content-Length`. QEMU's user-mode network takes a guest's connections to 10.0.2.2 to the
//! host's 127.0.0.1, so the guest fetches [`FileServer::guest_url`].

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::Result;

/// How long a connection may take to send its request line and headers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one write to a client may wait for it to take data (a guest under icount is slow).
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);

/// The host as QEMU's user-mode network shows it to the guest.
const HOST_FROM_GUEST: &str = "10.0.2.2";

/// The SHA-256 digest of `data` in lower-case hexadecimal, as busybox's `sha256sum` in the
/// guest prints it.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `size` bytes of the same pseudo-random contents on every run (xorshift64*, fixed seed): what
/// [`FileServer`] serves.
pub fn contents(size: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut data = Vec::with_capacity(size + 8);
    while data.len() < size {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        data.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    data.truncate(size);
    data
}

/// A server of one file (or of a numbered set, [`FileServer::start_set`]) on 127.0.0.1, at a
/// port the system chose, in a thread of its own that ends when the server is dropped.
pub struct FileServer {
    port: u16,
    /// The file's path in URLs (`/keel-<size>.bin`; of a set, the paths' common start).
    path: String,
    /// SHA-256 of the contents, in hexadecimal.
    pub sha256: String,
    /// The contents' length in bytes.
    pub size: usize,
    /// Complete answers sent with the file.
    served: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The size of the file `cargo xtask run` serves for the demo's fetch.
const DEMO_FILE_SIZE: usize = 1_000_000;

/// Starts serving the demo's file, as `cargo xtask run` does for a machine with a network card,
/// and returns it with the line that announces it (`serving a 1,000,000-byte file at URL
/// (SHA-256 HEX)`), which `run` prints and the README demo's scenario reads the port from.
pub fn demo_file() -> Result<(FileServer, String)> {
    let server = FileServer::start(DEMO_FILE_SIZE)?;
    let line = format!(
        "serving a {}-byte file at {} (SHA-256 {})",
        crate::plots::thousands(DEMO_FILE_SIZE as u64),
        server.guest_url(),
        server.sha256
    );
    Ok((server, line))
}

impl FileServer {
    /// Starts serving `size` bytes of [`contents`].
    pub fn start(size: usize) -> Result<Self> {
        let path = format!("/keel-{size}.bin");
        Self::serve(vec![(path.clone(), contents(size))], path)
    }

    /// Starts serving a set of files, `/keel-set-<i>.bin` of `sizes[i]` bytes each (each the
    /// start of [`contents`] rotated by `i`, so no two are alike): the "image saving" test's
    /// images. [`FileServer::sha256`] is then that of all of them in order, one after another,
    /// and [`FileServer::size`] their total.
    pub fn start_set(sizes: &[usize]) -> Result<Self> {
        let longest = sizes.iter().copied().max().unwrap_or(0);
        let pool = contents(longest + sizes.len());
        let files = sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| (format!("/keel-set-{i}.bin"), pool[i..i + size].to_vec()))
            .collect();
        Self::serve(files, "/keel-set-".to_string())
    }

    /// Serves `files` (URL path, contents); `path` is what [`FileServer::guest_url`] shows.
    fn serve(files: Vec<(String, Vec<u8>)>, path: String) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| format!("HTTP server: binding 127.0.0.1 port 0: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("HTTP server: its address: {e}"))?
            .port();
        let all: Vec<u8> = files.iter().flat_map(|(_, data)| data.clone()).collect();
        let (size, sha256) = (all.len(), sha256_hex(&all));
        let files = Arc::new(files);
        let served = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (served, stop) = (served.clone(), stop.clone());
            std::thread::spawn(move || {
                for connection in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    // One client at a time; a broken connection is that client's problem.
                    if let Ok(stream) = connection {
                        if answer(stream, &files).is_ok_and(|sent| sent) {
                            served.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            })
        };
        Ok(Self {
            port,
            path,
            sha256,
            size,
            served,
            stop,
            thread: Some(thread),
        })
    }

    /// The file's URL as the guest of QEMU's user-mode network reaches it.
    pub fn guest_url(&self) -> String {
        format!("http://{HOST_FROM_GUEST}:{}{}", self.port, self.path)
    }

    /// The file's URL on the host.
    #[cfg(test)]
    fn host_url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }

    /// How many times a whole file has been sent.
    pub fn served(&self) -> usize {
        self.served.load(Ordering::SeqCst)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the thread from accept().
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Reads one request from `stream` and answers it: a file of `files` for `GET <its path>`, 404
/// for another path, 405 for another method. Returns whether a file was sent whole.
fn answer(stream: TcpStream, files: &[(String, Vec<u8>)]) -> std::io::Result<bool> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers, up to the empty line: none of them matters here.
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim_end().is_empty() {
            break;
        }
    }
    let mut words = request_line.split_whitespace();
    let (status, body): (&str, &[u8]) = match (words.next(), words.next()) {
        (Some("GET"), Some(target)) if files.iter().any(|(path, _)| path == target) => (
            "200 OK",
            files
                .iter()
                .find(|(path, _)| path == target)
                .map_or(&[][..], |(_, data)| data),
        ),
        (Some("GET"), _) => ("404 Not Found", b"not found\n"),
        _ => ("405 Method Not Allowed", b"only GET\n"),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.0 {status}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    stream.flush()?;
    Ok(status.starts_with("200"))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// GETs `url` (http://127.0.0.1:port/path) and returns the whole answer.
    fn get(url: &str) -> Vec<u8> {
        let rest = url.strip_prefix("http://").unwrap();
        let (address, path) = rest.split_at(rest.find('/').unwrap());
        let mut stream = TcpStream::connect(address).unwrap();
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        answer
    }

    #[test]
    fn sha256_is_shown_as_sha256sum_prints_it() {
        // FIPS 180-4's examples: 64 lower-case hexadecimal digits, leading zeros kept.
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(&[0u8; 56]),
            "d4817aa5497628e7c77e6b606107042bbba3130888c5f47a375e6179be789fbb"
        );
    }

    #[test]
    fn the_demo_file_is_announced_with_its_url_and_digest() {
        let (server, line) = demo_file().unwrap();
        assert_eq!(
            line,
            format!(
                "serving a 1,000,000-byte file at {} (SHA-256 {})",
                server.guest_url(),
                sha256_hex(&contents(1_000_000))
            )
        );
        assert!(server.guest_url().ends_with("/keel-1000000.bin"));
    }

    #[test]
    fn contents_are_reproducible_and_of_the_size_asked() {
        assert_eq!(contents(0), b"");
        assert_eq!(contents(13).len(), 13);
        assert_eq!(contents(13)[..], contents(100)[..13]);
        assert_ne!(contents(16)[..8], contents(16)[8..]);
    }

    #[test]
    fn serves_the_file_with_its_length_and_404_for_other_paths() {
        let server = FileServer::start(100_003).unwrap();
        assert!(server.guest_url().starts_with("http://10.0.2.2:"));
        assert!(server.guest_url().ends_with("/keel-100003.bin"));
        let answer = get(&server.host_url());
        let header_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let header = String::from_utf8_lossy(&answer[..header_end]);
        assert!(header.starts_with("HTTP/1.0 200 OK\r\n"), "{header}");
        assert!(
            header.contains("\r\nContent-Length: 100003\r\n"),
            "{header}"
        );
        assert_eq!(answer[header_end..], contents(100_003)[..]);
        assert_eq!(server.sha256, sha256_hex(&answer[header_end..]));
        let other = get(&server.host_url().replace("keel-", "other-"));
        assert!(other.starts_with(b"HTTP/1.0 404 Not Found\r\n"));
        assert_eq!(server.served(), 1);
    }
}
