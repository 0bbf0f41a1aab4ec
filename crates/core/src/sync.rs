//! Locking a mutex whose value no panic can leave half-changed.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// The guard of `m`, poisoned or not: for the values behind a lock where it is used (plain
/// maps, sets, buffers, a descriptor), each change is one call that happens or does not, so a
/// thread that panicked while holding the lock left a consistent value, and failing every
/// later caller over it would turn one panic into many.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
