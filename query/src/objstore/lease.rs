//! The writer lease: one writer per store prefix, across machines.
//!
//! The local `flock` (`engine::store::lock`) keeps two writers off one `--data-dir`; two
//! machines given the same `--data-url` share no disk, so a writer also holds a lease object in
//! the bucket, `<prefix>/writer-lease.json`: the holder (the node id of its data directory,
//! host, pid, data directory) and an expiry (wall-clock ms since the epoch). Every change is a
//! conditional put — `PutMode::Create` (`If-None-Match: *`) when there is no lease,
//! `PutMode::Update` (`If-Match: <etag>`) otherwise — so of two writers racing for a lease
//! exactly one wins.
//!
//! - **Acquire.** No lease: create it. A lease that is released, expired, or held by this
//!   data directory's node id (the previous process on this directory died: the caller holds
//!   the directory's `flock`, so no live process uses it) is replaced by an update against the
//!   etag just read. Any other lease refuses the writer with an error naming the holder and
//!   when the lease expires.
//! - **Renew.** A thread renews the lease every third of its time to live, by an update against
//!   the etag of its last write. A failed precondition means another writer took it over: the
//!   lease is lost for good.
//! - **Fence.** Every put and delete of the store's objects first checks the lease: lost, or
//!   not renewed within two thirds of its time to live (the bucket unreachable), refuses the
//!   write. A flush then fails and keeps its rows in the WAL, as when the bucket is
//!   unreachable; a later successful renewal (nobody took the lease meanwhile) lets flushes
//!   resume. The remaining third of the time to live is the margin for clock skew between
//!   machines and for a put already in flight.
//! - **Release.** Dropping the storage (the store closed) marks the lease released, so the next
//!   writer takes over at once; a killed writer's lease is taken over once it expires.
//!
//! On `file://` (`LocalFileSystem`) there is no conditional update: an update compares the
//! etag, deletes and creates, which two writers racing for the same expired lease can both
//! win. Use `file://` for one machine (where the `flock` of the data directory is the guard)
//! or tests.

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use lockstep_engine::manifest::StoreId;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::block;

/// The lease object's name under the store's prefix.
pub const LEASE_OBJECT: &str = "writer-lease.json";

/// Default time to live of a writer lease.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The file in a data directory holding its node id.
pub const NODE_ID_FILE: &str = "node-id";

/// What the lease object holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The node id of the holder's data directory.
    pub holder: String,
    /// Random per acquisition: tells this holder's writes from those of a later process on the
    /// same data directory.
    pub token: String,
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's data directory.
    pub data_dir: String,
    /// When the lease expires unless renewed (ms since the Unix epoch, the holder's clock).
    pub expires_unix_ms: u64,
    /// The time to live the holder renews with (ms).
    pub ttl_ms: u64,
    /// Released by a writer that closed: free at once.
    pub released: bool,
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The node id of the data directory `dir`, created (random) on first use and kept in
/// `dir/node-id`: a restarted writer on the same directory recognises its own lease.
pub fn node_id(dir: &Path) -> io::Result<String> {
    let path = dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
    let id = random_id();
    std::fs::create_dir_all(dir)?;
    lockstep_engine::storage::write_via_rename(&lockstep_engine::storage::OsStorage, &path, id.as_bytes())?;
    Ok(id)
}

