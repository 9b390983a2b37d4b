//! Background maintenance: periodic sync, hint files for sealed segments,
//! and compaction (live entries of segments with garbage copied to new
//! segments, the inputs deleted).

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::format::*;
use super::{Compaction, Event, Inner, Result, Segment, Table, TableError, MAX_EVENTS};
use crate::sys::{fsync_dir, lock};
use crate::worker::Ctx;

impl Table {
    /// Seals the active segment if it holds garbage and compacts every
    /// sealed segment with any garbage, in the background thread; returns
    /// when that round is done.
    pub fn compact(&self) -> Result<Compaction> {
        let inner = &*self.inner;
        let (tx, rx) = mpsc::channel();
        {
            let mut requests = lock(&inner.requests);
            if inner.stopping.load(Ordering::Acquire) || inner.closed.load(Ordering::Acquire) {
                return Err(TableError::Closed);
            }
            requests.push(tx);
        }
        inner.maint_wake.wake();
        // The sender goes unanswered only when the table closes.
        match rx.recv() {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) if e == "enospc" => Err(TableError::NoSpace),
            Ok(Err(e)) => Err(TableError::Io(io::Error::other(e))),
            Err(_) => Err(TableError::Closed),
        }
    }
}

/// Writes `path` through `<path without extension>.tmp` (a hint file's
/// `<id:020>.tmp`, the compaction manifest's `compact.tmp`: the only
/// temporary names a table's open removes).
fn write_file_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    crate::sys::write_file_durably(&path.with_extension("tmp"), path, bytes)
}

/// A compaction output being written: the segment and its next offset.
type Output = Option<(Arc<Segment>, usize)>;

