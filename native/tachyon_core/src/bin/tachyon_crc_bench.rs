//! The CRC32C of a store record (4-byte length prefix + 256-byte payload):
//! the `crc32c` crate (two calls, as the store did) against
//! `tachyon_core::crc` (what it does now). 20,000,000 checksums each, two
//! rounds; prints ns per checksum.
//!
//!     cargo run --release -p tachyon_core --bin tachyon_crc_bench

use std::hint::black_box;
use std::time::Instant;

fn main() {
    let payload: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    let n = 20_000_000u32;
    let mut acc = 0u32;
    for round in 1..=2 {
        let t = Instant::now();
        for i in 0..n {
            let len = (256 + (i & 1)).to_le_bytes();
            acc ^= crc32c::crc32c_append(crc32c::crc32c(&len), black_box(&payload));
        }
        let krate = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        for i in 0..n {
            acc ^= tachyon_core::crc::crc32c_u32_prefixed(256 + (i & 1), black_box(&payload));
        }
        let ours = t.elapsed().as_nanos() as f64 / n as f64;
        println!("round {round}: crc32c crate {krate:.1} ns, tachyon_core::crc {ours:.1} ns");
    }
    black_box(acc);
}
