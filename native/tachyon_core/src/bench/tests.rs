//! Tests of the benchmark loops (the ping client's are with the echo
//! server's, in `udp::tests`; the hiccup loop's in `hiccup`).

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::async_store::{AsyncStore, Config as AsyncConfig, OnFull};
use crate::store::{Config, Store};
use crate::wait::WaitStrategy;

static N: AtomicUsize = AtomicUsize::new(0);

fn tmp() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "tachyon-bench-test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&d);
    d
}

#[test]
fn pretouched_writer_takes_no_page_faults() {
    let d = tmp();
    let cfg = Config {
        segment_size: 16 << 20,
        ..Config::default()
    };
    let s = Store::open(&d, cfg).unwrap();
    // 20k x 256 B = 5 MiB: inside the window faulted in at open.
    let r = super::store::append(&s, 20_000, 100, 256).unwrap();
    assert_eq!(r.hist.count(), 20_000);
    assert!(
        r.page_faults <= 2,
        "writer took {} page faults",
        r.page_faults
    );
    drop(s);
    let cfg = Config {
        segment_size: 16 << 20,
        pretouch: false,
        ..Config::default()
    };
    let d2 = tmp();
    let s = Store::open(&d2, cfg).unwrap();
    let r = super::store::append(&s, 20_000, 100, 256).unwrap();
    assert!(
        r.page_faults > 100,
        "without pre-touch the writer faults: {}",
        r.page_faults
    );
    drop(s);
    fs::remove_dir_all(&d).unwrap();
    fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn async_loop_drains_before_the_ring_fills() {
    let d = tmp();
    let store_cfg = Config {
        segment_size: 64 * 1024,
        max_message_size: 4096,
        pretouch: false,
        ..Config::default()
    };
    let store = Arc::new(Store::open(&d, store_cfg).unwrap());
    // Never busy-spin in tests: the writer parks.
    let c = AsyncConfig {
        ring_size: 8192,
        wait: WaitStrategy::Park,
        on_full: OnFull::Error,
        ..AsyncConfig::default()
    };
    let a = AsyncStore::open(store.clone(), c, None).unwrap();
    let (h, drains) = super::async_store::append(&a, 2_000, 100, 256).unwrap();
    assert_eq!(h.count(), 2_000);
    assert!(drains >= 2_100 / 30, "{drains}");
    assert_eq!(a.stats().rejected, 0);
    assert_eq!(store.next_index().unwrap(), 2_100);
    a.close().unwrap();
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn relay_floors_return_every_message_one_or_many_per_datagram() {
    use crate::bench::relay::{bus_datagram_size, throughput};
    use crate::udp::{EchoConfig, EchoServer, SocketOptions};
    let mut cfg = EchoConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.wait = WaitStrategy::Backoff;
    cfg.max_datagram = 65_507;
    cfg.socket = SocketOptions {
        recbuf: Some(4 << 20),
        sndbuf: Some(4 << 20),
        ..SocketOptions::default()
    };
    let relay = EchoServer::start(cfg).unwrap();
    assert_eq!(bus_datagram_size(256, 1), 36 + 20 + 256);
    for (per, window) in [(1usize, 64u64), (64, 4)] {
        let t = throughput(relay.local_addr(), 6_400, 256, per, window, 4 << 20).unwrap();
        // Loopback with room in the buffers: nothing is lost.
        assert_eq!((t.messages, t.lost), (6_400, 0), "per {per}");
        assert_eq!(t.datagrams, 6_400 / per as u64);
        assert!(t.elapsed_ns > 0);
    }
    let s = relay.stats();
    assert_eq!(s.packets_in, 6_400 + 100);
    relay.stop();
    // A datagram over the UDP limit is refused, not sent.
    let e = throughput("127.0.0.1:9".parse().unwrap(), 10, 60_000, 2, 1, 1 << 20).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn fdatasync_floors_sync_every_record_or_every_batch_and_leave_no_file() {
    use crate::bench::fsync::{entry_size, latency, throughput, FILE_NAME};
    let d = tmp();
    assert_eq!(entry_size(256), 20 + 256);
    let h = latency(&d, 20, 5, 256).unwrap();
    assert_eq!(h.count(), 20);
    assert!(h.report().min > 0);
    // 100 records, 32 to a sync: 32 + 32 + 32 + 4.
    let t = throughput(&d, 100, 256, 32).unwrap();
    assert_eq!((t.records, t.syncs), (100, 4));
    assert!(t.elapsed_ns > 0);
    // Fewer records than a batch: one sync. Nothing is left behind.
    let t = throughput(&d, 10, 256, 2048).unwrap();
    assert_eq!((t.records, t.syncs), (10, 1));
    assert!(!d.join(FILE_NAME).exists());
    fs::remove_dir_all(&d).unwrap();
    // A directory that cannot be made is an error, not a panic.
    let file = tmp();
    fs::write(&file, b"x").unwrap();
    assert!(latency(&file.join("sub"), 1, 0, 8).is_err());
    fs::remove_file(&file).unwrap();
}