/// 128 random bits as 32 hex digits, drawn as a store id is ([`StoreId::random`]).
fn random_id() -> String {
    StoreId::random().to_string()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The shared state of a held lease (the renewal thread and the fence read it).
#[derive(Debug)]
pub(super) struct LeaseState {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    url: String,
    ttl: Duration,
    /// The record last written and the version it got.
    current: Mutex<(LeaseRecord, UpdateVersion)>,
    /// Writes are allowed until then (two thirds of the time to live after the last renewal
    /// was sent).
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    /// Why the lease was lost, once it is (for the fence's errors).
    lost_why: Mutex<String>,
}

/// A held writer lease; dropping it stops the renewals and releases the lease.
#[derive(Debug)]
pub struct WriterLease {
    state: Arc<LeaseState>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lease_error(url: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("object store {url}: writer lease {LEASE_OBJECT}: {e}"))
}

/// `PutMode::Update`, or on a store without conditional updates (`LocalFileSystem`): compare
/// the etag, delete, create (not atomic; see the module docs).
async fn update(
    store: &Arc<dyn ObjectStore>,
    key: &ObjectPath,
    payload: Bytes,
    version: UpdateVersion,
) -> object_store::Result<PutResult> {
    let options = PutOptions { mode: PutMode::Update(version.clone()), ..Default::default() };
    match store.put_opts(key, PutPayload::from(payload.clone()), options).await {
        Err(object_store::Error::NotImplemented { .. }) => {
            let meta = store.head(key).await?;
            if meta.e_tag != version.e_tag {
                return Err(object_store::Error::Precondition {
                    path: key.to_string(),
                    source: "the lease changed since it was read".into(),
                });
            }
            store.delete(key).await?;
            let create = PutOptions { mode: PutMode::Create, ..Default::default() };
            store.put_opts(key, PutPayload::from(payload), create).await.map_err(|e| match e {
                object_store::Error::AlreadyExists { path, source } => {
                    object_store::Error::Precondition { path, source }
                }
                e => e,
            })
        }
        r => r,
    }
}

impl LeaseState {
    /// The lease record and its version; `None` when there is no lease object.
    fn read(&self) -> io::Result<Option<(LeaseRecord, UpdateVersion)>> {
        let (store, key) = (self.store.clone(), self.key.clone());
        let got = block(async move {
            Ok(match store.get(&key).await {
                Ok(r) => {
                    let meta = r.meta.clone();
                    r.bytes().await.map(|b| Some((b, UpdateVersion { e_tag: meta.e_tag, version: meta.version })))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            })
        })?
        .map_err(|e| lease_error(&self.url, e))?;
        let Some((bytes, version)) = got else { return Ok(None) };
        let record: LeaseRecord = serde_json::from_slice(&bytes).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "object store {}: {LEASE_OBJECT} is not a lease ({e}); delete it if no writer runs on this prefix",
                    self.url
                ),
            )
        })?;
        Ok(Some((record, version)))
    }

    /// Writes `record` (create when `version` is `None`); `Ok(None)` when another writer
    /// changed the lease first.
    fn write(&self, record: &LeaseRecord, version: Option<UpdateVersion>) -> io::Result<Option<UpdateVersion>> {
        let payload = Bytes::from(serde_json::to_vec(record).map_err(io::Error::other)?);
        let (store, key) = (self.store.clone(), self.key.clone());
        let result = block(async move {
            Ok(match version {
                None => {
                    let create = PutOptions { mode: PutMode::Create, ..Default::default() };
                    store.put_opts(&key, PutPayload::from(payload), create).await
                }
                Some(v) => update(&store, &key, payload, v).await,
            })
        })?;
        match result {
            Ok(r) => Ok(Some(UpdateVersion { e_tag: r.e_tag, version: r.version })),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(lease_error(&self.url, e)),
        }
    }

    /// Renews the lease once; marks it lost when another writer took it over.
    fn renew(&self) -> io::Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(lease_error(&self.url, "lost"));
        }
        let sent = Instant::now();
        let (record, version) = self.current.lock().map_err(|_| io::Error::other("lease lock poisoned"))?.clone();
        let next = LeaseRecord { expires_unix_ms: unix_ms() + self.ttl.as_millis() as u64, ..record };
        let written = match self.write(&next, Some(version))? {
            Some(v) => Ok(v),
            // A retried put whose first attempt landed fails its precondition against our own
            // write: the lease still holds exactly what we wrote.
            None => match self.read()? {
                Some((r, v)) if r == next => Ok(v),
                Some((r, _)) => {
                    Err(format!("taken over by another writer (node {}, host {}, pid {})", r.holder, r.host, r.pid))
                }
                None => Err(format!(
                    "{LEASE_OBJECT} was deleted from the bucket (by hand, by a lifecycle rule, or with the prefix); \
                     restart the writer to take a new lease"
                )),
            },
        };
        match written {
            Ok(v) => {
                *self.current.lock().map_err(|_| io::Error::other("lease lock poisoned"))? = (next, v);
                *self.valid_until.lock().map_err(|_| io::Error::other("lease lock poisoned"))? =
                    sent + self.ttl * 2 / 3;
                Ok(())
            }
            Err(why) => {
                if let Ok(mut w) = self.lost_why.lock() {
                    w.clone_from(&why);
                }
                self.lost.store(true, Ordering::SeqCst);
                Err(lease_error(&self.url, format!("{why}; this writer stops writing the bucket")))
            }
        }
    }

    /// The fence: whether this writer may still change the store's objects.
    pub(super) fn check(&self, rel: &str) -> io::Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            let why = self.lost_why.lock().map(|w| w.clone()).unwrap_or_default();
            return Err(lease_error(&self.url, format!("lost ({why}); refusing to write {rel}")));
        }
        let until = *self.valid_until.lock().map_err(|_| io::Error::other("lease lock poisoned"))?;
        if Instant::now() >= until {
            return Err(lease_error(
                &self.url,
                format!("not renewed in time (bucket unreachable?); refusing to write {rel} until it is"),
            ));
        }
        Ok(())
    }
}

