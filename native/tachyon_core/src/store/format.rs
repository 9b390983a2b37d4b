//! The on-disk format of a store segment (see `docs/FORMAT.md`).
//!
//! ```text
//! file  = header page (4096 B) | index region | data region
//! index = `slots` x u32 LE: file offset of record k of this segment, 0 = none
//! data  = records, each 8-byte aligned:
//!         u64 LE header: bits 0..31 = payload length | VALID (bit 31)
//!                        bits 32..63 = CRC32C(length as u32 LE ++ payload),
//!                        chained from the segment's seed (version 2: its
//!                        header CRC; version 1: none)
//!         payload, zero-padded to a multiple of 8
//! ```
//!
//! A record is published by one release store of its 8-byte header after the
//! payload is in place (and the header word after it zeroed), then its index
//! slot is stored (release). A zero header ends the log. Records never
//! straddle segments.
//!
//! A segment file may be reused for a later segment (see `docs/FORMAT.md`,
//! "Reused segment files"): its data region then still holds records of its
//! earlier life, which never verify under the new seed.

/// Magic at offset 0 of an activated segment file.
pub const MAGIC: [u8; 8] = *b"TACHLOG1";
/// Magic at offset 0 of a segment file that was prepared (created,
/// allocated) and not activated yet: the store made it, and it holds no
/// record, so a store may remove it.
pub const PREP_MAGIC: [u8; 8] = *b"TACHPRE1";
/// Format version of the segments this release writes: 2 chains record
/// CRCs from the segment's header CRC (its seed), so that a record of an
/// earlier life of a reused file never verifies.
pub const VERSION: u32 = 2;
/// The first version: record CRCs unchained (seed 0). Still read, and still
/// written to an active segment of that version found at open.
pub const VERSION_1: u32 = 1;

/// `flags` bit: the file was a retired segment, reused (its data region
/// holds old records, which do not verify under this segment's seed).
pub const FLAG_REUSED: u32 = 1;
/// `flags` bit: this segment starts the log anew (`reset_dir`): the
/// segments before it are leftovers of the log before the reset.
pub const FLAG_RESET: u32 = 2;
/// Size of the header page.
pub const HEADER_SIZE: usize = 4096;
/// Page size used for alignment of the regions.
pub const PAGE: usize = 4096;

// Header fields (byte offsets inside the header page).
pub const H_MAGIC: usize = 0; // [u8; 8]
pub const H_VERSION: usize = 8; // u32
pub const H_FLAGS: usize = 12; // u32: FLAG_REUSED | FLAG_RESET
pub const H_SEQ: usize = 16; // u64 segment sequence number (also the file name)
pub const H_BASE: usize = 24; // u64 index of the first record in the segment
pub const H_DATA_CAP: usize = 32; // u64 data region size in bytes
pub const H_SLOTS: usize = 40; // u64 number of index slots
pub const H_CREATED: usize = 48; // u64 unix time in ns when activated
pub const H_HCRC: usize = 56; // u32 CRC32C of bytes 0..56
pub const H_SEALED_COUNT: usize = 64; // u64 records in the segment once sealed
pub const H_SEALED_END: usize = 72; // u64 data bytes used once sealed
pub const H_SEALED: usize = 80; // u64 1 once sealed (stored last, release)

/// Bit 31 of the record header's low word: the record is whole.
pub const VALID: u64 = 1 << 31;
/// Size of a record header.
pub const REC_HEADER: usize = 8;
/// Largest payload the format can describe.
pub const MAX_PAYLOAD: usize = (1 << 31) - 1;
/// Largest data region: offsets in the index are u32 file offsets.
pub const MAX_DATA_CAP: usize = 3 << 30;
/// Smallest data region.
pub const MIN_DATA_CAP: usize = 64 * 1024;

/// Round `n` up to a multiple of `to` (a power of two).
#[inline]
pub const fn align_up(n: usize, to: usize) -> usize {
    (n + to - 1) & !(to - 1)
}

