//! Seeds of the disk targets ([`crate::disk`]), made by the real writers.

use tachyon_core::store::format as sf;
use tachyon_core::table::format as tf;

use crate::seeds::moded;

fn table_record(seq: u64, entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
    let len: usize = entries
        .iter()
        .map(|e| tf::ENTRY_HEADER + e.1.len() + e.2.len())
        .sum();
    let mut r = vec![0u8; tf::REC_HEADER + len];
    let mut p = tf::REC_HEADER;
    for (k, key, val) in entries {
        p += tf::write_entry(&mut r[p..], *k, key, val);
    }
    let crc = tf::finish_record_header(&mut r, len, seq);
    r[0..4].copy_from_slice(&crc.to_le_bytes());
    r
}

pub fn table_segments() -> Vec<Vec<u8>> {
    let mut seg = tf::segment_header(7).to_vec();
    seg.extend(table_record(
        10,
        &[(tf::KIND_PUT, b"a", b"1"), (tf::KIND_DEL, b"b", b"")],
    ));
    seg.extend(table_record(12, &[(tf::KIND_PUT, b"key", b"value")]));
    let mut tail = seg.clone();
    tail.extend([0u8; 24]);
    vec![moded(0, &seg), moded(0, &tail)]
}

pub fn table_hints() -> Vec<Vec<u8>> {
    let e: Vec<(u8, u64, &[u8], u32, u32)> = vec![
        (tf::KIND_PUT, 5, b"key", 3, 60),
        (tf::KIND_DEL, 6, b"k2", 0, 80),
    ];
    vec![
        moded(0, &tf::encode_hints(3, 100, &e)),
        moded(0, &tf::encode_hints(4, 0, &[])),
    ]
}

pub fn table_manifests() -> Vec<Vec<u8>> {
    vec![
        moded(0, &tf::encode_manifest(&[3, 7, 1 << 40])),
        moded(0, &tf::encode_manifest(&[])),
    ]
}

/// A store's first segment after a few appends, as the target's input:
/// the header's 64 bytes, the index's first bytes, the data region's
/// records.
pub fn store_segments() -> Vec<Vec<u8>> {
    use tachyon_core::store::{Clock, Config, Store};
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tachyon-fuzz-seed-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = Config {
        segment_size: sf::MIN_DATA_CAP,
        initial_segment_size: sf::MIN_DATA_CAP,
        pretouch: false,
        prepared_segments: 0,
        max_message_size: 1024,
        clock: Clock::new(|| 1_700_000_000_000_000_000),
        ..Config::default()
    };
    let store = Store::open(&dir, cfg).expect("a store in a temporary directory");
    for i in 0..6u32 {
        let p: Vec<u8> = (0..(i * 13 + 1)).map(|b| b as u8 ^ i as u8).collect();
        store.append(&p).expect("an append");
    }
    store.close();
    drop(store);
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the store's directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    for f in files {
        let b = std::fs::read(&f).expect("a segment file");
        if b.len() < sf::HEADER_SIZE || b[..8] != sf::MAGIC {
            continue;
        }
        let cap = u64::from_le_bytes(
            b[sf::H_DATA_CAP..sf::H_DATA_CAP + 8]
                .try_into()
                .unwrap_or_default(),
        );
        let l = sf::Layout::new(cap as usize);
        let used = b[l.data_start..]
            .iter()
            .rposition(|&x| x != 0)
            .map_or(0, |i| (i + 8) & !7);
        let mut input = vec![0u8];
        input.extend_from_slice(&b[..64]);
        input.extend_from_slice(&b[l.index_start..l.index_start + crate::disk::INDEX_BYTES]);
        input.extend_from_slice(&b[l.data_start..l.data_start + used]);
        out.push(input);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.is_empty(), "the store wrote no segment");
    out
}
