//! The short fuzz of `bin/test`, on stable Rust: every target runs its
//! committed corpus (`native/fuzz/corpus/<target>/`) and its seeds, then
//! a bounded number of deterministic mutations of them
//! ([`tachyon_fuzz_targets::mutate`]; 20,000 per target, or
//! `TACHYON_FUZZ_MUTATIONS`), and none may panic. A failing input is
//! written to `target/fuzz-failures/<target>-<n>` and named in the
//! failure: `cargo +nightly fuzz run <target> <file>` (in `native/fuzz`)
//! reproduces it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use tachyon_fuzz_targets::mutate::{mutate, XorShift};
use tachyon_fuzz_targets::{seeds, target};

fn corpus_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(name)
}

/// The committed corpus of `name`, then its seeds.
fn inputs(name: &str) -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir(name))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut v: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(p).expect("a corpus file"))
        .collect();
    v.extend(seeds::of(name));
    v
}

fn mutations() -> usize {
    std::env::var("TACHYON_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

fn run(name: &str) {
    let f = target(name).expect("a target of that name");
    let corpus = inputs(name);
    assert!(!corpus.is_empty());
    let check = |input: &[u8], what: &str| {
        if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-failures");
            let _ = std::fs::create_dir_all(&dir);
            let path = dir.join(format!("{name}-{what}"));
            let _ = std::fs::write(&path, input);
            panic!(
                "target {name} panicked on {what} ({} bytes, saved to {})",
                input.len(),
                path.display()
            );
        }
    };
    for (i, input) in corpus.iter().enumerate() {
        check(input, &format!("corpus-{i}"));
    }
    // The seed depends on the name only: every run tries the same inputs.
    let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = XorShift::new(seed);
    for n in 0..mutations() {
        let a = &corpus[rng.below(corpus.len())];
        let b = &corpus[rng.below(corpus.len())];
        let m = mutate(&mut rng, a, b);
        check(&m, &format!("mutation-{n}"));
    }
}

macro_rules! replay {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*
    };
}

replay!(
    wire_bus,
    wire_cmd,
    wire_peer,
    wire_msg,
    membership,
    checkpoint,
    dir_manifest,
    table_segment,
    table_hints,
    table_manifest,
    store_segment,
    node,
    member,
    guard_open,
    key_file,
);

#[test]
fn every_target_has_a_replay() {
    let names: Vec<&str> = tachyon_fuzz_targets::TARGETS.iter().map(|t| t.0).collect();
    let here = include_str!("replay.rs");
    for n in names {
        assert!(here.contains(&format!("    {n},\n")), "no replay of {n}");
    }
}

/// Writes every target's seeds to its corpus directory (run once when a
/// format changes, then minimize: `bin/fuzz --cmin`).
#[test]
#[ignore]
fn write_seeds() {
    for (name, s) in seeds::all() {
        let dir = corpus_dir(name);
        std::fs::create_dir_all(&dir).expect("the corpus directory");
        for (i, b) in s.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), b).expect("a seed file");
        }
    }
}
