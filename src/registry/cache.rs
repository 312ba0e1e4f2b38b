//! Results of `cache_ttl` tools, kept for an identical request within the TTL.
//!
//! Identical means the same tool, the same final argv, the same directory
//! and terminal mode: what would actually run. Only tools of `low` risk or
//! marked `idempotent` are cached, never for a request carrying `approve` or
//! `no_cache` ([`crate::plan`] decides); only successes are kept, failures
//! too with `cache_failures = true`, timeouts and errors never.
//!
//! Built with [`ResultCache::shared`], stored results are also files under
//! the home ([`super::cache_store`]), found by every process sharing it:
//! one-shot `exec --json` callers hit the cache too. Identical requests that arrive while the first still runs wait for its
//! result instead of running the command again.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cache_store::FileStore;
use crate::result::NormalizedResult;

/// What makes two requests the same run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey {
    pub(crate) tool: String,
    pub(crate) argv: Vec<OsString>,
    pub(crate) cwd: PathBuf,
    pub(crate) tty: bool,
}

/// How a plan may use the cache.
#[derive(Debug, Clone)]
pub(crate) struct Cacheable {
    pub(crate) key: CacheKey,
    pub(crate) ttl: Duration,
    /// Results with a non-zero exit are kept too (`cache_failures = true`).
    pub(crate) keep_failures: bool,
}

/// At most this many results are kept; the oldest go first.
const MAX_ENTRIES: usize = 1024;

/// Waiters for a run in flight.
type Waiters = Vec<tokio::sync::oneshot::Sender<NormalizedResult>>;

/// The cache, shared by all requests.
#[derive(Debug, Default)]
pub(crate) struct ResultCache {
    entries: Mutex<HashMap<CacheKey, (Instant, NormalizedResult)>>,
    in_flight: Mutex<HashMap<CacheKey, Waiters>>,
    /// The store shared with the other processes of the home.
    store: Option<FileStore>,
}

/// What a cacheable request should do.
pub(crate) enum Lookup {
    /// A fresh stored result.
    Hit(Box<NormalizedResult>),
    /// The same run is in flight: await its result (an error means it was
    /// abandoned; run it yourself then).
    Wait(tokio::sync::oneshot::Receiver<NormalizedResult>),
    /// Run it; the guard hands the result to waiters (and cleans up if dropped).
    Lead(LeaderGuard),
}

/// Held by the request that runs a cacheable command for everyone waiting.
pub(crate) struct LeaderGuard {
    cache: Arc<ResultCache>,
    key: Option<CacheKey>,
}

impl LeaderGuard {
    /// Stores the result and hands it to the waiters when it is worth keeping.
    pub(crate) fn complete(mut self, ttl: Duration, result: &NormalizedResult, keep: bool) {
        let Some(key) = self.key.take() else { return };
        if keep {
            self.cache.put(key.clone(), ttl, result.clone());
        }
        let waiters = self
            .cache
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        // A timeout or an error is not shared: dropped waiters run it themselves.
        if keep {
            for waiter in waiters.unwrap_or_default() {
                let _ = waiter.send(result.clone());
            }
        }
    }
}

impl Drop for LeaderGuard {
    fn drop(&mut self) {
        // Abandoned: the waiters' receivers fail and they run it themselves.
        if let Some(key) = self.key.take() {
            self.cache
                .in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
        }
    }
}

impl ResultCache {
    /// A cache whose results every process sharing `home` finds (this
    /// process's alone if the store cannot be made).
    pub(crate) fn shared(home: &std::path::Path) -> Self {
        Self {
            store: FileStore::open(home),
            ..Self::default()
        }
    }

    /// A stored result, a run in flight to wait for, or the lead.
    pub(crate) fn lookup(self: &Arc<Self>, key: &CacheKey, ttl: Duration) -> Lookup {
        if let Some(hit) = self.get(key, ttl) {
            return Lookup::Hit(Box::new(hit));
        }
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        match in_flight.get_mut(key) {
            Some(waiters) => {
                let (sender, receiver) = tokio::sync::oneshot::channel();
                waiters.push(sender);
                Lookup::Wait(receiver)
            }
            None => {
                in_flight.insert(key.clone(), Vec::new());
                Lookup::Lead(LeaderGuard {
                    cache: self.clone(),
                    key: Some(key.clone()),
                })
            }
        }
    }

    /// Forgets every stored result (the registry was reloaded); runs in
    /// flight still hand theirs to their waiters.
    pub(crate) fn clear(&self) {
        crate::sync::lock(&self.entries).clear();
        if let Some(store) = &self.store {
            store.clear();
        }
    }

    /// A stored result younger than `ttl`.
    pub(crate) fn get(&self, key: &CacheKey, ttl: Duration) -> Option<NormalizedResult> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let kept = entries
            .get(key)
            .filter(|(stored, _)| stored.elapsed() < ttl)
            .map(|(_, result)| result.clone());
        drop(entries);
        kept.or_else(|| self.store.as_ref()?.get(key, ttl))
    }

    /// Stores a result; expired and, past the size bound, oldest entries go.
    pub(crate) fn put(&self, key: CacheKey, ttl: Duration, result: NormalizedResult) {
        if let Some(store) = &self.store {
            store.put(&key, ttl, &result);
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (stored, _)| stored.elapsed() < ttl);
            if entries.len() >= MAX_ENTRIES
                && let Some(oldest) = entries
                    .iter()
                    .min_by_key(|(_, (t, _))| *t)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&oldest);
            }
        }
        entries.insert(key, (Instant::now(), result));
    }
}