impl WriterLease {
    /// Takes the lease of the store at `url` (its object `key`) for the node `node` whose data
    /// directory is `data_dir`; see the module docs. The caller holds `data_dir`'s writer lock.
    pub(super) fn acquire(
        store: Arc<dyn ObjectStore>,
        key: ObjectPath,
        url: &str,
        node: &str,
        data_dir: &Path,
        ttl: Duration,
    ) -> io::Result<WriterLease> {
        if ttl < Duration::from_secs(1) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the writer lease time to live must be at least 1 s",
            ));
        }
        let me = LeaseRecord {
            holder: node.to_string(),
            token: random_id(),
            host: host_name(),
            pid: std::process::id(),
            data_dir: data_dir.display().to_string(),
            expires_unix_ms: 0,
            ttl_ms: ttl.as_millis() as u64,
            released: false,
        };
        let state = LeaseState {
            store,
            key,
            url: url.to_string(),
            ttl,
            current: Mutex::new((me.clone(), UpdateVersion { e_tag: None, version: None })),
            valid_until: Mutex::new(Instant::now()),
            lost: AtomicBool::new(false),
            lost_why: Mutex::new(String::new()),
        };
        for _ in 0..8 {
            let sent = Instant::now();
            let now = unix_ms();
            let mine = LeaseRecord { expires_unix_ms: now + me.ttl_ms, ..me.clone() };
            let previous = state.read()?;
            let version = match previous {
                None => None,
                Some((held, version)) => {
                    let free = held.released || held.expires_unix_ms <= now || held.holder == me.holder;
                    if !free {
                        let left = held.expires_unix_ms.saturating_sub(now) as f64 / 1000.0;
                        return Err(io::Error::new(
                            io::ErrorKind::ResourceBusy,
                            format!(
                                "{url} is written by another node: its writer lease ({LEASE_OBJECT}) is held by node {} \
                                 (host {}, pid {}, data dir {}) for {left:.1} s more unless renewed. Each ingest node \
                                 writes a prefix of its own (…/node-0, …/node-1); a node that died is replaced once its \
                                 lease expires, or at once by a writer on the dead node's --data-dir",
                                held.holder, held.host, held.pid, held.data_dir
                            ),
                        ));
                    }
                    if held.holder == me.holder && !held.released && held.expires_unix_ms > now {
                        tracing::info!(
                            url,
                            "taking over the writer lease of a previous process on this data directory"
                        );
                    }
                    Some(version)
                }
            };
            if let Some(v) = state.write(&mine, version)? {
                *state.current.lock().map_err(|_| io::Error::other("lease lock poisoned"))? = (mine, v);
                *state.valid_until.lock().map_err(|_| io::Error::other("lease lock poisoned"))? = sent + ttl * 2 / 3;
                return Ok(WriterLease::start(Arc::new(state)));
            }
        }
        Err(lease_error(url, "it kept changing while this writer tried to take it; retry"))
    }

    fn start(state: Arc<LeaseState>) -> WriterLease {
        let (stop, stopped) = mpsc::channel::<()>();
        let renewer = state.clone();
        let thread = std::thread::Builder::new()
            .name("lockstep-lease".into())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(renewer.ttl / 3) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => return,
                    }
                    if let Err(e) = renewer.renew() {
                        if renewer.lost.load(Ordering::SeqCst) {
                            tracing::error!(error = %e, "writer lease lost");
                            return;
                        }
                        tracing::warn!(error = %e, "could not renew the writer lease; retrying");
                    }
                }
            })
            .map_err(|e| tracing::error!(error = %e, "could not start the lease renewal thread"))
            .ok();
        WriterLease { state, stop: Some(stop), thread }
    }

    pub(super) fn state(&self) -> &LeaseState {
        &self.state
    }

    /// Stops renewing without releasing, as a killed writer would.
    #[cfg(test)]
    fn abandon(mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.state.lost.store(true, Ordering::SeqCst);
    }
}

