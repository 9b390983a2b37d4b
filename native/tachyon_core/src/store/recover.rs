//! Recovery of a writer's segments: scanning records, cutting a torn tail
//! or repairing damage, and cutting the log on request ([`truncate_dir`],
//! [`reset_dir`]).

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::format::*;
use super::open::{drop_before_reset, list_segments, remove_unused};
use super::{Config, RecordError, Recovery, Segment, StoreError, Verify};
use crate::sys::fsync_dir;

/// Result of scanning one segment's records.
struct Scan {
    count: usize,
    end: usize,
    bad: Option<usize>,
}

/// Walks the records of `seg` from the start, checking CRCs and rebuilding the
/// index when `fix_index` is set. Stops at the end of the log or at the first
/// record that does not verify.
fn scan_segment(seg: &Segment, fix_index: bool) -> Scan {
    let l = seg.layout;
    let mut pos = 0usize;
    let mut k = 0usize;
    loop {
        let off = l.data_start + pos;
        if k >= l.slots || off + REC_HEADER > l.file_len {
            return Scan {
                count: k,
                end: pos,
                bad: None,
            };
        }
        match seg.record_at(off) {
            Ok(payload) => {
                if fix_index && seg.slot(k).load(Ordering::Relaxed) != off as u32 {
                    seg.set_slot(k, off as u32);
                }
                pos += record_size(payload.len());
                k += 1;
            }
            Err(RecordError::Empty) => {
                // A zero header ends the log, unless the index says a record
                // was there (a hole): that is damage, not an end.
                let s = seg.slot(k).load(Ordering::Relaxed) as usize;
                if s == off {
                    return Scan {
                        count: k,
                        end: pos,
                        bad: Some(off),
                    };
                }
                return Scan {
                    count: k,
                    end: pos,
                    bad: None,
                };
            }
            Err(RecordError::Corrupt) => {
                return Scan {
                    count: k,
                    end: pos,
                    bad: Some(off),
                }
            }
        }
    }
}

/// Whether any verified record lies after slot `k` (damage in the middle
/// rather than a torn tail). Looks at the next index slots.
fn valid_records_after(seg: &Segment, k: usize, bad_off: usize) -> u64 {
    let mut n = 0;
    for j in (k + 1)..seg.layout.slots {
        let off = seg.slot(j).load(Ordering::Relaxed) as usize;
        if off == 0 {
            break;
        }
        if off > bad_off && seg.record_at(off).is_ok() {
            n += 1;
        }
    }
    n
}

/// The file offset just past the last record the index of `seg` knows of
/// from slot `k` on (`data_start` if none).
fn records_end(seg: &Segment, k: usize) -> usize {
    let mut end = seg.layout.data_start;
    for j in k..seg.layout.slots {
        let o = seg.slot(j).load(Ordering::Relaxed) as usize;
        if o == 0 {
            break;
        }
        let len = match seg.record_at(o) {
            Ok(p) => record_size(p.len()),
            Err(_) => REC_HEADER,
        };
        end = end.max(o + len);
    }
    end
}

/// Cuts `seg` at file offset `off` (record `k`): zeroes the data from there to
/// the last non-zero byte and clears the index slots from `k`. Returns the
/// bytes cut. In a reused file (`FLAG_REUSED`) every byte after the cut may
/// be an old record or one of this life the index lost: the data is zeroed
/// to the end, and the bytes cut are those of the records the index knew
/// of (old records never verify: they are not cut from the log).
fn cut_segment(seg: &Segment, k: usize, off: usize) -> u64 {
    let l = seg.layout;
    // The end of the damage: the furthest record the index knows of, or the
    // claimed length of the damaged header, or at least one page.
    let mut end = off + REC_HEADER;
    for j in k..l.slots {
        let o = seg.slot(j).load(Ordering::Relaxed) as usize;
        if o == 0 {
            break;
        }
        end = end.max(o + REC_HEADER);
        seg.set_slot(j, 0);
    }
    if seg.flags() & FLAG_REUSED != 0 {
        seg.zero_range(off, l.file_len);
        return (end - off) as u64;
    }
    // Find the last non-zero page of the data region from `off` on.
    let mut last_nonzero = end;
    let mut p = off;
    // Page by page from the cut; stop 16 clean pages past the known end.
    while p < l.file_len {
        let next = align_up(p + 1, PAGE).min(l.file_len);
        if page_nonzero(seg, p, next) {
            last_nonzero = next;
        } else if p > end + 16 * PAGE {
            break;
        }
        p = next;
    }
    let cut_to = last_nonzero.max(end).min(l.file_len);
    let bytes = cut_to.saturating_sub(off) as u64;
    seg.zero_range(off, cut_to);
    bytes
}

