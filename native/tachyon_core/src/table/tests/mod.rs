//! The table's tests, by topic, and the helpers they share.

use super::*;
use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod basics;
mod compaction;
mod recovery;

/// A fresh directory, removed on drop.
struct TmpDir(PathBuf);

impl TmpDir {
    fn new() -> TmpDir {
        TmpDir(crate::segment::test_dir("table"))
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

const MODES: [ValueMode; 3] = [ValueMode::Memory, ValueMode::Mapped, ValueMode::File];

fn small(mode: ValueMode) -> Config {
    Config {
        mode,
        segment_size: 64 * 1024,
        max_key_size: 256,
        max_value_size: 4096,
        compaction_interval: None,
        shards: 8,
        ..Config::default()
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key-{i}").into_bytes()
}

fn val(i: u64, version: u64) -> Vec<u8> {
    let n = ((i * 7 + version * 13) % 300) as usize;
    let mut v = format!("v{version}-{i}-").into_bytes();
    v.resize(v.len() + n, (i % 251) as u8);
    v
}

fn seg_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    v.sort();
    v
}

fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // (A hint file may be renamed meanwhile by the background thread.)
    fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| Some(e.ok()?.metadata().ok()?.blocks() * 512))
        .sum()
}

/// Sealed segments (not the active one, not a prepared next one).
fn sealed(t: &Table) -> u64 {
    lock(&t.inner.segs)
        .by_id
        .values()
        .filter(|s| s.sealed.load(Ordering::Acquire))
        .count() as u64
}

/// Runs one background compaction round now, as the thread would.
fn compact_background(t: &Table) -> Compaction {
    let _g = lock(&t.inner.bg);
    t.inner.write_hints().unwrap();
    t.inner.compact_round(false).unwrap()
}
