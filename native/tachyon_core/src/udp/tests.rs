//! Tests of the UDP loops. Loopback only, ephemeral ports, and no busy
//! spinning (the test machine's cores are shared): `Park`, `Backoff`, `Yield`.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::bench::ping::{ping, spawn_ping, PingConfig};
use crate::wait::WaitStrategy;

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn echo(wait: WaitStrategy) -> EchoServer {
    let mut cfg = EchoConfig::new(loopback());
    cfg.wait = wait;
    EchoServer::start(cfg).unwrap()
}

fn client() -> UdpSocket {
    let c = UdpSocket::bind(loopback()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn echo_returns_every_size_byte_for_byte() {
    let server = echo(WaitStrategy::Park);
    let c = client();
    let mut buf = vec![0u8; 70_000];
    let sizes = [
        0usize,
        1,
        7,
        8,
        255,
        256,
        1_400,
        9_000,
        32_768,
        65_000,
        MAX_UDP_PAYLOAD,
    ];
    for (k, &size) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..size).map(|i| (i * 31 + k) as u8).collect();
        c.send_to(&data, server.local_addr()).unwrap();
        let (n, from) = c.recv_from(&mut buf).unwrap();
        assert_eq!(from, server.local_addr());
        assert_eq!(n, size);
        assert_eq!(&buf[..n], &data[..], "size {size}");
    }
    // The echo thread counts what it sent after sending it.
    wait_until("packets_out", || {
        server.stats().packets_out == sizes.len() as u64
    });
    let s = server.stats();
    assert_eq!(s.packets_in, sizes.len() as u64);
    assert_eq!(s.packets_out, sizes.len() as u64);
    let total: usize = sizes.iter().sum();
    assert_eq!(s.bytes_in, total as u64);
    assert_eq!(s.bytes_out, total as u64);
    assert_eq!(s.errors(), 0);
}

#[test]
fn echo_serves_many_clients_at_once() {
    let server = echo(WaitStrategy::Backoff);
    let addr = server.local_addr();
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            std::thread::spawn(move || {
                let c = client();
                let mut buf = [0u8; 64];
                for i in 0..200u32 {
                    let mut msg = [t; 16];
                    msg[..4].copy_from_slice(&i.to_le_bytes());
                    c.send_to(&msg, addr).unwrap();
                    let (n, _) = c.recv_from(&mut buf).unwrap();
                    assert_eq!(&buf[..n], &msg[..]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    wait_until("packets_out", || server.stats().packets_out == 1_600);
    let s = server.stats();
    assert_eq!(s.packets_in, 1_600);
    assert_eq!(s.packets_out, 1_600);
    assert!(s.batches >= 1 && s.batches <= 1_600);
}

#[test]
fn stopping_frees_the_port_at_once_and_a_port_in_use_is_an_error() {
    let server = echo(WaitStrategy::Park);
    let addr = server.local_addr();
    let mut cfg = EchoConfig::new(addr);
    cfg.wait = WaitStrategy::Park;
    let err = EchoServer::start(cfg).err().expect("the port is in use");
    assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE));
    assert_eq!(errno_name(&err), "eaddrinuse");
    assert!(server.is_running());
    server.stop();
    assert!(!server.is_running());
    // Free at once: no wait, no SO_REUSEADDR.
    let again = EchoServer::start(cfg).expect("port free after stop");
    assert_eq!(again.local_addr(), addr);
    // A drop does not wait (it may run on a BEAM scheduler): the thread
    // closes the socket as it ends, moments later.
    let t0 = std::time::Instant::now();
    drop(again);
    assert!(t0.elapsed() < Duration::from_millis(50));
    let freed = (0..1000).any(|_| {
        std::thread::sleep(Duration::from_millis(1));
        UdpSocket::bind(addr).is_ok()
    });
    assert!(freed, "port free soon after drop");
}

#[test]
fn oversized_datagrams_are_counted_and_the_loop_keeps_running() {
    let mut cfg = EchoConfig::new(loopback());
    cfg.wait = WaitStrategy::Park;
    cfg.max_datagram = 100;
    let server = EchoServer::start(cfg).unwrap();
    let c = client();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 512];
    c.send_to(&[7u8; 101], server.local_addr()).unwrap();
    assert!(
        c.recv_from(&mut buf).is_err(),
        "a truncated datagram must not be echoed"
    );
    wait_until("truncated count", || server.stats().truncated == 1);
    c.send_to(b"", server.local_addr()).unwrap();
    c.send_to(&[9u8; 100], server.local_addr()).unwrap();
    assert_eq!(c.recv_from(&mut buf).unwrap().0, 0);
    assert_eq!(c.recv_from(&mut buf).unwrap().0, 100);
    wait_until("packets_out", || server.stats().packets_out == 2);
    let s = server.stats();
    assert_eq!((s.packets_in, s.packets_out, s.truncated), (3, 2, 1));
}

#[test]
fn echo_to_a_vanished_sender_does_not_stop_the_loop() {
    let server = echo(WaitStrategy::Park);
    {
        let gone = client();
        gone.send_to(b"nobody will read this", server.local_addr())
            .unwrap();
    }
    wait_until("first echo", || server.stats().packets_in == 1);
    let c = client();
    let mut buf = [0u8; 64];
    c.send_to(b"still there?", server.local_addr()).unwrap();
    let (n, _) = c.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"still there?");
}

