//! CRC32C (Castagnoli) for small records.
//!
//! The `crc32c` crate is fast on large buffers (three interleaved streams),
//! but on a 256-byte record it cost 22-32 ns here, and a second call for the
//! 4-byte length prefix of a store record another ~20 ns of setup. For
//! inputs up to [`SMALL`] bytes this module runs the SSE 4.2 `crc32`
//! instruction directly (one 8-byte word per instruction; the length
//! prefix is one more instruction): 15-22 ns for a whole 4 + 256-byte
//! record. Larger inputs and CPUs without SSE 4.2 use the crate. The values
//! are the standard CRC32C either way (the tests compare against the crate).

/// Inputs up to this many bytes take the single-stream instruction loop.
pub const SMALL: usize = 1024;

/// CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// CRC32C of the bytes whose CRC32C is `crc`, followed by `data`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() <= SMALL && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked just above).
        return unsafe { !hw::update(!crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// CRC32C of `prefix` as 4 little-endian bytes followed by `data` (a store
/// record's checksum: its length, then its payload).
#[inline]
pub fn crc32c_u32_prefixed(prefix: u32, data: &[u8]) -> u32 {
    crc32c_u32_prefixed_append(0, prefix, data)
}

/// CRC32C of the bytes whose CRC32C is `crc`, followed by `prefix` as 4
/// little-endian bytes and `data` (a store record's checksum, chained from
/// its segment's seed).
#[inline]
pub fn crc32c_u32_prefixed_append(crc: u32, prefix: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() <= SMALL && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2 (checked just above).
        return unsafe { !hw::update(hw::update_u32(!crc, prefix), data) };
    }
    crc32c::crc32c_append(crc32c::crc32c_append(crc, &prefix.to_le_bytes()), data)
}

#[cfg(target_arch = "x86_64")]
mod hw {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};

    /// The raw (not inverted) CRC state after `data`.
    ///
    /// # Safety
    /// The CPU must support SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    pub unsafe fn update(crc: u32, data: &[u8]) -> u32 {
        let mut c = crc as u64;
        let mut words = data.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            c = _mm_crc32_u64(c, u64::from_le_bytes(b));
        }
        let mut c = c as u32;
        for &b in words.remainder() {
            c = _mm_crc32_u8(c, b);
        }
        c
    }

    /// The raw CRC state after `v` as 4 little-endian bytes.
    ///
    /// # Safety
    /// The CPU must support SSE 4.2.
    #[target_feature(enable = "sse4.2")]
    pub unsafe fn update_u32(crc: u32, v: u32) -> u32 {
        _mm_crc32_u32(crc, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn matches_the_crate_at_every_small_length_and_beyond() {
        let data = bytes(3 * SMALL);
        for len in (0..=SMALL + 9).chain([2 * SMALL, 3 * SMALL]) {
            let d = &data[..len];
            assert_eq!(crc32c(d), crc32c::crc32c(d), "len {len}");
            assert_eq!(
                crc32c_append(0xDEAD_BEEF, d),
                crc32c::crc32c_append(0xDEAD_BEEF, d)
            );
            let prefixed = crc32c::crc32c_append(crc32c::crc32c(&(len as u32).to_le_bytes()), d);
            assert_eq!(crc32c_u32_prefixed(len as u32, d), prefixed, "len {len}");
            let seeded = crc32c::crc32c_append(
                crc32c::crc32c_append(0xDEAD_BEEF, &(len as u32).to_le_bytes()),
                d,
            );
            assert_eq!(
                crc32c_u32_prefixed_append(0xDEAD_BEEF, len as u32, d),
                seeded,
                "len {len}"
            );
        }
    }

    #[test]
    fn known_value() {
        // The CRC32C check value (RFC 3720, appendix B.4).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }
}
