//! Values built from an open store once and shared by every session over it in this process.
//!
//! `lockstep sql` and the servers build a session per statement; what a session derives from
//! the store (the per-series string arrays of the `samples` table, the parsed metric catalog,
//! topology and jobs) is kept here per open store, and a statement rebuilds it only when its
//! inputs changed. An entry lives as long as its store: it is dropped with the last
//! `Arc<Store>`.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use lockstep_engine::Store;

/// The `T` of `store`, made with `T::default()` by the first caller and shared with every later
/// one while the store is open.
pub(crate) fn shared<T: Default + Send + Sync + 'static>(store: &Arc<Store>) -> Arc<T> {
    type Entry = (Weak<Store>, Arc<dyn Any + Send + Sync>);
    static SHARED: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
    let mut all = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    // Only live stores stay, so a match is this allocation, not a dropped store's address.
    all.retain(|(store, _)| store.strong_count() > 0);
    let found = all
        .iter()
        .filter(|(s, _)| std::ptr::eq(s.as_ptr(), Arc::as_ptr(store)))
        .find_map(|(_, value)| value.clone().downcast::<T>().ok());
    if let Some(found) = found {
        return found;
    }
    let made = Arc::new(T::default());
    all.push((Arc::downgrade(store), made.clone()));
    made
}