/// Verifies the segments (all, or only the last one, after `cfg.verify`),
/// cutting a torn tail, or damage in the middle with `cfg.repair` (the
/// segments after the cut are removed). Returns the records and data bytes
/// of the last segment.
pub(super) fn verify_segments(
    segs: &mut Vec<Arc<Segment>>,
    cfg: &Config,
    rec: &mut Recovery,
) -> Result<(usize, usize), StoreError> {
    let first_checked = match cfg.verify {
        Verify::All => 0,
        Verify::Active => segs.len().saturating_sub(1),
    };
    let mut last = (0usize, 0usize);
    let mut i = first_checked;
    while i < segs.len() {
        let seg = segs[i].clone();
        let is_last = i + 1 == segs.len();
        let scan = scan_segment(&seg, is_last);
        rec.scanned_segment = seg.seq;
        rec.recovered += scan.count as u64;
        if let Some(bad) = scan.bad {
            cut_damage(segs, i, &scan, bad, cfg.repair, rec)?;
        } else if is_last && seg.is_sealed() && seg.count() != scan.count as u64 {
            return Err(StoreError::Corrupt {
                segment: seg.seq,
                offset: 0,
            });
        }
        if i + 1 == segs.len() {
            last = (scan.count, scan.end);
        }
        i += 1;
    }
    Ok(last)
}

/// Cuts segment `i` at the record that failed (`bad`): a torn tail, or
/// damage in the middle (records after it) which only `repair` may cut.
/// Every later segment goes; segment `i` is the active one again.
fn cut_damage(
    segs: &mut Vec<Arc<Segment>>,
    i: usize,
    scan: &Scan,
    bad: usize,
    repair: bool,
    rec: &mut Recovery,
) -> Result<(), StoreError> {
    let seg = segs[i].clone();
    let after = valid_records_after(&seg, scan.count, bad);
    let later: u64 = segs[i + 1..].iter().map(|s| s.count()).sum();
    let middle = after > 0 || later > 0;
    if middle && !repair {
        // What `repair: true` would cut: the verified records after the
        // damage (as `lost_records` counts them) and the bytes from it on,
        // in this segment and the later ones.
        let bytes = records_end(&seg, scan.count).saturating_sub(bad)
            + segs[i + 1..]
                .iter()
                .map(|s| records_end(s, 0).saturating_sub(s.layout.data_start))
                .sum::<usize>();
        return Err(StoreError::Damaged {
            segment: seg.seq,
            offset: bad as u64,
            records: after + later,
            bytes: bytes as u64,
        });
    }
    rec.truncated_bytes += cut_segment(&seg, scan.count, bad);
    rec.cut = Some(if middle { "repaired" } else { "torn_tail" });
    rec.cut_segment = Some(seg.seq);
    rec.cut_offset = Some(bad as u64);
    rec.lost_records += after + later;
    for s in segs.drain(i + 1..) {
        rec.truncated_bytes += s.layout.file_len as u64;
        fs::remove_file(&s.path)?;
    }
    seg.clear_seal();
    Ok(())
}