#[test]
fn a_batch_takes_every_waiting_datagram_and_echoes_them_in_one_call() {
    let sock = Socket::bind(loopback(), &SocketOptions::default()).unwrap();
    let addr = sock.local_addr().unwrap();
    let c = client();
    for i in 0..10u8 {
        c.send_to(&[i; 32], addr).unwrap();
    }
    let mut batch = Batch::new(16, 2048);
    assert_eq!(batch.recv(&sock).unwrap(), 10);
    for i in 0..10 {
        assert_eq!(batch.data(i), &[i as u8; 32]);
        assert_eq!(batch.addr(i), Some(c.local_addr().unwrap()));
        assert!(!batch.is_truncated(i));
    }
    let out = batch.echo(&sock);
    assert_eq!(
        out,
        sys::SendOutcome {
            sent: 10,
            bytes: 320,
            errors: 0
        }
    );
    let mut buf = [0u8; 64];
    for i in 0..10u8 {
        let (n, _) = c.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[i; 32]);
    }
    let err = batch.recv(&sock).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock);
}

#[test]
fn kernel_drops_are_reported() {
    let opts = SocketOptions {
        recbuf: Some(4096),
        ..Default::default()
    };
    let sock = Socket::bind(loopback(), &opts).unwrap();
    let addr = sock.local_addr().unwrap();
    let c = client();
    // Far more than a small receive buffer holds: the kernel drops the rest.
    for _ in 0..200 {
        c.send_to(&[1u8; 1000], addr).unwrap();
    }
    let mut batch = Batch::new(64, 2048);
    while batch.recv(&sock).is_ok() {}
    c.send_to(&[2u8; 10], addr).unwrap();
    assert_eq!(batch.recv(&sock).unwrap(), 1);
    assert!(batch.kernel_drops() > 0, "drops: {}", batch.kernel_drops());
}

#[test]
fn ping_measures_round_trips_with_every_non_spinning_strategy() {
    for wait in [
        WaitStrategy::Park,
        WaitStrategy::Backoff,
        WaitStrategy::Yield,
    ] {
        let server = echo(WaitStrategy::Park);
        let mut cfg = PingConfig::new(server.local_addr(), 300, 30);
        cfg.wait = wait;
        let out = ping(&cfg, &AtomicBool::new(false)).unwrap();
        assert_eq!(out.hist.count(), 300, "{wait:?}");
        assert_eq!(
            (out.sent, out.received, out.lost, out.mismatched),
            (330, 330, 0, 0)
        );
        assert!(out.hist.value_at(50.0) > 0);
        wait_until("packets_out", || server.stats().packets_out == 330);
    }
}

#[test]
fn ping_of_small_and_empty_datagrams() {
    let server = echo(WaitStrategy::Park);
    for size in [0, 1, 7] {
        let mut cfg = PingConfig::new(server.local_addr(), 20, 0);
        cfg.wait = WaitStrategy::Park;
        cfg.size = size;
        let out = ping(&cfg, &AtomicBool::new(false)).unwrap();
        assert_eq!((out.hist.count(), out.lost), (20, 0), "size {size}");
    }
}