impl Inner {
    /// The maintenance thread (`tachyon-table`): sleeps on its wake-up line
    /// for the shorter of the sync and compaction intervals (at most 1 s),
    /// and each time syncs if due, writes the hints of sealed segments, and
    /// runs a compaction round if due or asked for.
    pub(super) fn maintenance_loop(self: Arc<Self>, ctx: &Ctx) {
        // Hints, syncs and compaction go in paced pieces (the writer may
        // share this thread's core).
        crate::worker::background();
        let tick = [self.cfg.sync_interval, self.cfg.compaction_interval]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::from_secs(1))
            .clamp(Duration::from_millis(1), Duration::from_secs(1));
        let mut last_sync = Instant::now();
        let mut last_compact = Instant::now();
        loop {
            ctx.sleep(tick);
            if ctx.stopped() {
                break;
            }
            let _bg = lock(&self.bg);
            if self.closed.load(Ordering::Acquire) {
                break;
            }
            if self
                .cfg
                .sync_interval
                .is_some_and(|iv| last_sync.elapsed() >= iv)
            {
                let _ = self.sync();
                last_sync = Instant::now();
            }
            let _ = self.write_hints();
            // The requests made so far are answered by this round.
            let requests = std::mem::take(&mut *lock(&self.requests));
            let forced = !requests.is_empty();
            let due = self
                .cfg
                .compaction_interval
                .is_some_and(|iv| last_compact.elapsed() >= iv);
            if forced || due {
                let res = self.compact_round(forced);
                last_compact = Instant::now();
                self.report_compaction(&res);
                let answer = res.map_err(|e| match e {
                    TableError::NoSpace => "enospc".to_string(),
                    e => e.to_string(),
                });
                for tx in requests {
                    let _ = tx.send(answer.clone());
                }
            }
        }
        // Nobody waits for a compaction that will not run.
        lock(&self.requests).clear();
    }

    /// Queues the event of a round that compacted something.
    fn report_compaction(&self, res: &Result<Compaction>) {
        if let Ok(c) = res {
            if c.segments_in > 0 {
                let mut ev = lock(&self.events);
                if ev.len() >= MAX_EVENTS {
                    ev.pop_front();
                }
                ev.push_back(Event::Compacted(c.clone()));
            }
        }
    }

    /// Makes every sealed segment without a hint durable, cuts its
    /// preallocated tail and writes its hint file.
    pub(super) fn write_hints(&self) -> Result<()> {
        let todo: Vec<Arc<Segment>> = lock(&self.segs)
            .by_id
            .values()
            .filter(|s| s.sealed.load(Ordering::Acquire) && !s.hinted.load(Ordering::Acquire))
            .cloned()
            .collect();
        for s in todo {
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            self.finish_segment(&s)?;
        }
        Ok(())
    }

    fn finish_segment(&self, s: &Segment) -> Result<()> {
        // No writable mapping left when the pages are written back (see
        // `segment`'s module doc): no TLB shootdown per page.
        s.release_writable();
        let end = s.end.load(Ordering::Acquire);
        if s.file_len()? > end {
            s.truncate(end)?;
        }
        s.datasync()?;
        s.synced.store(end, Ordering::Release);
        let data = s.data(end as usize)?;
        // Sized once: growing it by doubling copied megabytes at a time on
        // this thread, in one piece no pacing splits (0.9 ms traced).
        let mut entries: Vec<(u8, u64, &[u8], u32, u32)> = Vec::with_capacity(s.most_entries());
        scan_records(&data, |e| {
            if entries.len().is_multiple_of(PACE_ENTRIES) {
                crate::worker::pace();
            }
            entries.push((e.kind, e.seq, e.key, e.vlen, e.val_off))
        });
        let bytes = encode_hints(s.id, end, &entries);
        crate::worker::drop_paced(entries);
        let written = write_file_durably(&self.dir.join(hint_file_name(s.id)), &bytes);
        crate::worker::drop_paced(bytes);
        written?;
        s.hinted.store(true, Ordering::Release);
        fsync_dir(&self.dir)?;
        Ok(())
    }

    /// One compaction round (the background thread only): with `forced`,
    /// the active segment is sealed first if it holds garbage or tombstones
    /// and every sealed segment with any is taken; otherwise those whose
    /// live bytes fell under the threshold.
    pub(super) fn compact_round(&self, forced: bool) -> Result<Compaction> {
        let t0 = Instant::now();
        if forced {
            self.seal_active_with_garbage()?;
        }
        let (inputs, min_other) = self.compaction_inputs(forced);
        if inputs.is_empty() {
            return Ok(Compaction::default());
        }
        let mut c = Copier {
            inner: self,
            min_other,
            left: inputs
                .iter()
                .map(|s| {
                    let (_, live, tombs) = s.counters();
                    live + tombs
                })
                .sum(),
            cur: None,
            outputs: Vec::new(),
            buf: Vec::new(),
            out: Compaction::default(),
        };
        let mut processed = 0;
        for seg in &inputs {
            if self.stopping.load(Ordering::Acquire) {
                break;
            }
            processed += 1;
            if let Err(e) = c.copy_live(seg) {
                // Keep what was written: outputs are valid segments.
                for s in c.close_output() {
                    s.sealed.store(true, Ordering::Release);
                }
                return Err(e);
            }
        }
        let outputs = c.close_output();
        let mut out = c.out;
        // Outputs durable (with hints) before any input goes.
        for s in &outputs {
            s.sealed.store(true, Ordering::Release);
            self.finish_segment(s)?;
            out.bytes_out += s.file_len().unwrap_or(0);
        }
        fsync_dir(&self.dir)?;
        // Stopped half-way (close): the inputs stay. Their live entries
        // were moved (the outputs hold copies, which recovery resolves by
        // sequence number), and they keep the tombstones that were dropped
        // from the outputs.
        if processed == inputs.len() {
            self.remove_inputs(&inputs)?;
            out.segments_in = inputs.len() as u64;
        }
        out.segments_out = outputs.len() as u64;
        out.duration = t0.elapsed();
        self.compactions.fetch_add(1, Ordering::Relaxed);
        self.compacted_in.fetch_add(out.bytes_in, Ordering::Relaxed);
        self.compacted_out
            .fetch_add(out.bytes_out, Ordering::Relaxed);
        Ok(out)
    }

    /// Seals the active segment (a roll) if it holds garbage or tombstones,
    /// and writes the hints of what is sealed.
    fn seal_active_with_garbage(&self) -> Result<()> {
        let mut w = lock(&self.writer);
        if self.closed.load(Ordering::Acquire) {
            return Err(TableError::Closed);
        }
        let Some(a) = &w.active else {
            return Err(TableError::Closed);
        };
        let (total, live, tombs) = a.counters();
        if live + tombs < total || tombs > 0 {
            self.roll(&mut w, 0)?;
        }
        drop(w);
        self.write_hints()
    }

    /// The segments to compact, and the lowest sequence number of any other
    /// segment: a tombstone older than every record outside the inputs
    /// shadows nothing that could survive, so it may go.
    fn compaction_inputs(&self, forced: bool) -> (Vec<Arc<Segment>>, u64) {
        // Garbage: entries neither live nor tombstones. A forced round also
        // takes segments holding tombstones (to drop those that may go).
        let threshold = self.cfg.compaction_threshold;
        let all: Vec<Arc<Segment>> = lock(&self.segs).by_id.values().cloned().collect();
        let is_candidate = |s: &Segment| {
            let (total, live, tombs) = s.counters();
            let garbage = total - (live + tombs).min(total);
            s.sealed.load(Ordering::Acquire)
                && s.hinted.load(Ordering::Acquire)
                && if forced {
                    garbage > 0 || tombs > 0 || total == 0
                } else {
                    total == 0
                        || (garbage > 0 && ((live + tombs) as f64) < threshold * total as f64)
                }
        };
        let (inputs, others): (Vec<_>, Vec<_>) = all.into_iter().partition(|s| is_candidate(s));
        let min_other = others
            .iter()
            .filter(|s| s.total.load(Ordering::Acquire) > 0)
            .map(|s| s.min_seq.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX);
        (inputs, min_other)
    }

    /// Deletes the compacted inputs. All go, or (after a crash) recovery
    /// finishes the job from the manifest: the dropped tombstones were only
    /// safe for the inputs as a whole.
    fn remove_inputs(&self, inputs: &[Arc<Segment>]) -> Result<()> {
        let ids: Vec<u64> = inputs.iter().map(|s| s.id).collect();
        let manifest = self.dir.join(MANIFEST_FILE);
        write_file_durably(&manifest, &encode_manifest(&ids))?;
        fsync_dir(&self.dir)?;
        for seg in inputs {
            self.remove_segment(seg);
        }
        fsync_dir(&self.dir)?;
        fs::remove_file(&manifest)?;
        fsync_dir(&self.dir)?;
        self.dir_dirty.store(false, Ordering::Release);
        Ok(())
    }
}

