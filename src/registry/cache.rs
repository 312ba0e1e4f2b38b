//! Results of `cache_ttl` tools, kept for an identical request within the TTL.
//!
//! Identical means the same tool, the same final argv, the same directory
//! and terminal mode: what would actually run. Only results of commands that
//! ran to an exit (success or failure) are kept; timeouts and errors are not.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::result::NormalizedResult;

/// What makes two requests the same run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub tool: String,
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    pub tty: bool,
}

/// At most this many results are kept; the oldest go first.
const MAX_ENTRIES: usize = 1024;

/// The cache, shared by all requests.
#[derive(Debug, Default)]
pub struct ResultCache {
    entries: Mutex<HashMap<CacheKey, (Instant, NormalizedResult)>>,
}

impl ResultCache {
    /// A stored result younger than `ttl`.
    pub fn get(&self, key: &CacheKey, ttl: Duration) -> Option<NormalizedResult> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .get(key)
            .filter(|(stored, _)| stored.elapsed() < ttl)
            .map(|(_, result)| result.clone())
    }

    /// Stores a result; expired and, past the size bound, oldest entries go.
    pub fn put(&self, key: CacheKey, ttl: Duration, result: NormalizedResult) {
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