#[test]
fn spawned_ping_reports_its_placement() {
    let server = echo(WaitStrategy::Park);
    let mut cfg = PingConfig::new(server.local_addr(), 50, 0);
    cfg.wait = WaitStrategy::Park;
    cfg.core = Some(0);
    let out = spawn_ping(cfg, Arc::new(AtomicBool::new(false))).unwrap();
    assert_eq!(out.placement.core, Some(0));
    assert!(out.placement.pinned);
    assert_eq!(out.placement.describe(), "core 0 park");
    assert_eq!(out.hist.count(), 50);
}

#[test]
fn ping_errors_are_clear() {
    // Nothing listens: the ICMP port-unreachable comes back as ECONNREFUSED.
    let free = UdpSocket::bind(loopback()).unwrap().local_addr().unwrap();
    let mut cfg = PingConfig::new(free, 10, 0);
    cfg.wait = WaitStrategy::Park;
    let err = ping(&cfg, &AtomicBool::new(false)).err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(errno_name(&err), "econnrefused");

    cfg.size = MAX_UDP_PAYLOAD + 1;
    let err = ping(&cfg, &AtomicBool::new(false)).err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);

    // A peer that reads but never answers: lost round trips, then TimedOut.
    let silent = UdpSocket::bind(loopback()).unwrap();
    let mut cfg = PingConfig::new(silent.local_addr().unwrap(), 10, 0);
    cfg.wait = WaitStrategy::Park;
    cfg.timeout = Duration::from_millis(20);
    cfg.max_lost = 2;
    let err = ping(&cfg, &AtomicBool::new(false)).err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);

    let stop = AtomicBool::new(true);
    let err = ping(&PingConfig::new(free, 10, 0), &stop).err().unwrap();
    assert_eq!(err.kind(), std::io::ErrorKind::Interrupted);
}

fn endpoint(max_queue: Option<u64>) -> (Endpoint, mpsc::Receiver<(SocketAddr, Vec<u8>)>) {
    let mut cfg = EndpointConfig::new(loopback());
    cfg.max_queue = max_queue;
    let ep = Endpoint::bind(cfg).unwrap();
    let (tx, rx) = mpsc::channel();
    ep.start(move |from: SocketAddr, data: &[u8]| tx.send((from, data.to_vec())).is_ok())
        .unwrap();
    (ep, rx)
}

#[test]
fn endpoint_delivers_datagrams_and_sends_from_any_thread() {
    let (ep, rx) = endpoint(None);
    let c = client();
    for i in 0..100u8 {
        c.send_to(&[i; 10], ep.local_addr()).unwrap();
    }
    for i in 0..100u8 {
        let (from, data) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(from, c.local_addr().unwrap());
        assert_eq!(data, vec![i; 10]);
    }
    let ep = Arc::new(ep);
    let to = c.local_addr().unwrap();
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let ep = ep.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    ep.send_to(b"pong", &to).unwrap();
                }
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    let mut buf = [0u8; 16];
    for _ in 0..100 {
        let (n, from) = c.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"pong"[..], ep.local_addr()));
    }
    let s = ep.stats();
    assert_eq!(
        (s.received, s.delivered, s.dropped, s.sent, s.sent_bytes),
        (100, 100, 0, 100, 400)
    );
    assert_eq!(s.in_flight, 100);
    ep.ack(100);
    assert_eq!(ep.stats().in_flight, 0);
}

#[test]
fn endpoint_drops_above_max_queue_until_acknowledged() {
    let (ep, rx) = endpoint(Some(10));
    let c = client();
    for i in 0..50u8 {
        c.send_to(&[i], ep.local_addr()).unwrap();
    }
    wait_until("all 50 received", || ep.stats().received == 50);
    let s = ep.stats();
    assert_eq!((s.delivered, s.dropped, s.in_flight), (10, 40, 10));
    // Tail drop: the first ten arrived, the newest were dropped.
    let got: Vec<u8> = (0..10)
        .map(|_| rx.recv_timeout(Duration::from_secs(1)).unwrap().1[0])
        .collect();
    assert_eq!(got, (0..10).collect::<Vec<u8>>());
    ep.ack(4);
    for i in 0..5u8 {
        c.send_to(&[100 + i], ep.local_addr()).unwrap();
    }
    wait_until("5 more received", || ep.stats().received == 55);
    let s = ep.stats();
    assert_eq!((s.delivered, s.dropped, s.in_flight), (14, 41, 10));
}