/// Copies the live entries of compaction inputs into output segments.
struct Copier<'a> {
    inner: &'a Inner,
    /// See [`Inner::compaction_inputs`].
    min_other: u64,
    /// Bytes of entries (live ones and tombstones) still to copy, at most:
    /// what the next output is sized for.
    left: u64,
    cur: Output,
    outputs: Vec<Arc<Segment>>,
    /// One record's encoding.
    buf: Vec<u8>,
    out: Compaction,
}

impl Copier<'_> {
    /// Copies the live entries (and the tombstones that must stay) of
    /// `seg`, moving their index entries. Stops early (`Closed`) when the
    /// table closes.
    fn copy_live(&mut self, seg: &Segment) -> Result<()> {
        let end = seg.end.load(Ordering::Acquire) as usize;
        self.out.bytes_in += seg.file_len().unwrap_or(end as u64);
        let data = seg.data(end)?;
        let mut err: Option<TableError> = None;
        let mut seen = 0u32;
        scan_records(&data, |e| {
            if err.is_some() {
                return;
            }
            seen = seen.wrapping_add(1);
            if seen.is_multiple_of(256) && self.inner.stopping.load(Ordering::Acquire) {
                err = Some(TableError::Closed);
                return;
            }
            if seen.is_multiple_of(PACE_ENTRIES as u32) {
                // (No lock held here.)
                crate::worker::pace();
            }
            if self.keep(seg, &e) {
                let val = &data[e.val_off as usize..e.val_off as usize + e.vlen as usize];
                err = self.copy_entry(seg, &e, val).err();
            }
        });
        err.map_or(Ok(()), Err)
    }

    /// Whether an entry of `seg` is copied: a put the index still points
    /// at, a tombstone that may shadow a record outside the inputs.
    fn keep(&mut self, seg: &Segment, e: &EntryRef<'_>) -> bool {
        let index = &self.inner.index;
        if e.kind == KIND_PUT {
            let h = index.hash(e.key);
            return index
                .read(h)
                .find(h, e.key)
                .is_some_and(|x| x.slot() == seg.slot && x.off() == e.val_off);
        }
        let keep = e.seq >= self.min_other;
        if !keep {
            self.out.tombstones_dropped += 1;
        }
        keep
    }

    /// Writes one entry as its own record into the current output (a new
    /// one when it is full), and moves its index entry there.
    fn copy_entry(&mut self, seg: &Segment, e: &EntryRef<'_>, val: &[u8]) -> Result<()> {
        let rec_len = REC_HEADER + ENTRY_HEADER + e.key.len() + val.len();
        if self
            .cur
            .as_ref()
            .is_none_or(|(s, pos)| pos + rec_len > s.cap)
        {
            self.close_current();
            // Sized for what is left to copy (its unused tail is cut when
            // it is sealed), between the first segment's size and the
            // largest.
            let g = self.inner.cfg.growth();
            let want = SEG_HEADER + (self.left as usize).max(rec_len);
            let cap = want.clamp(g.first(), g.max()).max(SEG_HEADER + rec_len);
            self.cur = Some((self.inner.new_segment(cap)?, SEG_HEADER));
        }
        let Some((o, pos)) = self.cur.as_mut() else {
            return Err(TableError::Closed);
        };
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(rec_len, 0);
        write_entry(&mut buf[REC_HEADER..], e.kind, e.key, val);
        let crc = finish_record_header(buf, rec_len - REC_HEADER, e.seq);
        buf[0..4].copy_from_slice(&crc.to_le_bytes());
        o.write_record(*pos, buf)?;
        let new_off = (*pos + REC_HEADER + ENTRY_HEADER + e.key.len()) as u32;
        *pos += rec_len;
        o.end.store(*pos as u64, Ordering::Release);
        let cost = entry_cost(e.key.len(), val.len());
        self.left = self.left.saturating_sub(cost);
        o.total.fetch_add(cost, Ordering::Relaxed);
        if e.kind == KIND_DEL {
            o.tombs.fetch_add(cost, Ordering::Relaxed);
        }
        o.min_seq.fetch_min(e.seq, Ordering::Relaxed);
        o.max_seq.fetch_max(e.seq, Ordering::Relaxed);
        self.out.entries_copied += 1;
        if e.kind == KIND_PUT {
            // Move the index entry, unless the writer replaced it meanwhile
            // (then the copy is garbage).
            let index = &self.inner.index;
            let h = index.hash(e.key);
            let mut shard = index.write(h);
            if let Some(x) = shard.find_mut(h, e.key) {
                if x.slot() == seg.slot && x.off() == e.val_off {
                    let (vlen, seq) = (x.vlen(), x.seq());
                    x.set_loc(o.slot, new_off, vlen, seq);
                    o.live.fetch_add(cost, Ordering::Relaxed);
                    seg.live.fetch_sub(cost, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Ends the current output (its end stored), if any.
    fn close_current(&mut self) {
        if let Some((s, pos)) = self.cur.take() {
            s.end.store(pos as u64, Ordering::Release);
            self.outputs.push(s);
        }
    }

    /// Ends the current output and returns every output.
    fn close_output(&mut self) -> Vec<Arc<Segment>> {
        self.close_current();
        std::mem::take(&mut self.outputs)
    }
}