/// Bytes a record with a payload of `len` bytes takes in the data region.
#[inline]
pub const fn record_size(len: usize) -> usize {
    REC_HEADER + align_up(len, 8)
}

/// Number of index slots for a data region of `cap` bytes: one per 64 bytes
/// of data (a segment also rolls when its slots run out).
#[inline]
pub const fn slots_for(cap: usize) -> usize {
    let s = cap / 64;
    if s < 1024 {
        1024
    } else {
        s
    }
}

/// Byte layout of a segment with a data region of `cap` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub data_cap: usize,
    pub slots: usize,
    pub index_start: usize,
    pub data_start: usize,
    pub file_len: usize,
}

impl Layout {
    pub const fn new(data_cap: usize) -> Layout {
        let slots = slots_for(data_cap);
        let index_start = HEADER_SIZE;
        let data_start = index_start + align_up(slots * 4, PAGE);
        Layout {
            data_cap,
            slots,
            index_start,
            data_start,
            file_len: data_start + data_cap,
        }
    }
}

/// CRC32C of a record of a segment with `seed`: the length as u32 LE, then
/// the payload, chained from `seed` (0: the plain CRC32C, version 1).
#[inline]
pub fn record_crc(seed: u32, payload: &[u8]) -> u32 {
    crate::crc::crc32c_u32_prefixed_append(seed, payload.len() as u32, payload)
}

/// The 8-byte record header word of a segment with `seed`.
#[inline]
pub fn header_word(seed: u32, payload: &[u8]) -> u64 {
    ((record_crc(seed, payload) as u64) << 32) | VALID | payload.len() as u64
}

/// The segment file name for sequence number `seq`.
pub fn segment_file_name(seq: u64) -> String {
    crate::segment::file_name(seq, "seg")
}

/// The name a retired segment `seq` has while its file is being reused
/// (`<seq:020>.retired`: not a segment of the log any more).
pub fn retired_file_name(seq: u64) -> String {
    crate::segment::file_name(seq, "retired")
}

/// Parses a segment file name back into its sequence number.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    match crate::segment::parse_file_name(name)? {
        (seq, "seg") => Some(seq),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_page_aligned() {
        let l = Layout::new(64 << 20);
        assert_eq!(l.slots, (64 << 20) / 64);
        assert_eq!(l.data_start % PAGE, 0);
        assert_eq!(l.file_len, l.data_start + (64 << 20));
        let small = Layout::new(MIN_DATA_CAP);
        assert_eq!(small.slots, 1024);
    }

    #[test]
    fn record_sizes() {
        assert_eq!(record_size(0), 8);
        assert_eq!(record_size(1), 16);
        assert_eq!(record_size(256), 264);
    }

    #[test]
    fn header_word_has_length_valid_and_crc() {
        let w = header_word(0, b"hello");
        assert_eq!(w & 0x7fff_ffff, 5);
        assert_ne!(w & VALID, 0);
        assert_eq!((w >> 32) as u32, record_crc(0, b"hello"));
        assert_ne!(header_word(0, b""), 0);
        // Version 1: the plain CRC32C of the length and the payload.
        let mut v1 = 5u32.to_le_bytes().to_vec();
        v1.extend_from_slice(b"hello");
        assert_eq!(record_crc(0, b"hello"), crate::crc::crc32c(&v1));
        // Another seed, another checksum: a record of another life of the
        // file does not verify.
        assert_ne!(record_crc(0x1234_5678, b"hello"), record_crc(0, b"hello"));
        assert_ne!(header_word(7, b"hello"), header_word(8, b"hello"));
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(segment_file_name(42), "00000000000000000042.seg");
        assert_eq!(
            parse_segment_file_name("00000000000000000042.seg"),
            Some(42)
        );
        assert_eq!(parse_segment_file_name("42.seg"), None);
        assert_eq!(parse_segment_file_name("0000000000000000004x.seg"), None);
    }
}
