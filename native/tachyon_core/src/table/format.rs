//! Bytes on disk of a table: segment files (the log) and hint files (the
//! checkpoint of a sealed segment's keys). All integers are little-endian.
//! `docs/FORMAT.md` ("## Table") describes the same layout for humans.
//!
//! Segment file `<id:020>.seg`:
//!
//! ```text
//! header (32 bytes)
//!   0  magic      "TCHYTBL1"
//!   8  version    u32 = 1
//!   12 flags      u32 (0)
//!   16 id         u64 (same as the file name)
//!   24 reserved   u32 (0)
//!   28 crc32c     u32 of bytes 0..28
//! records, back to back from offset 32, then zeroes (preallocated space)
//!   0  crc32c     u32 of bytes 4 .. 16 + len
//!   4  len        u32 payload bytes (> 0; 0 marks the end of the log)
//!   8  seq        u64 sequence number of the first entry
//!   16 payload    one or more entries; entry i has sequence number seq + i
//! entry
//!   0  kind       u8 (1 = put, 2 = delete)
//!   1  klen       u32
//!   5  vlen       u32 (0 for a delete)
//!   9  key, then value
//! ```
//!
//! A record is written payload first and header last, so a record whose
//! header is not all there reads as zeroes (the end) or fails its CRC (a torn
//! tail, cut at recovery). A batch (`put_many`) is one record: all or nothing.
//!
//! Hint file `<id:020>.hint`, written once a sealed segment is durable:
//!
//! ```text
//! header (40 bytes)
//!   0  magic      "TCHYHNT1"
//!   8  version    u32 = 1
//!   12 reserved   u32
//!   16 id         u64 segment id
//!   24 seg_len    u64 bytes of the segment file covered (its data end)
//!   32 count      u64 entries
//! entries
//!   0  kind u8 | klen u32 | vlen u32 | val_off u32 | seq u64 | key
//! trailer
//!   crc32c u32 of every byte before it
//! ```

use std::io;

pub const SEG_MAGIC: [u8; 8] = *b"TCHYTBL1";
pub const HINT_MAGIC: [u8; 8] = *b"TCHYHNT1";
pub const VERSION: u32 = 1;
pub const SEG_HEADER: usize = 32;
pub const REC_HEADER: usize = 16;
pub const ENTRY_HEADER: usize = 9;
pub const HINT_HEADER: usize = 40;
pub const HINT_ENTRY: usize = 21;

/// Entries a piece of background work (a scan for hints, a compaction's
/// copy, hint encoding) handles between two [`crate::worker::pace`] calls.
pub const PACE_ENTRIES: usize = 64;
/// See [`crate::worker::PACE_BYTES`].
pub const PACE_BYTES: usize = crate::worker::PACE_BYTES;

pub const KIND_PUT: u8 = 1;
pub const KIND_DEL: u8 = 2;

/// Bytes an entry accounts for in a segment's live/total counters: the entry
/// plus a record header, as if each entry were its own record (compaction
/// writes them so).
#[inline]
pub fn entry_cost(klen: usize, vlen: usize) -> u64 {
    (REC_HEADER + ENTRY_HEADER + klen + vlen) as u64
}

pub fn segment_file_name(id: u64) -> String {
    crate::segment::file_name(id, "seg")
}

pub fn hint_file_name(id: u64) -> String {
    crate::segment::file_name(id, "hint")
}

/// The id of a segment (`.seg`) or hint (`.hint`) file name.
pub fn parse_file_name(name: &str) -> Option<(u64, &'static str)> {
    match crate::segment::parse_file_name(name)? {
        (id, "seg") => Some((id, "seg")),
        (id, "hint") => Some((id, "hint")),
        _ => None,
    }
}