#[test]
fn endpoint_counts_truncated_and_send_errors() {
    let mut cfg = EndpointConfig::new(loopback());
    cfg.max_datagram = 64;
    let ep = Endpoint::bind(cfg).unwrap();
    let (tx, rx) = mpsc::channel();
    ep.start(move |_: SocketAddr, d: &[u8]| tx.send(d.len()).is_ok())
        .unwrap();
    let c = client();
    c.send_to(&[0u8; 65], ep.local_addr()).unwrap();
    c.send_to(&[0u8; 64], ep.local_addr()).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 64);
    assert_eq!(ep.stats().truncated, 1);

    let to = c.local_addr().unwrap();
    match ep.send_to(&vec![0u8; MAX_UDP_PAYLOAD + 1], &to) {
        Err(SendError::Io(e)) => assert_eq!(errno_name(&e), "emsgsize"),
        other => panic!("expected EMSGSIZE, got {other:?}"),
    }
    let port0: SocketAddr = "127.0.0.1:0".parse().unwrap();
    assert!(matches!(ep.send_to(b"x", &port0), Err(SendError::Io(_))));
    let v6: SocketAddr = "[::1]:9".parse().unwrap();
    assert!(matches!(ep.send_to(b"x", &v6), Err(SendError::Io(_))));
    assert_eq!(ep.stats().send_errors, 3);
    assert!(ep.send_to(b"", &to).is_ok());
}

#[test]
fn closing_an_endpoint_joins_its_thread_and_frees_the_port() {
    let (ep, _rx) = endpoint(None);
    let addr = ep.local_addr();
    ep.close();
    assert!(matches!(ep.send_to(b"x", &addr), Err(SendError::Closed)));
    UdpSocket::bind(addr).expect("port free after close");
    ep.close(); // idempotent
    assert!(Endpoint::bind(EndpointConfig::new(loopback()))
        .unwrap()
        .start(|_: SocketAddr, _: &[u8]| true)
        .is_ok());
}

#[test]
fn a_stop_request_closes_the_socket_without_a_join() {
    let (ep, _rx) = endpoint(None);
    let addr = ep.local_addr();
    ep.request_stop();
    wait_until("port free", || UdpSocket::bind(addr).is_ok());
}

