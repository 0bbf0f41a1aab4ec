//! Helpers shared by the server's integration tests. Each test binary uses part of them.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use mcpr_core::Provider;
use mcpr_provider_files::{FilesConfig, FilesProvider};
use mcpr_server::{ServerState, Settings};

/// The files the direct-path comparison tests read, in a temp dir (kept alive by the first
/// value), with its canonical root and a server over it:
/// - `small.txt`, 1 KiB of text;
/// - `tricky.txt`, over the splice threshold, with every byte JSON must escape and non-ASCII;
/// - `tiny.txt`, escapes under the threshold;
/// - `bin.dat`, 5,000 bytes of binary;
/// - `big.dat`, 700,000 bytes: over HTTP's one-frame size and past the files provider's
///   inline read size (so a direct stdio read of it waits and finishes on its own task);
/// - `with space.md`, `ünï.md`, and a directory `sub` holding `a.md`.
pub fn comparison_tree() -> (tempfile::TempDir, PathBuf, Arc<ServerState>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("small.txt"), "x".repeat(1024)).unwrap();
    let mut tricky = String::new();
    for c in 0u8..0x20 {
        tricky.push(char::from(c));
    }
    tricky.push_str("\"\\ é ✓ 𝄞 </script>");
    std::fs::write(root.join("tricky.txt"), tricky.repeat(40)).unwrap();
    std::fs::write(root.join("tiny.txt"), "a\"b\nc").unwrap();
    std::fs::write(
        root.join("bin.dat"),
        (0..=255u8).cycle().take(5000).collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(
        root.join("big.dat"),
        (0..=255u8).cycle().take(700_000).collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(root.join("with space.md"), "# spaced").unwrap();
    std::fs::write(root.join("ünï.md"), "# unicode name").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/a.md"), "a").unwrap();
    let provider: Arc<dyn Provider> =
        Arc::new(FilesProvider::new(FilesConfig::new(&root)).unwrap());
    let state = ServerState::new(Settings::default(), vec![provider]);
    (dir, root, state)
}

/// An HTTP answer as the tests look at it: status, the value of `header` (empty when
/// absent), and the body's bytes.
pub async fn answer(resp: reqwest::Response, header: &str) -> (u16, String, Vec<u8>) {
    let status = resp.status().as_u16();
    let value = resp
        .headers()
        .get(header)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, value, resp.bytes().await.unwrap().to_vec())
}

/// Serve `state` over HTTP with `settings` until the test ends; the base URL.
pub async fn spawn_http(
    state: Arc<ServerState>,
    settings: mcpr_server::http::HttpSettings,
) -> String {
    let server = mcpr_server::http::serve(state, settings, std::future::pending())
        .await
        .unwrap();
    let base = format!("http://{}", server.local_addr);
    tokio::spawn(async move {
        let _ = server.wait().await;
    });
    base
}

/// Our stdio transport on one end of a socket pair (as Node's `child_process` connects a
/// server: one socket for both directions), and the client's halves of the other end.
/// Shutting the write half down (or dropping it) ends the server's input.
pub fn stdio_socket() -> (
    mcpr_server::stdio::StdioTransport,
    tokio::net::unix::OwnedReadHalf,
    tokio::net::unix::OwnedWriteHalf,
) {
    let (server, client) = std::os::unix::net::UnixStream::pair().unwrap();
    let input = std::os::fd::OwnedFd::from(server.try_clone().unwrap());
    let transport =
        mcpr_server::stdio::StdioTransport::on_threads(input, std::os::fd::OwnedFd::from(server));
    client.set_nonblocking(true).unwrap();
    let (r, w) = tokio::net::UnixStream::from_std(client)
        .unwrap()
        .into_split();
    (transport, r, w)
}