impl Drop for WriterLease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.state.lost.load(Ordering::SeqCst) {
            return;
        }
        let Ok((record, version)) = self.state.current.lock().map(|c| c.clone()) else { return };
        let released = LeaseRecord { released: true, expires_unix_ms: unix_ms(), ..record };
        match self.state.write(&released, Some(version)) {
            Ok(Some(_)) => tracing::debug!(url = %self.state.url, "writer lease released"),
            Ok(None) => tracing::warn!(url = %self.state.url, "writer lease was taken over before it was released"),
            Err(e) => tracing::warn!(error = %e, "could not release the writer lease; it expires on its own"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn acquire(store: &Arc<dyn ObjectStore>, node: &str, ttl: Duration) -> io::Result<WriterLease> {
        WriterLease::acquire(
            store.clone(),
            ObjectPath::from("p/writer-lease.json"),
            "mem://p",
            node,
            Path::new("/d"),
            ttl,
        )
    }

    /// A second node is refused while the lease is live; the same node (a restart on its
    /// data directory) takes it over at once; a released lease is free; a writer whose lease
    /// was taken over is fenced.
    #[test]
    fn lease_refuses_a_second_node_and_fences_a_lost_one() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let ttl = Duration::from_secs(60);
        let a = acquire(&store, "node-a", ttl).unwrap();
        a.state().check("manifest.json").unwrap();
        let err = acquire(&store, "node-b", ttl).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ResourceBusy);
        assert!(err.to_string().contains("held by node node-a"), "{err}");
        // The same node id: a restart after a crash (the flock is the guard) takes over.
        let a2 = acquire(&store, "node-a", ttl).unwrap();
        // The first holder's next renewal finds the lease changed: lost, and fenced.
        let err = a.state().renew().unwrap_err().to_string();
        assert!(err.contains("taken over by another writer (node node-a, host"), "{err}");
        let err = a.state().check("manifest.json").unwrap_err().to_string();
        assert!(err.contains("lost (taken over by another writer"), "{err}");
        drop(a); // lost: no release
        a2.state().renew().unwrap();
        drop(a2); // released
        let b = acquire(&store, "node-b", ttl).unwrap();
        b.state().check("data/p1/1.parquet").unwrap();
    }

    /// A lease object deleted from the bucket fences its writer with an error that says so,
    /// not as taken over by another writer (QA finding 13).
    #[test]
    fn a_deleted_lease_says_so() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = acquire(&store, "node-a", Duration::from_secs(60)).unwrap();
        block({
            let store = store.clone();
            async move { Ok(store.delete(&ObjectPath::from("p/writer-lease.json")).await) }
        })
        .unwrap()
        .unwrap();
        let err = a.state().renew().unwrap_err().to_string();
        assert!(err.contains("writer-lease.json was deleted from the bucket"), "{err}");
        assert!(!err.contains("another writer"), "{err}");
        let err = a.state().check("manifest.json").unwrap_err().to_string();
        assert!(err.contains("lost (writer-lease.json was deleted"), "{err}");
    }

    /// An expired lease is taken over by another node.
    #[test]
    fn an_expired_lease_is_taken_over() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = acquire(&store, "node-a", Duration::from_secs(1)).unwrap();
        assert!(acquire(&store, "node-b", Duration::from_secs(1)).is_err());
        let state = Arc::clone(&a.state);
        a.abandon(); // a killed writer: no release, no renewal
        while state.read().unwrap().unwrap().0.expires_unix_ms > unix_ms() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let b = acquire(&store, "node-b", Duration::from_secs(1)).unwrap();
        assert_eq!(b.state.read().unwrap().unwrap().0.holder, "node-b");
    }
}