/// Removes every entry from index `from` on from the store in `dir`, which
/// no [`Store`] has open (it takes the directory's lock): the entries of
/// the segment holding `from` are cut there, later segments are deleted,
/// and a reopened store continues at `from`. Returns the entries removed.
/// A sequencer node drops an uncommitted tail this way (rarely, after a
/// change of primary): closing the store, truncating, reopening keeps the
/// live writer, its pre-touch thread and prepared segments out of it. The
/// cut is on the disk when this returns (synced, and the directory too
/// when files went). The directory must hold a store's segments (a
/// store's or a sequencer node's directory: see [`crate::segment::dir`]);
/// it is not claimed.
pub fn truncate_dir(dir: &Path, from: u64) -> Result<u64, StoreError> {
    crate::segment::dir::check_reader(dir, crate::segment::dir::Kind::Store)?;
    let _lock = crate::segment::lock_dir(dir)?.ok_or(StoreError::Locked)?;
    let mut opened = Vec::new();
    for (seq, path) in list_segments(dir)? {
        match Segment::open(&path, seq, true)? {
            Some(s) => opened.push(s),
            // Prepared, never activated: removed (a reopen prepares anew).
            None => remove_unused(&path, seq)?,
        }
    }
    // (Leftovers of an interrupted reset: see `reset_dir`.)
    for s in drop_before_reset(&mut opened) {
        fs::remove_file(&s.path)?;
    }
    let segs: Vec<(Segment, std::path::PathBuf)> = opened
        .into_iter()
        .map(|s| {
            let p = s.path.clone();
            (s, p)
        })
        .collect();
    let Some(first) = segs.first().map(|(s, _)| s.base()) else {
        return if from == 0 {
            Ok(0)
        } else {
            Err(StoreError::NotFound)
        };
    };
    let counts: Vec<u64> = segs
        .iter()
        .map(|(s, _)| scan_segment(s, false).count as u64)
        .collect();
    let end = segs.last().map(|(s, _)| s.base()).unwrap_or(0) + counts.last().copied().unwrap_or(0);
    if from < first || from > end {
        return Err(StoreError::NotFound);
    }
    let mut removed = 0;
    let mut dirty = false;
    for (i, (seg, path)) in segs.iter().enumerate().rev() {
        let (base, count) = (seg.base(), counts[i]);
        if base + count <= from {
            break;
        }
        if base >= from && i > 0 {
            // Entirely at or after `from`, and not the first: deleted.
            fs::remove_file(path)?;
            removed += count;
            dirty = true;
            continue;
        }
        let k = (from - base) as usize;
        let off = seg.slot(k).load(Ordering::Acquire) as usize;
        if off != 0 {
            cut_segment(seg, k, off);
        }
        seg.clear_seal();
        removed += count - k as u64;
        // Durable before it returns: nothing appended after the cut may
        // reach the disk while what it removed is still there (a crash
        // would read the two back as one log).
        seg.sync_range(0, seg.layout.file_len)?;
    }
    if dirty {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

/// Empties the store in `dir`, which no [`Store`] has open (it takes the
/// directory's lock; a missing or empty directory is claimed for
/// `cfg.kind`), so that a store opened afterwards continues at index
/// `base`: every segment is deleted, and the log starts again with one
/// empty segment whose first index is `base`. A sequencer node that
/// installs a snapshot starts its log at the snapshot's index this way.
///
/// Crash-safe: the new segment (`FLAG_RESET`, after every existing file)
/// is made and synced, with the directory, before any old segment goes; a
/// store opened after a crash in between removes the segments before it
/// (and one opened after a crash before it finds the old log, whole). On
/// the disk when this returns.
///
/// [`Store`]: super::Store
pub fn reset_dir(dir: impl AsRef<Path>, cfg: &Config, base: u64) -> Result<(), StoreError> {
    let dir = dir.as_ref();
    cfg.validate()?;
    let _lock = crate::segment::dir::open_writer(dir, cfg.kind)?.ok_or(StoreError::Locked)?;
    let old = list_segments(dir)?;
    let seq = old.last().map_or(0, |(s, _)| s + 1);
    let seg = Segment::create(dir, seq, cfg.growth().first())?;
    seg.mark_reset();
    seg.activate(base, cfg.clock.now_ns());
    seg.sync_range(0, HEADER_SIZE)?;
    fsync_dir(dir)?;
    for (_, path) in old {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    }
    fsync_dir(dir)?;
    Ok(())
}

fn page_nonzero(seg: &Segment, from: usize, to: usize) -> bool {
    let mut o = from;
    while o + 8 <= to {
        if seg.header_at(o) != 0 {
            return true;
        }
        o += 8;
    }
    false
}