/// A files mount whose read in place blocks until released when `hangs` says so of the URI,
/// as a `stat` on a dead disk or network file system does; its bounded `read` answers as the
/// files provider does. The hung-read tests of both transports use it.
pub struct Hanging {
    files: FilesProvider,
    hangs: fn(&str) -> bool,
    released: std::sync::Mutex<bool>,
    wake: std::sync::Condvar,
    /// Reads in place that hung and have ended.
    pub ended: std::sync::atomic::AtomicUsize,
    /// The names of the threads the hung reads ran on, in order.
    pub hung_on: std::sync::Mutex<Vec<String>>,
}

impl Hanging {
    pub fn new(files: FilesProvider, hangs: fn(&str) -> bool) -> Self {
        Self {
            files,
            hangs,
            released: std::sync::Mutex::new(false),
            wake: std::sync::Condvar::new(),
            ended: std::sync::atomic::AtomicUsize::new(0),
            hung_on: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn release(&self) {
        *mcpr_core::sync::lock(&self.released) = true;
        self.wake.notify_all();
    }
}

#[async_trait::async_trait]
impl Provider for Hanging {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.files.info()
    }

    async fn list(
        &self,
        page: mcpr_core::PageRequest,
    ) -> mcpr_core::Result<mcpr_core::Page<mcpr_core::ResourceMeta>> {
        self.files.list(page).await
    }

    async fn read(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> mcpr_core::Result<mcpr_core::ReadOutput> {
        self.files.read(uri, limits).await
    }

    fn read_now(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> Option<mcpr_core::Result<mcpr_core::ReadOutput>> {
        let released = mcpr_core::sync::lock(&self.released);
        if (self.hangs)(uri.as_str()) && !*released {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            mcpr_core::sync::lock(&self.hung_on).push(thread);
            // One flag: a poisoned lock still holds a usable value.
            drop(
                self.wake
                    .wait_while(released, |r| !*r)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            self.ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        } else {
            drop(released);
        }
        self.files.read_now(uri, limits)
    }
}

/// Releases the hung reads when dropped: a failing assertion must not leave them hung.
pub struct Release(pub Arc<Hanging>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// A files mount whose reads of names starting with "gate" never finish in place and wait
/// until the test lets that name go; every read it does is counted. The tests of reads that
/// wait and of their cancellation use it.
pub struct Gated {
    files: FilesProvider,
    released: tokio::sync::watch::Sender<std::collections::HashSet<String>>,
    /// Gated reads begun.
    pub started: std::sync::atomic::AtomicUsize,
    /// Reads done, in place or not.
    pub reads: std::sync::atomic::AtomicUsize,
}

impl Gated {
    pub fn new(files: FilesProvider) -> Self {
        Self {
            files,
            released: tokio::sync::watch::Sender::new(Default::default()),
            started: Default::default(),
            reads: Default::default(),
        }
    }

    /// Lets the reads of `name` finish.
    pub fn release(&self, name: &str) {
        self.released.send_modify(|r| {
            r.insert(name.to_owned());
        });
    }

    /// The gated name a URI reads, if any.
    fn gate(uri: &mcpr_core::ResourceUri) -> Option<String> {
        let name = uri.as_str().rsplit('/').next()?;
        name.starts_with("gate").then(|| name.to_owned())
    }
}

#[async_trait::async_trait]
impl Provider for Gated {
    fn info(&self) -> &mcpr_core::ProviderInfo {
        self.files.info()
    }

    async fn list(
        &self,
        page: mcpr_core::PageRequest,
    ) -> mcpr_core::Result<mcpr_core::Page<mcpr_core::ResourceMeta>> {
        self.files.list(page).await
    }

    async fn read(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> mcpr_core::Result<mcpr_core::ReadOutput> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(name) = Self::gate(uri) {
            self.started
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut released = self.released.subscribe();
            released.wait_for(|r| r.contains(&name)).await.unwrap();
        }
        self.files.read(uri, limits).await
    }

    fn read_now(
        &self,
        uri: &mcpr_core::ResourceUri,
        limits: &mcpr_core::ReadLimits,
    ) -> Option<mcpr_core::Result<mcpr_core::ReadOutput>> {
        if Self::gate(uri).is_some() {
            return None;
        }
        let read = self.files.read_now(uri, limits);
        if read.is_some() {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        read
    }
}