#[test]
fn a_sink_holding_the_last_reference_does_not_deadlock() {
    // As in the NIF: the sink owns a reference to the endpoint, so when the
    // receive thread ends it may drop the last one, and Endpoint::drop then
    // runs on the receive thread itself.
    let ep = Arc::new(Endpoint::bind(EndpointConfig::new(loopback())).unwrap());
    let addr = ep.local_addr();
    let slot: Arc<Mutex<Option<Arc<Endpoint>>>> = Arc::new(Mutex::new(Some(ep.clone())));
    let held = slot.lock().unwrap().take();
    struct Holder(#[allow(dead_code)] Option<Arc<Endpoint>>);
    impl Sink for Holder {
        fn deliver(&mut self, _: SocketAddr, _: &[u8]) -> bool {
            true
        }
    }
    ep.start(Holder(held)).unwrap();
    ep.request_stop();
    drop(ep);
    wait_until("port free", || UdpSocket::bind(addr).is_ok());
}

#[test]
fn bad_configs_are_rejected() {
    let mut cfg = EchoConfig::new(loopback());
    cfg.batch = 0;
    assert!(EchoServer::start(cfg).is_err());
    cfg.batch = 8;
    cfg.max_datagram = MAX_UDP_PAYLOAD + 1;
    assert!(EchoServer::start(cfg).is_err());
    let mut e = EndpointConfig::new(loopback());
    e.max_queue = Some(0);
    assert!(Endpoint::bind(e).is_err());
    let bad: SocketAddr = "192.0.2.1:0".parse().unwrap(); // TEST-NET-1: not ours
    let err = EchoServer::start(EchoConfig::new(bad)).err().unwrap();
    assert_eq!(errno_name(&err), "eaddrnotavail");
}

#[test]
fn poll_mode_receives_in_order_on_the_calling_thread() {
    let mut cfg = EndpointConfig::new(loopback());
    cfg.batch = 64;
    let ep = Endpoint::bind(cfg).unwrap();
    let mut batch = Batch::new(cfg.batch, cfg.max_datagram);
    struct Collect(Vec<Vec<u8>>);
    impl Sink for Collect {
        fn deliver(&mut self, _from: SocketAddr, data: &[u8]) -> bool {
            self.0.push(data.to_vec());
            true
        }
    }
    let mut sink = Collect(Vec::new());
    // Nothing waiting: WouldBlock, never a wait.
    let e = ep.poll(&mut batch, 64, &mut sink).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    let tx = UdpSocket::bind(loopback()).unwrap();
    const N: u32 = 10_000;
    let mut sent = 0u32;
    let t0 = Instant::now();
    while sent < N || sink.0.len() < N as usize {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "stuck at {}",
            sink.0.len()
        );
        // A few in flight at a time: the receive buffer never overflows.
        while sent < N && sent < sink.0.len() as u32 + 32 {
            tx.send_to(&sent.to_le_bytes(), ep.local_addr()).unwrap();
            sent += 1;
        }
        match ep.poll(&mut batch, 64, &mut sink) {
            Ok(n) => assert!(n > 0 && n <= 64),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
        }
    }
    for (i, d) in sink.0.iter().enumerate() {
        assert_eq!(d[..], (i as u32).to_le_bytes(), "datagram {i}");
    }
    let s = ep.stats();
    assert_eq!(
        (s.received, s.delivered, s.dropped),
        (N as u64, N as u64, 0)
    );
    assert!(ep.raw_fd().is_some());
    ep.close();
    assert_eq!(ep.raw_fd(), None);
    let e = ep.poll(&mut batch, 8, &mut |_, _: &[u8]| true).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotConnected);
}

#[test]
fn an_endpoint_with_a_receive_thread_cannot_be_polled() {
    let mut cfg = EndpointConfig::new(loopback());
    cfg.wait = WaitStrategy::Park;
    let ep = Endpoint::bind(cfg).unwrap();
    ep.start(|_, _: &[u8]| true).unwrap();
    let mut batch = Batch::new(4, 64);
    let e = ep.poll(&mut batch, 8, &mut |_, _: &[u8]| true).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    ep.close();
}

#[test]
fn a_connected_endpoint_sends_to_its_peer_and_polls_one_at_a_time() {
    let a = Endpoint::bind(EndpointConfig::new(loopback())).unwrap();
    let b = Endpoint::bind(EndpointConfig::new(loopback())).unwrap();
    // Not connected: the kernel asks for an address.
    assert!(matches!(a.send(b"x"), Err(SendError::Io(_))));
    a.connect(&b.local_addr()).unwrap();
    b.connect(&a.local_addr()).unwrap();
    // A single-slot poll (recvmsg, not recvmmsg) sees each datagram, its
    // sender and its size, truncation included.
    let mut batch = Batch::new(4, 64);
    for (i, len) in [1usize, 64, 0, 65].into_iter().enumerate() {
        a.send(&vec![i as u8; len]).unwrap();
        let mut got: Vec<(SocketAddr, Vec<u8>)> = Vec::new();
        let t0 = Instant::now();
        loop {
            match b.poll(&mut batch, 1, &mut |from, d: &[u8]| {
                got.push((from, d.to_vec()));
                true
            }) {
                Ok(n) => {
                    assert_eq!(n, 1);
                    break;
                }
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::WouldBlock),
            }
            assert!(t0.elapsed() < Duration::from_secs(10), "datagram {i} lost");
        }
        if len <= 64 {
            assert_eq!(got, vec![(a.local_addr(), vec![i as u8; len])]);
        } else {
            assert!(got.is_empty(), "a truncated datagram is not delivered");
        }
    }
    assert_eq!(b.stats().truncated, 1);
    b.send(b"back").unwrap();
    a.close();
    assert!(matches!(a.send(b"late"), Err(SendError::Closed)));
    assert!(matches!(a.connect(&b.local_addr()), Err(SendError::Closed)));
    b.close();
}
