//! One async store per store: the claim an async store holds on its store.

use std::sync::{Arc, Mutex};

use crate::store::Store;
use crate::sys::lock;

/// Stores that currently have an `AsyncStore` writing to them (by address of
/// the shared `Store`, which stays alive while the `AsyncStore` holds it).
static ATTACHED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// This async store's claim on its store: released when dropped (by the
/// writer thread as it ends, or by a failed open).
pub(super) struct Attach(usize);

impl Attach {
    pub(super) fn claim(store: &Arc<Store>) -> Option<Attach> {
        let key = Arc::as_ptr(store) as usize;
        let mut a = lock(&ATTACHED);
        if a.contains(&key) {
            return None;
        }
        a.push(key);
        Some(Attach(key))
    }
}

impl Drop for Attach {
    fn drop(&mut self) {
        lock(&ATTACHED).retain(|k| *k != self.0);
    }
}
