//! What the disk parts read back at open: a directory's manifest
//! (`segment::dir`), a table's segment files, hint files and compaction
//! manifest (`table::format`), a store's segment files (`store`: the
//! header check and the record reader of `Segment::open` and
//! `Segment::record_at`, on a real file).
//!
//! Every input starts with a mode byte; its bit 0 makes the harness
//! recompute the file's CRC(s) before decoding (bit 1 too for the
//! records of segment images), so that the fuzzer gets past them.

use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use tachyon_core::crc::crc32c;
use tachyon_core::segment::dir::Manifest;
use tachyon_core::store::format as sf;
use tachyon_core::store::Segment;
use tachyon_core::table::format as tf;

fn split_mode(data: &[u8]) -> Option<(u8, Vec<u8>)> {
    let (&mode, rest) = data.split_first()?;
    Some((mode, rest.to_vec()))
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8)
        .map_or(0, |x| u64::from_le_bytes(x.try_into().unwrap_or_default()))
}

/// Sets the last 4 bytes to the CRC32C of those before.
fn fix_trailer(b: &mut [u8]) {
    if b.len() >= 4 {
        let n = b.len() - 4;
        let crc = crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// `segment::dir::Manifest::decode` (mode bit 0: the `crc32c=` line is
/// rewritten for the lines before it); a decoded manifest re-encodes to
/// one that decodes the same.
pub fn dir_manifest(data: &[u8]) {
    let Some((mode, mut b)) = split_mode(data) else {
        return;
    };
    if mode & 1 != 0 {
        let body_end = if b.last() == Some(&b'\n') {
            b[..b.len() - 1]
                .iter()
                .rposition(|&c| c == b'\n')
                .map_or(0, |i| i + 1)
        } else {
            b.len()
        };
        b.truncate(body_end);
        let crc = crc32c(&b);
        b.extend_from_slice(format!("crc32c={crc:08x}\n").as_bytes());
    }
    let Ok(m) = Manifest::decode(&b) else { return };
    black_box(m.admits(m.kind, true).is_ok());
    assert_eq!(Manifest::decode(&m.encode()), Ok(m));
}

/// `table::format::check_segment_header` and `scan_records` on a
/// segment image (mode bit 0: the header's CRC recomputed; bit 1: every
/// record's, walking their lengths). Every entry found lies inside the
/// image.
pub fn table_segment(data: &[u8]) {
    let Some((mode, mut b)) = split_mode(data) else {
        return;
    };
    if mode & 1 != 0 && b.len() >= tf::SEG_HEADER {
        let crc = crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
    }
    if mode & 2 != 0 {
        let mut pos = tf::SEG_HEADER;
        while pos + tf::REC_HEADER <= b.len() {
            let len = u32_at(&b, pos + 4) as usize;
            let end = pos + tf::REC_HEADER + len;
            if len == 0 || end > b.len() {
                break;
            }
            let crc = crc32c(&b[pos + 4..end]);
            b[pos..pos + 4].copy_from_slice(&crc.to_le_bytes());
            pos = end;
        }
    }
    black_box(tf::check_segment_header(&b, u64_at(&b, 16)));
    let (end, how) = tf::scan_records(&b, |e| {
        assert!(e.kind == tf::KIND_PUT || e.kind == tf::KIND_DEL);
        assert!(e.val_off as usize + e.vlen as usize <= b.len());
        black_box(e);
    });
    assert!(end <= b.len().max(tf::SEG_HEADER));
    black_box(how);
}

/// `table::format::decode_hints` (mode bit 0: the trailer's CRC
/// recomputed), for the segment id the file names; every entry's value
/// lies inside the covered length.
pub fn table_hints(data: &[u8]) {
    let Some((mode, mut b)) = split_mode(data) else {
        return;
    };
    if mode & 1 != 0 {
        fix_trailer(&mut b);
    }
    let id = u64_at(&b, 16);
    let mut seg_len = u64_at(&b, 24);
    if let Ok(n) = tf::decode_hints(&b, id, |e| {
        assert!(e.val_off as u64 + e.vlen as u64 <= seg_len);
        black_box(e);
    }) {
        seg_len = n;
    }
    black_box(seg_len);
}

/// `table::format::decode_manifest` (mode bit 0: the trailer's CRC
/// recomputed); what decodes re-encodes to the same bytes.
pub fn table_manifest(data: &[u8]) {
    let Some((mode, mut b)) = split_mode(data) else {
        return;
    };
    if mode & 1 != 0 {
        fix_trailer(&mut b);
    }
    if let Some(ids) = tf::decode_manifest(&b) {
        assert_eq!(tf::encode_manifest(&ids), b);
    }
}

/// A scratch file per process (the fuzzer and the test run targets on
/// one thread at a time; the lock keeps it so).
static SCRATCH: Mutex<Option<(PathBuf, File)>> = Mutex::new(None);

/// Bytes of the index region an input sets at most, after the header.
pub(crate) const INDEX_BYTES: usize = 256;

/// A store segment file (`store::format`): the input is the mode byte,
/// the header's first 64 bytes, [`INDEX_BYTES`] of the index region, then
/// the start of the data region; the file is as long as the layout the
/// header claims (its data capacity, if at most 1 MiB; 64 KiB if not).
/// Mode bit 0: the header CRC recomputed; bit 1: every record's (chained
/// from the header CRC as version 2 does); bit 2: the index set to the
/// records found; bit 3: the file one page short. `Segment::open`, then
/// the records read in order (`record_at`, as recovery scans them) and
/// by the index, and `count()`.
pub fn store_segment(data: &[u8]) {
    let Some((mode, b)) = split_mode(data) else {
        return;
    };
    let mut head = [0u8; 64];
    let n = b.len().min(64);
    head[..n].copy_from_slice(&b[..n]);
    if mode & 1 != 0 {
        let crc = crc32c(&head[..sf::H_HCRC]);
        head[sf::H_HCRC..sf::H_HCRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let claimed = u64_at(&head, sf::H_DATA_CAP) as usize;
    let cap = if (sf::MIN_DATA_CAP..=1 << 20).contains(&claimed) {
        claimed
    } else {
        sf::MIN_DATA_CAP
    };
    let l = sf::Layout::new(cap);
    let mut file = vec![0u8; l.file_len];
    file[..64].copy_from_slice(&head);
    let rest = b.get(64..).unwrap_or(&[]);
    let (index, records) = rest.split_at(rest.len().min(INDEX_BYTES));
    file[l.index_start..l.index_start + index.len()].copy_from_slice(index);
    let records = &records[..records.len().min(cap)];
    file[l.data_start..l.data_start + records.len()].copy_from_slice(records);
    let seed = if u32_at(&head, sf::H_VERSION) >= sf::VERSION {
        u32_at(&head, sf::H_HCRC)
    } else {
        0
    };
    if mode & 6 != 0 {
        let mut off = l.data_start;
        let mut k = 0;
        while off + sf::REC_HEADER <= l.file_len && k < l.slots {
            let h = u64_at(&file, off);
            let len = (h & 0x7fff_ffff) as usize;
            if h == 0 || off + sf::record_size(len) > l.file_len {
                break;
            }
            if mode & 2 != 0 {
                let p = &file[off + 8..off + 8 + len];
                let w = sf::header_word(seed, p);
                file[off..off + 8].copy_from_slice(&w.to_le_bytes());
            }
            if mode & 4 != 0 {
                let at = l.index_start + 4 * k;
                file[at..at + 4].copy_from_slice(&(off as u32).to_le_bytes());
            }
            off += sf::record_size(len);
            k += 1;
        }
    }
    if mode & 8 != 0 {
        file.truncate(l.file_len - sf::PAGE);
    }
    let mut scratch = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    let (path, f) = scratch.get_or_insert_with(scratch_file);
    f.set_len(0).expect("truncate the scratch file");
    f.write_all_at(&file, 0).expect("write the scratch file");
    let seq = u64_at(&head, sf::H_SEQ);
    let Ok(Some(seg)) = Segment::open(path, seq, false) else {
        return;
    };
    let l = seg.layout;
    assert!(l.file_len <= file.len());
    black_box((
        seg.count(),
        seg.sealed_count(),
        seg.base(),
        seg.created_ns(),
    ));
    let (mut off, mut k) = (l.data_start, 0);
    while k < l.slots && off + sf::REC_HEADER <= l.file_len {
        let Ok(p) = seg.record_at(off) else { break };
        assert!(off + sf::record_size(p.len()) <= l.file_len);
        off += sf::record_size(p.len());
        k += 1;
    }
    for k in 0..l.slots.min(INDEX_BYTES / 4) {
        let o = seg.slot(k).load(Ordering::Relaxed) as usize;
        if o == 0 {
            break;
        }
        let _ = black_box(seg.record_at(o).map(|p| p.len()));
    }
}

fn scratch_file() -> (PathBuf, File) {
    let shm = PathBuf::from("/dev/shm");
    let dir = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    // `Segment::open` takes a path: the file stays while the process
    // runs; those of processes gone are removed here.
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("tachyon-fuzz-"))
            .and_then(|n| n.strip_suffix(".seg"));
        if pid.is_some_and(|p| !PathBuf::from(format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let path = dir.join(format!("tachyon-fuzz-{}.seg", std::process::id()));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("create the scratch file");
    (path, f)
}