pub fn segment_header(id: u64) -> [u8; SEG_HEADER] {
    let mut h = [0u8; SEG_HEADER];
    h[0..8].copy_from_slice(&SEG_MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&id.to_le_bytes());
    let crc = crc32c::crc32c(&h[..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What a segment file starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderCheck {
    Valid,
    /// All zero: a file whose creation did not finish.
    Zero,
    Damaged,
}

/// Checks a segment header.
pub fn check_segment_header(h: &[u8], id: u64) -> HeaderCheck {
    let n = h.len().min(SEG_HEADER);
    if h[..n].iter().all(|&b| b == 0) {
        return HeaderCheck::Zero;
    }
    if h.len() < SEG_HEADER
        || h[0..8] != SEG_MAGIC
        || u32_at(h, 8) != VERSION
        || u64_at(h, 16) != id
        || crc32c::crc32c(&h[..28]) != u32_at(h, 28)
    {
        return HeaderCheck::Damaged;
    }
    HeaderCheck::Valid
}

#[inline]
pub fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

#[inline]
pub fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// Writes one entry (header, key, value) at the start of `dst`; returns its
/// length. `dst` must be long enough.
#[inline]
pub fn write_entry(dst: &mut [u8], kind: u8, key: &[u8], val: &[u8]) -> usize {
    dst[0] = kind;
    dst[1..5].copy_from_slice(&(key.len() as u32).to_le_bytes());
    dst[5..9].copy_from_slice(&(val.len() as u32).to_le_bytes());
    let k_end = ENTRY_HEADER + key.len();
    dst[ENTRY_HEADER..k_end].copy_from_slice(key);
    dst[k_end..k_end + val.len()].copy_from_slice(val);
    k_end + val.len()
}

/// Fills in the header of a record whose payload (`rec[16..16 + len]`) is
/// already written, except for the CRC; returns the CRC to store at 0..4.
#[inline]
pub fn finish_record_header(rec: &mut [u8], len: usize, seq: u64) -> u32 {
    rec[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    rec[8..16].copy_from_slice(&seq.to_le_bytes());
    crate::crc::crc32c(&rec[4..REC_HEADER + len])
}

/// One entry found in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    pub kind: u8,
    pub seq: u64,
    pub key: &'a [u8],
    pub vlen: u32,
    /// File offset of the value (of the entry's end for a delete).
    pub val_off: u32,
}

/// How a scan of segment records ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// A zero header or the end of the bytes: the log ends at `end`.
    Clean,
    /// A record that does not verify starts at `end`.
    Torn,
}

/// Walks the records of a segment's bytes (`data` starts at file offset 0
/// and holds the header), calling `f` for every entry of every verified
/// record. Returns the offset where the valid log ends and why.
pub fn scan_records<'d, F: FnMut(EntryRef<'d>)>(data: &'d [u8], mut f: F) -> (usize, ScanEnd) {
    let mut pos = SEG_HEADER;
    loop {
        if pos + REC_HEADER > data.len() {
            // Fewer bytes than a header: the end if they are zero.
            let rest = &data[pos.min(data.len())..];
            let end = if rest.iter().all(|&b| b == 0) {
                ScanEnd::Clean
            } else {
                ScanEnd::Torn
            };
            return (pos, end);
        }
        let crc = u32_at(data, pos);
        let len = u32_at(data, pos + 4) as usize;
        let seq = u64_at(data, pos + 8);
        if len == 0 {
            if crc == 0 && seq == 0 {
                return (pos, ScanEnd::Clean);
            }
            return (pos, ScanEnd::Torn);
        }
        let rec_end = pos + REC_HEADER + len;
        if rec_end > data.len() || crate::crc::crc32c(&data[pos + 4..rec_end]) != crc {
            return (pos, ScanEnd::Torn);
        }
        // Verified: walk its entries (a verified record can still be
        // malformed only through a bug, or a file made to pass the CRC;
        // treat that as torn too, and so sequence numbers past u64::MAX).
        let n = entries_ok(&data[pos + REC_HEADER..rec_end]);
        if n.is_none_or(|n| seq.checked_add(n - 1).is_none()) {
            return (pos, ScanEnd::Torn);
        }
        let mut p = pos + REC_HEADER;
        let mut i = 0u64;
        while p < rec_end {
            let kind = data[p];
            let klen = u32_at(data, p + 1) as usize;
            let vlen = u32_at(data, p + 5) as usize;
            let k0 = p + ENTRY_HEADER;
            f(EntryRef {
                kind,
                seq: seq + i,
                key: &data[k0..k0 + klen],
                vlen: vlen as u32,
                val_off: (k0 + klen) as u32,
            });
            p = k0 + klen + vlen;
            i += 1;
        }
        pos = rec_end;
    }
}

/// The number of entries of a record's payload (at least 1), `None` if
/// they do not fill it exactly.
fn entries_ok(payload: &[u8]) -> Option<u64> {
    let mut p = 0usize;
    let mut n = 0;
    while p < payload.len() {
        if p + ENTRY_HEADER > payload.len() {
            return None;
        }
        let kind = payload[p];
        let klen = u32_at(payload, p + 1) as usize;
        let vlen = u32_at(payload, p + 5) as usize;
        if !(kind == KIND_PUT || kind == KIND_DEL) || (kind == KIND_DEL && vlen != 0) {
            return None;
        }
        let next = p
            .checked_add(ENTRY_HEADER + klen)
            .and_then(|x| x.checked_add(vlen));
        match next {
            Some(end) if end <= payload.len() => p = end,
            _ => return None,
        }
        n += 1;
    }
    (p == payload.len() && n > 0).then_some(n)
}

/// Encodes a hint file for segment `id` covering `seg_len` bytes.
pub fn encode_hints(id: u64, seg_len: u64, entries: &[(u8, u64, &[u8], u32, u32)]) -> Vec<u8> {
    let mut keys = 0;
    for (i, e) in entries.iter().enumerate() {
        if i.is_multiple_of(PACE_ENTRIES * 16) {
            crate::worker::pace();
        }
        keys += e.2.len();
    }
    let mut out = Vec::with_capacity(HINT_HEADER + entries.len() * HINT_ENTRY + keys + 4);
    out.extend_from_slice(&HINT_MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&seg_len.to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for (i, &(kind, seq, key, vlen, val_off)) in entries.iter().enumerate() {
        if i.is_multiple_of(PACE_ENTRIES) {
            crate::worker::pace();
        }
        out.push(kind);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&vlen.to_le_bytes());
        out.extend_from_slice(&val_off.to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(key);
    }
    let mut crc = 0;
    for piece in out.chunks(PACE_BYTES) {
        crc = crc32c::crc32c_append(crc, piece);
        crate::worker::pace();
    }
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a hint file, calling `f` per entry. Returns the covered segment
/// length. Any damage (CRC, lengths, id) is an error: the caller then scans
/// the segment itself.
pub fn decode_hints<'d, F: FnMut(EntryRef<'d>)>(
    bytes: &'d [u8],
    id: u64,
    mut f: F,
) -> io::Result<u64> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad hint file");
    if bytes.len() < HINT_HEADER + 4 || bytes[0..8] != HINT_MAGIC || u32_at(bytes, 8) != VERSION {
        return Err(bad());
    }
    let body = &bytes[..bytes.len() - 4];
    if crc32c::crc32c(body) != u32_at(bytes, bytes.len() - 4) || u64_at(bytes, 16) != id {
        return Err(bad());
    }
    let seg_len = u64_at(bytes, 24);
    let count = u64_at(bytes, 32);
    let mut p = HINT_HEADER;
    for _ in 0..count {
        if p + HINT_ENTRY > body.len() {
            return Err(bad());
        }
        let kind = body[p];
        let klen = u32_at(body, p + 1) as usize;
        let vlen = u32_at(body, p + 5);
        let val_off = u32_at(body, p + 9);
        let seq = u64_at(body, p + 13);
        let k0 = p + HINT_ENTRY;
        if k0 + klen > body.len()
            || !(kind == KIND_PUT || kind == KIND_DEL)
            || val_off as u64 + vlen as u64 > seg_len
        {
            return Err(bad());
        }
        f(EntryRef {
            kind,
            seq,
            key: &body[k0..k0 + klen],
            vlen,
            val_off,
        });
        p = k0 + klen;
    }
    if p != body.len() {
        return Err(bad());
    }
    Ok(seg_len)
}

/// The compaction manifest: the ids of the input segments a compaction is
/// deleting, written (durably) after its outputs are durable and removed once
/// the inputs are gone. Recovery finishes the deletion if it finds one, so
/// that a crash in the middle never leaves some inputs (holding old values)
/// without the others (holding the deletes that shadowed them).
pub const MANIFEST_FILE: &str = "compact.del";
const MANIFEST_MAGIC: [u8; 8] = *b"TCHYCMP1";

pub fn encode_manifest(ids: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + ids.len() * 8 + 4);
    out.extend_from_slice(&MANIFEST_MAGIC);
    out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
    for id in ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    let mut crc = 0;
    for piece in out.chunks(PACE_BYTES) {
        crc = crc32c::crc32c_append(crc, piece);
        crate::worker::pace();
    }
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The ids in a manifest, or `None` if it does not verify.
pub fn decode_manifest(b: &[u8]) -> Option<Vec<u64>> {
    if b.len() < 20 || b[0..8] != MANIFEST_MAGIC {
        return None;
    }
    // The count is checked against the length before it sizes anything
    // (`16 + 8 n + 4` overflowed for a count near 2^61).
    let n = u64_at(b, 8);
    let want = n.checked_mul(8).and_then(|x| x.checked_add(20))?;
    if b.len() as u64 != want || crc32c::crc32c(&b[..b.len() - 4]) != u32_at(b, b.len() - 4) {
        return None;
    }
    Some((0..n as usize).map(|i| u64_at(b, 16 + i * 8)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
        let len: usize = entries
            .iter()
            .map(|e| ENTRY_HEADER + e.1.len() + e.2.len())
            .sum();
        let mut r = vec![0u8; REC_HEADER + len];
        let mut p = REC_HEADER;
        for (k, key, val) in entries {
            p += write_entry(&mut r[p..], *k, key, val);
        }
        let crc = finish_record_header(&mut r, len, seq);
        r[0..4].copy_from_slice(&crc.to_le_bytes());
        r
    }

    #[test]
    fn scan_and_torn() {
        let mut seg = segment_header(7).to_vec();
        assert_eq!(check_segment_header(&seg, 7), HeaderCheck::Valid);
        assert_eq!(check_segment_header(&seg, 8), HeaderCheck::Damaged);
        assert_eq!(check_segment_header(&[0u8; 32], 8), HeaderCheck::Zero);
        assert_eq!(check_segment_header(&[0u8; 5], 8), HeaderCheck::Zero);
        assert_eq!(check_segment_header(&seg[..20], 7), HeaderCheck::Damaged);
        seg.extend(record(10, &[(KIND_PUT, b"a", b"1"), (KIND_DEL, b"b", b"")]));
        seg.extend(record(12, &[(KIND_PUT, b"c", b"333")]));
        let good_end = seg.len();
        seg.extend(vec![0u8; 100]);
        let mut seen = Vec::new();
        let (end, how) = scan_records(&seg, |e| seen.push((e.kind, e.seq, e.key.to_vec(), e.vlen)));
        assert_eq!((end, how), (good_end, ScanEnd::Clean));
        assert_eq!(
            seen,
            vec![
                (1, 10, b"a".to_vec(), 1),
                (2, 11, b"b".to_vec(), 0),
                (1, 12, b"c".to_vec(), 3)
            ]
        );
        // Tear the last record: the scan stops before it.
        let mut torn = seg.clone();
        torn[good_end - 1] ^= 0xff;
        let before_last = good_end - (REC_HEADER + ENTRY_HEADER + 4);
        assert_eq!(scan_records(&torn, |_| {}), (before_last, ScanEnd::Torn));
        // A half-written header (len set, crc not yet) is torn too.
        let mut half = seg[..good_end].to_vec();
        half.extend([0, 0, 0, 0, 5, 0, 0, 0]);
        half.extend(vec![0u8; 40]);
        assert_eq!(scan_records(&half, |_| {}), (good_end, ScanEnd::Torn));
    }

    #[test]
    fn a_record_whose_sequence_numbers_pass_u64_max_is_torn() {
        // Found by the fuzzer (table_segment, its CRCs recomputed): a
        // record of two entries from seq u64::MAX numbered the second one
        // past it (an overflow).
        let mut seg = segment_header(7).to_vec();
        seg.extend(record(5, &[(KIND_PUT, b"a", b"1")]));
        let good_end = seg.len();
        seg.extend(record(
            u64::MAX,
            &[(KIND_PUT, b"a", b"1"), (KIND_DEL, b"b", b"")],
        ));
        let mut seen = Vec::new();
        let end = scan_records(&seg, |e| seen.push(e.seq));
        assert_eq!(end, (good_end, ScanEnd::Torn));
        assert_eq!(seen, vec![5]);
        // One entry at u64::MAX is numbered right.
        let mut one = segment_header(7).to_vec();
        one.extend(record(u64::MAX, &[(KIND_PUT, b"a", b"1")]));
        seen.clear();
        assert_eq!(scan_records(&one, |e| seen.push(e.seq)).1, ScanEnd::Clean);
        assert_eq!(seen, vec![u64::MAX]);
    }

    #[test]
    fn hints_roundtrip_and_damage() {
        let e: Vec<(u8, u64, &[u8], u32, u32)> =
            vec![(KIND_PUT, 5, b"key", 3, 60), (KIND_DEL, 6, b"k2", 0, 80)];
        let h = encode_hints(3, 100, &e);
        let mut got = Vec::new();
        assert_eq!(
            decode_hints(&h, 3, |x| got.push((
                x.kind,
                x.seq,
                x.key.to_vec(),
                x.vlen,
                x.val_off
            )))
            .unwrap(),
            100
        );
        assert_eq!(
            got,
            vec![
                (1, 5, b"key".to_vec(), 3, 60),
                (2, 6, b"k2".to_vec(), 0, 80)
            ]
        );
        assert!(decode_hints(&h, 4, |_| {}).is_err());
        for i in 0..h.len() {
            let mut d = h.clone();
            d[i] ^= 1;
            assert!(decode_hints(&d, 3, |_| {}).is_err(), "flip at {i}");
        }
        assert!(decode_hints(&h[..h.len() - 1], 3, |_| {}).is_err());
    }

    #[test]
    fn manifest_roundtrip_and_damage() {
        let m = encode_manifest(&[3, 7, 1 << 40]);
        assert_eq!(decode_manifest(&m), Some(vec![3, 7, 1 << 40]));
        assert_eq!(decode_manifest(&encode_manifest(&[])), Some(vec![]));
        for i in 0..m.len() {
            let mut d = m.clone();
            d[i] ^= 4;
            assert_eq!(decode_manifest(&d), None, "flip at {i}");
        }
        assert_eq!(decode_manifest(&m[..m.len() - 1]), None);
    }

    #[test]
    fn a_manifest_count_that_overflows_the_length_is_none() {
        // Found by the fuzzer (table_manifest): a count of 2^61 - 1 made
        // `16 + 8 n + 4` overflow.
        let crash = b"TCHYCMP1\xff\xff\xff\xff\xff\xff\xff\x1f\0\0\0\0\0\xe9\0Z\0\0\xb4]";
        assert_eq!(decode_manifest(crash), None);
        let mut b = MANIFEST_MAGIC.to_vec();
        for n in [u64::MAX, u64::MAX / 8, u64::MAX / 8 - 1, 1 << 61] {
            b.truncate(8);
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&[0; 4]);
            assert_eq!(decode_manifest(&b), None, "count {n}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(segment_file_name(12), "00000000000000000012.seg");
        assert_eq!(
            parse_file_name("00000000000000000012.seg"),
            Some((12, "seg"))
        );
        assert_eq!(
            parse_file_name("00000000000000000012.hint"),
            Some((12, "hint"))
        );
        assert_eq!(parse_file_name("12.seg"), None);
        assert_eq!(parse_file_name("00000000000000000012.tmp"), None);
    }
}
