//! A node's log in the shells: a [`Store`] (the entries) and, beside it in
//! the same directory, `vote` (Raft's persistent term and vote, written
//! and `fdatasync`ed before the node answers anyone). The replayer thread
//! reads the same store through [`SharedStore`].
//!
//! A truncation (a follower's uncommitted tail, after a change of primary)
//! closes the store, cuts its files ([`crate::store::truncate_dir`]) and
//! reopens it: rare, and it keeps the live writer out of it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::core::{Entries, Log, LogError};
use crate::store::{self, Store, StoreError};

/// The store as the replayer sees it: replaced after a truncation.
#[derive(Clone)]
pub struct SharedStore(Arc<Mutex<Arc<Store>>>);

impl SharedStore {
    pub fn get(&self) -> Arc<Store> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, s: Arc<Store>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }
}

const VOTE_MAGIC: u32 = 0x5456_4f54; // "TOVT"

pub struct NodeLog {
    store: Arc<Store>,
    shared: SharedStore,
    dir: PathBuf,
    cfg: store::Config,
    vote: (u32, Option<u8>),
    vote_file: File,
}

impl NodeLog {
    /// Opens (or creates) the store and the vote file in `dir`.
    pub fn open(dir: &Path, cfg: store::Config) -> Result<NodeLog, StoreError> {
        let store = Arc::new(Store::open(dir, cfg.clone())?);
        let vote_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("vote"))?;
        let mut b = [0u8; 16];
        let vote = match vote_file.read_exact_at(&mut b, 0) {
            Ok(()) => decode_vote(&b).unwrap_or((0, None)),
            Err(_) => (0, None),
        };
        Ok(NodeLog {
            shared: SharedStore(Arc::new(Mutex::new(store.clone()))),
            store,
            dir: dir.to_path_buf(),
            cfg,
            vote,
            vote_file,
        })
    }

    pub fn shared(&self) -> SharedStore {
        self.shared.clone()
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

fn encode_vote(term: u32, vote: Option<u8>) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..4].copy_from_slice(&VOTE_MAGIC.to_le_bytes());
    b[4..8].copy_from_slice(&term.to_le_bytes());
    b[8] = vote.map_or(0, |_| 1);
    b[9] = vote.unwrap_or(0);
    let crc = crate::crc::crc32c(&b[..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_vote(b: &[u8; 16]) -> Option<(u32, Option<u8>)> {
    let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
    if u32_at(0) != VOTE_MAGIC || crate::crc::crc32c(&b[..12]) != u32_at(12) {
        return None;
    }
    Some((u32_at(4), (b[8] == 1).then_some(b[9])))
}

impl Entries for NodeLog {
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        Ok(self.store.read_range(from, max, usize::MAX, f)?)
    }
}

impl Log for NodeLog {
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        Ok(self.store.append(entry)?)
    }

    fn next_index(&self) -> u64 {
        self.store.next_index().unwrap_or(0)
    }

    fn truncate(&mut self, from: u64) -> Result<(), LogError> {
        // Readers (the replayer) get `Closed` meanwhile, never garbage.
        self.store.close();
        let cut = store::truncate_dir(&self.dir, from);
        let reopened = Store::open(&self.dir, self.cfg.clone());
        let s = Arc::new(reopened?);
        self.store = s.clone();
        self.shared.set(s);
        cut.map(|_| ()).map_err(LogError::from)
    }

    fn load_vote(&self) -> (u32, Option<u8>) {
        self.vote
    }

    fn save_vote(&mut self, term: u32, vote: Option<u8>) -> Result<(), LogError> {
        if self.vote == (term, vote) {
            return Ok(());
        }
        let b = encode_vote(term, vote);
        self.vote_file
            .write_all_at(&b, 0)
            .and_then(|_| self.vote_file.sync_data())
            .map_err(|e| LogError::Store(StoreError::from(e)))?;
        self.vote = (term, vote);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn votes_round_trip_and_garbage_is_no_vote() {
        for (t, v) in [(0, None), (7, Some(2)), (u32::MAX, Some(0))] {
            assert_eq!(decode_vote(&encode_vote(t, v)), Some((t, v)));
        }
        let mut b = encode_vote(3, Some(1));
        b[5] ^= 1;
        assert_eq!(decode_vote(&b), None);
        assert_eq!(decode_vote(&[0; 16]), None);
    }

    #[test]
    fn the_vote_survives_a_reopen_and_a_truncation_keeps_the_rest() {
        let dir = std::env::temp_dir().join(format!("tachyon-nodelog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = store::Config {
            segment_size: 64 * 1024,
            max_message_size: 1024,
            ..store::Config::default()
        };
        let mut l = NodeLog::open(&dir, cfg.clone()).unwrap();
        for i in 0..100u64 {
            assert_eq!(l.append(&i.to_le_bytes()).unwrap(), i);
        }
        l.save_vote(4, Some(1)).unwrap();
        let reader = l.shared();
        l.truncate(60).unwrap();
        assert_eq!(l.next_index(), 60);
        assert_eq!(reader.get().next_index().unwrap(), 60);
        assert_eq!(l.append(b"x").unwrap(), 60);
        drop(l);
        drop(reader);
        let l = NodeLog::open(&dir, cfg).unwrap();
        assert_eq!(l.load_vote(), (4, Some(1)));
        assert_eq!(l.next_index(), 61);
        let mut got = Vec::new();
        l.read_range(58, 10, &mut |i, e| got.push((i, e.to_vec())))
            .unwrap();
        assert_eq!(
            got,
            vec![
                (58, 58u64.to_le_bytes().to_vec()),
                (59, 59u64.to_le_bytes().to_vec()),
                (60, b"x".to_vec())
            ]
        );
        drop(l);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
