//! Times each target on its committed corpus (what one execution costs):
//! `cargo run --release --example time_targets [TARGET...]`.

use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (name, f) in tachyon_fuzz_targets::TARGETS {
        if !args.is_empty() && !args.iter().any(|a| a == name) {
            continue;
        }
        let inputs: Vec<Vec<u8>> = std::fs::read_dir(dir.join(name))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read(e.path()).ok())
            .collect();
        let t = Instant::now();
        let mut n = 0u64;
        while t.elapsed().as_secs_f64() < 1.0 {
            for i in &inputs {
                f(i);
                n += 1;
            }
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!(
            "{name:15} {} inputs, {us:.1} us per execution",
            inputs.len()
        );
    }
}
