//! A parallel map on scoped threads, for work split into independent units (the row groups
//! of a store check, the catalog increments an open fetches).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// `f(0) .. f(n - 1)` computed on up to `threads` threads, in index order.
pub(crate) fn map<T: Send>(n: usize, threads: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if threads <= 1 || n <= 1 {
        return (0..n).map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let out: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(slot) = out.get(i) else { break };
                    let value = f(i);
                    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
                }
            });
        }
    });
    // Every slot is filled: a panic in `f` would have propagated out of the scope.
    out.into_iter().filter_map(|slot| slot.into_inner().unwrap_or_else(PoisonError::into_inner)).collect()
}
