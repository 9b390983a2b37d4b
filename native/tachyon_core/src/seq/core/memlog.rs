//! [`MemLog`]: a node's log in memory, with a simulated disk under it (the
//! simulator's, after TigerBeetle's `testing/storage.zig`).
//!
//! What the node reads and appends to is the page cache (`entries`); below
//! it is the platter (`disk`), one slot per index. A write (an append, or
//! the zeroing of a truncated entry) is *dirty* until it is synced
//! ([`MemLog::sync_to`]) or written back by the kernel after a while
//! ([`MemLog::power_loss`] takes a write-back age). A process crash (kill
//! -9) keeps the page cache: the restarted node reads `entries` as they
//! were. A power loss keeps only the platter: each dirty slot is written,
//! torn (it does not verify) or lost, at random (a random subset of the
//! unsynced sectors reaches the disk), and the log is read back from the
//! platter as a store recovers one: up to the first slot that is empty or
//! does not verify; a record that does not verify cuts the log there and
//! counts what followed as lost ([`MemLog::recovery_lost`]). The vote and
//! the node's metadata are synced when saved.
//!
//! Faults a test or the simulator sets: a full disk (`full`: appends
//! fail), a record corrupted at rest ([`MemLog::corrupt`], seen at the next
//! recovery), and chained hashes of every prefix ([`MemLog::chain`]) for
//! the log matching check.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::log::{Entries, Log, LogError, Meta};
use super::{Nanos, Rng};

/// What the platter holds at one index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    /// Never written, or zeroed by a truncation.
    Zero,
    Data(Vec<u8>),
    /// A torn write, or bit rot: does not verify.
    Corrupt,
}

/// An in-memory log over a simulated disk (tests, the simulator).
#[derive(Debug, Clone, Default)]
pub struct MemLog {
    /// The page cache: what the node sees.
    entries: Vec<Vec<u8>>,
    /// `chain[i]`: a hash of `entries[..=i]`.
    chain: Vec<u64>,
    disk: Vec<Slot>,
    /// Slots written since they were last on the platter, with when.
    dirty: BTreeMap<u64, Nanos>,
    /// The caller's clock, for write-back ages (the simulator sets it).
    pub now: Nanos,
    meta: Option<Meta>,
    /// Test aid: appends fail while set.
    pub full: bool,
    /// Test aid: the next [`Log::install`] saves the checkpoint, then the
    /// process dies before the log is reset (`crashed` is set, the call
    /// fails): the simulator kills the node there.
    pub crash_in_install: bool,
    pub crashed: bool,
    recovery_lost: u64,
    /// Entries whose every read fails (latent sector errors) until they
    /// are written again.
    read_errors: BTreeSet<u64>,
    /// The lowest index changed since [`MemLog::take_changed`].
    changed_from: Option<u64>,
    /// Retention: the entries below this were removed (a checkpoint, on
    /// the platter, sums them up); `chain` is kept for all of them.
    first: u64,
    checkpoint: Option<Vec<u8>>,
    /// The retention policy: keep this many entries at least (0: keep
    /// everything), cut in whole segments of `segment` entries.
    pub retain: u64,
    pub segment: u64,
    /// The simulator's record of every checkpoint's prefix (its first
    /// entry -> the chain hash of the entries below it), shared by the
    /// nodes' logs: an installed log continues the chain of the prefix it
    /// stands for, and two checkpoints at one index of different prefixes
    /// are a violation the simulator checks ([`Prefixes::conflict`]).
    pub prefixes: Option<Arc<Mutex<Prefixes>>>,
}

/// See [`MemLog::prefixes`].
#[derive(Debug, Default)]
pub struct Prefixes {
    pub at: HashMap<u64, u64>,
    /// A checkpoint whose prefix differs from another's at the same index.
    pub conflict: Option<u64>,
}

fn mix(h: u64, e: &[u8]) -> u64 {
    let mut h = h ^ 0xcbf2_9ce4_8422_2325;
    for b in e {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h ^ (e.len() as u64).rotate_left(29)
}

/// What a node reads and what a fault would reveal: the page cache, the
/// platter, the unsynced writes, the metadata and the fault switches; not
/// the simulator's own records (`chain`, `changed_from`, `prefixes`: no
/// node reads them; see [`fingerprint`](super::fingerprint)).
impl std::hash::Hash for MemLog {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let MemLog {
            entries,
            chain: _,
            disk,
            dirty,
            now,
            meta,
            full,
            recovery_lost,
            read_errors,
            changed_from: _,
            first,
            checkpoint,
            retain,
            segment,
            prefixes: _,
            crash_in_install,
            crashed,
        } = self;
        entries.hash(h);
        disk.hash(h);
        dirty.hash(h);
        now.hash(h);
        meta.hash(h);
        full.hash(h);
        recovery_lost.hash(h);
        read_errors.hash(h);
        first.hash(h);
        checkpoint.hash(h);
        retain.hash(h);
        segment.hash(h);
        crash_in_install.hash(h);
        crashed.hash(h);
    }
}

