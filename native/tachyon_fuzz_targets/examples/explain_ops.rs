//! Prints the operations of a `node` or `member` input (a crash found by
//! the fuzzer, say), each datagram decoded: `cargo run --example
//! explain_ops -- node FILE` (or `member FILE`).

use tachyon_core::seq::wire::{Bus, Cmd, Peer};
use tachyon_fuzz_targets::ops::{self, Op};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(kind), Some(file)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: explain_ops node|member FILE");
        std::process::exit(2);
    };
    let data = std::fs::read(file).expect("the input file");
    let data = if kind == "node" {
        println!("node {}", data.first().map_or(0, |b| b & 1));
        data.get(1..).unwrap_or(&[])
    } else {
        &data[..]
    };
    let mut now = 0;
    for op in ops::parse(data) {
        match op {
            Op::Datagram { from, bytes } => {
                let what = if let Ok(b) = Bus::parse(bytes) {
                    format!(
                        "{:?} {:?} count {} {:02x?}",
                        b.kind,
                        b.h,
                        b.count,
                        bytes.get(36..).map(|t| &t[..t.len().min(64)])
                    )
                } else if let Ok(p) = Peer::parse(bytes) {
                    format!("{p:?} payload {}", Peer::payload(bytes).len())
                } else if let Ok(c) = Cmd::parse(bytes) {
                    format!(
                        "{:?} member {} count {} {:?} {:?}",
                        c.kind,
                        c.member_id,
                        c.count,
                        c.range(),
                        c.hello()
                    )
                } else {
                    format!("malformed {:02x?}", &bytes[..bytes.len().min(48)])
                };
                println!("{now:>12} from {} {what}", ops::sender(from));
            }
            Op::Advance(d) => {
                now += d;
                println!("{now:>12} tick");
            }
            Op::EndBatch => println!("{now:>12} end batch"),
            Op::Extra { arg, bytes } => println!("{now:>12} extra {arg} ({} bytes)", bytes.len()),
        }
    }
}
