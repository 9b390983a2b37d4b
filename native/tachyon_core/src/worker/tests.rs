use super::*;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim_end() == name)
        .count()
}

fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn spawn_runs_named_and_join_stops_it() {
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    let w = Worker::spawn("tw-join", None, move |ctx| {
        while !ctx.stopped() {
            n2.fetch_add(1, Ordering::Relaxed);
            ctx.sleep(Duration::from_secs(60));
        }
    })
    .unwrap();
    assert_eq!(threads_named("tw-join"), 1);
    // In its 60 s sleep now (or about to be).
    assert!(wait_until(|| n.load(Ordering::Relaxed) >= 1));
    let t0 = Instant::now();
    w.join().unwrap();
    // The 60 s sleep was ended by the stop's wake-up.
    assert!(t0.elapsed() < Duration::from_secs(10));
    // The kernel lists a joined thread for a moment after its exit.
    assert!(wait_until(|| threads_named("tw-join") == 0));
}

#[test]
fn drop_does_not_block_and_the_reaper_joins() {
    let w = Worker::spawn("tw-drop", None, |ctx| {
        // Slow to stop: a drop must not wait for this.
        while !ctx.stopped() {
            ctx.sleep(Duration::from_secs(60));
        }
        std::thread::sleep(Duration::from_millis(300));
    })
    .unwrap();
    let t0 = Instant::now();
    drop(w);
    assert!(t0.elapsed() < Duration::from_millis(250));
    assert!(wait_until(|| threads_named("tw-drop") == 0));
}

#[test]
fn a_panic_is_reported_and_marks_it_finished() {
    let w = Worker::spawn("tw-panic", None, |_| panic!("boom")).unwrap();
    assert!(wait_until(|| w.is_finished()));
    assert_eq!(w.join(), Err(Panicked));
}

#[test]
fn dropped_on_its_own_thread_is_not_self_joined() {
    let slot: Arc<Mutex<Option<Worker>>> = Arc::new(Mutex::new(None));
    let s2 = slot.clone();
    let go = Arc::new(AtomicBool::new(false));
    let go2 = go.clone();
    let w = Worker::spawn("tw-self", None, move |_| {
        while !go2.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // The last owner goes away on the worker's own thread.
        drop(s2.lock().unwrap().take());
    })
    .unwrap();
    *slot.lock().unwrap() = Some(w);
    go.store(true, Ordering::Release);
    assert!(wait_until(|| threads_named("tw-self") == 0));
    assert!(slot.lock().unwrap().is_none());
}

thread_local!(static NO_BLOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });

/// This thread may not block while `NO_BLOCK` is set (as a normal
/// scheduler).
fn install_check() {
    set_blocking_check(|| !NO_BLOCK.with(|c| c.get()));
}

#[test]
fn defer_runs_on_the_reaper_in_order() {
    let (tx, rx) = mpsc::channel();
    for i in 0..3 {
        let tx = tx.clone();
        defer(move || {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = tx.send((i, name));
        });
    }
    defer(|| panic!("a panicking job does not end the reaper"));
    let tx2 = tx.clone();
    defer(move || {
        let _ = tx2.send((3, None));
    });
    for i in 0..3 {
        let (n, name) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(n, i);
        assert_eq!(name.as_deref(), Some("tachyon-reaper"));
    }
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().0, 3);
}

#[test]
fn spawn_where_blocking_is_refused_does_not_wait_for_the_thread() {
    install_check();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    NO_BLOCK.with(|c| c.set(true));
    let w = Worker::spawn("tw-nowait", Some(0), move |ctx| {
        let _ = go_rx.recv_timeout(Duration::from_secs(10));
        while !ctx.stopped() {
            ctx.sleep(Duration::from_secs(60));
        }
    });
    NO_BLOCK.with(|c| c.set(false));
    let w = w.unwrap();
    assert!(wait_until(|| w.is_started()));
    assert_eq!(w.placement(), (Some(0), true));
    go_tx.send(()).unwrap();
    w.join().unwrap();
}

#[test]
fn a_join_where_blocking_is_refused_does_not_wait() {
    install_check();
    let w = Worker::spawn("tw-refuse", None, |ctx| {
        while !ctx.stopped() {
            ctx.sleep(Duration::from_secs(60));
        }
        std::thread::sleep(Duration::from_millis(300));
    })
    .unwrap();
    let before = refused_joins();
    NO_BLOCK.with(|c| c.set(true));
    let t0 = Instant::now();
    w.join().unwrap();
    NO_BLOCK.with(|c| c.set(false));
    assert!(t0.elapsed() < Duration::from_millis(250));
    assert_eq!(refused_joins(), before + 1);
    assert!(wait_until(|| threads_named("tw-refuse") == 0));
}

#[test]
fn pinning_is_reported() {
    let w = Worker::spawn("tw-pin", Some(0), |ctx| {
        while !ctx.stopped() {
            ctx.sleep(Duration::from_secs(1));
        }
    })
    .unwrap();
    assert_eq!(w.placement(), (Some(0), true));
    w.join().unwrap();
    let w = Worker::spawn("tw-pin2", Some(100_000), |_| {}).unwrap();
    assert_eq!(w.placement(), (Some(100_000), false));
}