impl MemLog {
    pub fn new() -> MemLog {
        MemLog::default()
    }

    pub fn entry(&self, i: u64) -> Option<&[u8]> {
        if i < self.first {
            return None;
        }
        self.entries.get(i as usize).map(|e| e.as_slice())
    }

    /// The first entry held (those below were trimmed).
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The term of the entry before the first held (from the checkpoint).
    pub fn term_before_first(&self) -> u32 {
        let c = self
            .checkpoint
            .as_ref()
            .and_then(|b| super::node::checkpoint::Checkpoint::decode(b));
        c.and_then(|c| c.epochs.last().map(|e| e.0)).unwrap_or(0)
    }

    /// Retention: `checkpoint` (the state below `first`) is saved, then
    /// the entries below `first` go, on the platter too.
    pub fn trim(&mut self, first: u64, checkpoint: &[u8]) {
        if first <= self.first || first > self.len() {
            return;
        }
        self.checkpoint = Some(checkpoint.to_vec());
        if let Some(p) = &self.prefixes {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            let h = self.chain[first as usize - 1];
            if *p.at.entry(first).or_insert(h) != h {
                p.conflict.get_or_insert(first);
            }
        }
        for i in self.first..first {
            self.entries[i as usize] = Vec::new();
            self.dirty.remove(&i);
            if let Some(s) = self.disk.get_mut(i as usize) {
                *s = Slot::Zero;
            }
        }
        self.read_errors = self.read_errors.split_off(&first);
        self.first = first;
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A hash of the entries `[0, i]` (log matching: two logs with the same
    /// chain at `i` hold the same prefix).
    pub fn chain(&self, i: u64) -> Option<u64> {
        self.chain.get(i as usize).copied()
    }

    /// The lowest index that changed (appended, or truncated) since the
    /// last call.
    pub fn take_changed(&mut self) -> Option<u64> {
        self.changed_from.take()
    }

    fn changed(&mut self, i: u64) {
        self.changed_from = Some(self.changed_from.map_or(i, |c| c.min(i)));
    }

    /// The entries below `upto` reach the platter (what the page cache
    /// holds there now), and so do the zeroings of truncated slots.
    pub fn sync_to(&mut self, upto: u64) {
        let len = self.len();
        let due: Vec<u64> = self
            .dirty
            .keys()
            .copied()
            .filter(|&i| i < upto || i >= len)
            .collect();
        for i in due {
            self.write_back(i);
        }
    }

    /// Everything, entries and zeroings, reaches the platter.
    pub fn sync_all(&mut self) {
        let due: Vec<u64> = self.dirty.keys().copied().collect();
        for i in due {
            self.write_back(i);
        }
    }

    /// The entries below this are on the platter as the page cache holds
    /// them (nothing dirty below).
    pub fn durable(&self) -> u64 {
        let len = self.len();
        self.dirty.keys().next().map_or(len, |&i| i.min(len))
    }

    fn write_back(&mut self, i: u64) {
        self.dirty.remove(&i);
        let slot = match self.entries.get(i as usize) {
            Some(e) => Slot::Data(e.clone()),
            None => Slot::Zero,
        };
        let i = i as usize;
        if self.disk.len() <= i {
            self.disk.resize(i + 1, Slot::Zero);
        }
        self.disk[i] = slot;
    }

    /// A record at rest stops verifying (bit rot): seen at the next
    /// recovery. Returns false if nothing is on the platter there.
    pub fn corrupt(&mut self, i: u64) -> bool {
        match self.disk.get_mut(i as usize) {
            Some(s @ Slot::Data(_)) => {
                *s = Slot::Corrupt;
                true
            }
            _ => false,
        }
    }

    /// Power is lost: writes older than `writeback` reached the platter
    /// (the kernel's write-back); of the rest, each reaches it whole with
    /// `p_written`, torn with `p_torn`, or not at all. Then the log is
    /// what a recovery reads back.
    pub fn power_loss(&mut self, rng: &mut Rng, writeback: Nanos, p_written: f64, p_torn: f64) {
        let old: Vec<u64> = self
            .dirty
            .iter()
            .filter(|(_, at)| self.now.saturating_sub(**at) >= writeback)
            .map(|(i, _)| *i)
            .collect();
        for i in old {
            self.write_back(i);
        }
        let rest: Vec<u64> = self.dirty.keys().copied().collect();
        for i in rest {
            let x = rng.unit();
            if x < p_written {
                self.write_back(i);
            } else if x < p_written + p_torn {
                self.dirty.remove(&i);
                let i = i as usize;
                if self.disk.len() <= i {
                    self.disk.resize(i + 1, Slot::Zero);
                }
                self.disk[i] = Slot::Corrupt;
            } else {
                self.dirty.remove(&i);
            }
        }
        self.recover();
    }

    /// Reads the log back from the platter, as a store recovers: up to the
    /// first empty slot or the first that does not verify. A record that
    /// does not verify cuts the log: what follows it is zeroed and counted
    /// lost.
    pub fn recover(&mut self) {
        self.sync_all();
        let f = (self.first as usize).min(self.disk.len());
        let end = f + self.disk[f..]
            .iter()
            .position(|s| !matches!(s, Slot::Data(_)))
            .unwrap_or(self.disk.len() - f);
        let mut lost = 0;
        if matches!(self.disk.get(end), Some(Slot::Corrupt)) {
            lost = self.disk[end..]
                .iter()
                .filter(|s| !matches!(s, Slot::Zero))
                .count() as u64;
            self.disk.truncate(end);
        }
        self.recovery_lost = lost;
        let end = end.max(self.first as usize);
        self.entries.truncate(self.first as usize);
        self.entries.resize(self.first as usize, Vec::new());
        self.entries
            .extend(self.disk[f.min(end)..end].iter().map(|s| match s {
                Slot::Data(e) => e.clone(),
                _ => Vec::new(),
            }));
        self.chain.truncate(self.first as usize);
        let mut h = self.chain.last().copied().unwrap_or(0);
        for e in &self.entries[self.first as usize..] {
            h = mix(h, e);
            self.chain.push(h);
        }
        self.changed(self.first);
    }

    /// Entries the last recovery lost (cut at a record that did not
    /// verify, and everything after it).
    pub fn recovery_lost(&self) -> u64 {
        self.recovery_lost
    }

    /// Whether some entry cannot be read back.
    pub fn has_read_errors(&self) -> bool {
        !self.read_errors.is_empty()
    }

    /// Entry `i` becomes unreadable (a latent sector error): every read
    /// of it fails until it is written again. False if there is none.
    pub fn add_read_error(&mut self, i: u64) -> bool {
        (i >= self.first && i < self.len()) && self.read_errors.insert(i)
    }
}

impl Log for MemLog {
    fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        if self.full {
            return Err(LogError::NoSpace);
        }
        let i = self.entries.len() as u64;
        let h = mix(self.chain.last().copied().unwrap_or(0), entry);
        self.entries.push(entry.to_vec());
        self.chain.push(h);
        self.dirty.insert(i, self.now);
        self.changed(i);
        Ok(i)
    }

    fn next_index(&self) -> u64 {
        self.entries.len() as u64
    }

    fn truncate(&mut self, from: u64) -> Result<(), LogError> {
        let len = self.entries.len() as u64;
        if from > len || from < self.first {
            return Err(LogError::NotFound);
        }
        self.entries.truncate(from as usize);
        self.chain.truncate(from as usize);
        self.read_errors.split_off(&from);
        // Durable before it returns: the truncated slots are zeroed on
        // the platter, and any write to them pending is dropped.
        let stale: Vec<u64> = self.dirty.range(from..).map(|(i, _)| *i).collect();
        for i in stale {
            self.dirty.remove(&i);
        }
        for s in self.disk.iter_mut().skip(from as usize) {
            *s = Slot::Zero;
        }
        self.changed(from);
        Ok(())
    }

    fn load_meta(&self) -> Option<Meta> {
        self.meta
    }

    fn save_meta(&mut self, m: &Meta) -> Result<(), LogError> {
        self.meta = Some(*m);
        Ok(())
    }

    fn recovery_lost(&self) -> u64 {
        self.recovery_lost
    }

    fn has_space(&mut self) -> bool {
        !self.full
    }

    fn first_index(&self) -> u64 {
        self.first
    }

    fn load_checkpoint(&self) -> Option<Vec<u8>> {
        self.checkpoint.clone()
    }

    fn retention_point(&self, floor: u64) -> u64 {
        if self.retain == 0 {
            return self.first;
        }
        let seg = self.segment.max(1);
        let want = self.len().saturating_sub(self.retain) / seg * seg;
        want.min(floor).max(self.first)
    }

    fn install(&mut self, base: u64, checkpoint: &[u8]) -> Result<(), LogError> {
        if self.full {
            return Err(LogError::NoSpace);
        }
        if std::mem::take(&mut self.crash_in_install) {
            // The shell's order: the checkpoint is saved first.
            self.checkpoint = Some(checkpoint.to_vec());
            self.crashed = true;
            return Err(LogError::NotFound);
        }
        let seed = self.prefixes.as_ref().and_then(|p| {
            let p = p.lock().unwrap_or_else(|e| e.into_inner());
            p.at.get(&base).copied()
        });
        self.entries = vec![Vec::new(); base as usize];
        self.chain = vec![0; base as usize];
        if let (Some(h), Some(last)) = (seed, self.chain.last_mut()) {
            *last = h;
        }
        self.disk = vec![Slot::Zero; base as usize];
        self.dirty.clear();
        self.read_errors.clear();
        self.checkpoint = Some(checkpoint.to_vec());
        self.first = base;
        self.changed(base);
        Ok(())
    }
}

impl Entries for MemLog {
    fn read_range(
        &self,
        from: u64,
        max: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<usize, LogError> {
        if from < self.first {
            return Err(LogError::NotFound);
        }
        let mut n = 0;
        for (i, e) in self
            .entries
            .iter()
            .enumerate()
            .skip(from as usize)
            .take(max)
        {
            if self.read_errors.contains(&(i as u64)) {
                // What came before it is read; the damaged one is an error.
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(LogError::Damaged(i as u64))
                };
            }
            f(i as u64, e);
            n += 1;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_of(n: u8) -> MemLog {
        let mut l = MemLog::new();
        for i in 0..n {
            l.append(&[i]).unwrap();
        }
        l
    }

    #[test]
    fn a_crash_keeps_the_page_cache_and_a_power_loss_only_the_platter() {
        let mut l = log_of(10);
        l.sync_to(4);
        assert_eq!(l.durable(), 4);
        let kept = l.clone();
        assert_eq!(kept.len(), 10);
        let mut rng = Rng::new(1);
        l.power_loss(&mut rng, u64::MAX, 0.0, 0.0);
        assert_eq!((l.len(), l.recovery_lost()), (4, 0));
        assert_eq!(l.entry(3), Some(&[3u8][..]));
    }

    #[test]
    fn write_back_makes_old_writes_durable() {
        let mut l = MemLog::new();
        for i in 0..6u8 {
            l.now = i as u64 * 10;
            l.append(&[i]).unwrap();
        }
        l.now = 100;
        let mut rng = Rng::new(2);
        // Written 50 or more ago: entries 0..=5 at 0..50 -> 0..=5 all.
        l.power_loss(&mut rng, 50, 0.0, 0.0);
        assert_eq!(l.len(), 6);
    }

    #[test]
    fn a_truncation_is_durable_and_what_follows_it_is_not_until_synced() {
        let mut l = log_of(6);
        l.sync_all();
        l.truncate(3).unwrap();
        l.append(b"new").unwrap();
        assert_eq!((l.len(), l.durable()), (4, 3));
        // The new entry lost: the old ones do not come back.
        let mut rng = Rng::new(3);
        let mut a = l.clone();
        a.power_loss(&mut rng, u64::MAX, 0.0, 0.0);
        assert_eq!(a.len(), 3);
        // Synced: it holds.
        l.sync_all();
        l.power_loss(&mut rng, u64::MAX, 0.0, 0.0);
        assert_eq!(l.len(), 4);
        assert_eq!(l.entry(3), Some(&b"new"[..]));
    }

    #[test]
    fn a_record_that_does_not_verify_cuts_the_log_and_counts_what_followed() {
        let mut l = log_of(8);
        l.sync_all();
        assert!(l.corrupt(5));
        let mut rng = Rng::new(4);
        l.power_loss(&mut rng, 0, 0.0, 0.0);
        assert_eq!((l.len(), l.recovery_lost()), (5, 3));
        // Cut for good: a second recovery loses nothing more.
        l.recover();
        assert_eq!((l.len(), l.recovery_lost()), (5, 0));
    }

    #[test]
    fn chains_match_only_for_the_same_prefix() {
        let (a, mut b) = (log_of(5), log_of(5));
        assert_eq!(a.chain(4), b.chain(4));
        b.truncate(3).unwrap();
        b.append(b"x").unwrap();
        b.append(&[4]).unwrap();
        assert_eq!(a.chain(2), b.chain(2));
        assert_ne!(a.chain(4), b.chain(4));
        assert_eq!(b.take_changed(), Some(0));
    }

    #[test]
    fn a_full_disk_refuses_appends() {
        let mut l = log_of(2);
        l.full = true;
        assert!(matches!(l.append(b"x"), Err(LogError::NoSpace)));
        l.full = false;
        assert_eq!(l.append(b"x").unwrap(), 2);
    }
}
