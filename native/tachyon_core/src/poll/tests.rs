use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;

const US: Duration = Duration::from_micros(1);

fn plan(wait: WaitStrategy, spin_us: u64, polled_us: u64) -> Plan {
    Plan::new(
        wait,
        Duration::from_micros(spin_us),
        Duration::from_micros(polled_us),
    )
}

fn idle(budget: Duration, then: Idle) -> Plan {
    Plan { budget, then }
}

fn err(kind: io::ErrorKind) -> io::Result<usize> {
    Err(io::Error::new(kind, "test"))
}

/// A clock that moves `step` per reading; counts its readings.
struct Clock {
    now: Cell<Duration>,
    step: Duration,
    reads: Cell<u32>,
}

impl Clock {
    fn new(step: Duration) -> Clock {
        Clock {
            now: Cell::new(Duration::ZERO),
            step,
            reads: Cell::new(0),
        }
    }

    fn elapsed(&self) -> Duration {
        self.now.set(self.now.get() + self.step);
        self.reads.set(self.reads.get() + 1);
        self.now.get()
    }
}

// --- Plan::new: every strategy, inside and past the spin window ---

#[test]
fn busy_spin_polls_max_spin_then_says_empty_whatever_the_window() {
    for (spin, polled) in [(0, 0), (50, 0), (50, 50), (50, 1_000), (1_000_000, 0)] {
        assert_eq!(
            plan(WaitStrategy::BusySpin, spin, polled),
            idle(MAX_SPIN, Idle::Empty),
            "spin {spin} polled {polled}"
        );
    }
}

#[test]
fn park_tries_once_then_sleeps_even_with_a_window_left() {
    for (spin, polled) in [(0, 0), (50, 0), (50, 50), (1_000_000, 0)] {
        assert_eq!(
            plan(WaitStrategy::Park, spin, polled),
            idle(Duration::ZERO, Idle::Sleep)
        );
    }
}

#[test]
fn yield_tries_once_per_call_while_the_window_lasts_then_sleeps() {
    let once_again = idle(Duration::ZERO, Idle::Empty);
    let sleep = idle(Duration::ZERO, Idle::Sleep);
    assert_eq!(plan(WaitStrategy::Yield, 50, 0), once_again);
    assert_eq!(plan(WaitStrategy::Yield, 50, 49), once_again);
    // The window is used up at its end exactly, and past it.
    assert_eq!(plan(WaitStrategy::Yield, 50, 50), sleep);
    assert_eq!(plan(WaitStrategy::Yield, 50, 51), sleep);
    // No window: sleep at once.
    assert_eq!(plan(WaitStrategy::Yield, 0, 0), sleep);
}

#[test]
fn backoff_polls_what_is_left_of_the_window_at_most_max_spin_per_call() {
    // More left than a call may spin: MAX_SPIN.
    assert_eq!(
        plan(WaitStrategy::Backoff, 1_000, 0),
        idle(MAX_SPIN, Idle::Empty)
    );
    assert_eq!(
        plan(WaitStrategy::Backoff, 1_000, 900),
        idle(MAX_SPIN, Idle::Empty)
    );
    // Less left: what is left.
    assert_eq!(
        plan(WaitStrategy::Backoff, 1_000, 970),
        idle(30 * US, Idle::Empty)
    );
    assert_eq!(
        plan(WaitStrategy::Backoff, 1_000, 999),
        idle(US, Idle::Empty)
    );
    // Used up, or none: sleep after one try.
    let sleep = idle(Duration::ZERO, Idle::Sleep);
    assert_eq!(plan(WaitStrategy::Backoff, 1_000, 1_000), sleep);
    assert_eq!(plan(WaitStrategy::Backoff, 1_000, 5_000), sleep);
    assert_eq!(plan(WaitStrategy::Backoff, 0, 0), sleep);
}

#[test]
fn a_window_counts_nanoseconds_and_any_polled_time_is_taken() {
    let ns = Duration::from_nanos;
    assert_eq!(
        Plan::new(WaitStrategy::Backoff, ns(1_500), ns(1_499)),
        idle(ns(1), Idle::Empty)
    );
    // The longest a caller can say it polled (u64 nanoseconds) and more.
    for polled in [ns(u64::MAX), Duration::MAX] {
        for w in WaitStrategy::ALL {
            let p = Plan::new(w, Duration::from_secs(1), polled);
            let want = if w == WaitStrategy::BusySpin {
                idle(MAX_SPIN, Idle::Empty)
            } else {
                idle(Duration::ZERO, Idle::Sleep)
            };
            assert_eq!(p, want, "{w:?}");
        }
    }
}

// --- Plan::run: what each attempt means, and the budget ---

#[test]
fn datagrams_on_the_first_try_end_the_call_without_reading_the_clock() {
    let clock = Clock::new(US);
    let mut tries = 0;
    let got = idle(Duration::ZERO, Idle::Sleep).run(
        &mut (),
        |_| {
            tries += 1;
            Ok(3)
        },
        || clock.elapsed(),
    );
    assert!(matches!(got, Polled::Got));
    assert_eq!((tries, clock.reads.get()), (1, 0));
}

#[test]
fn nothing_yet_is_tried_again_until_the_budget_is_used() {
    // Ok(0), WouldBlock and Interrupted all mean "nothing yet".
    let nothing = [
        || Ok(0),
        || err(io::ErrorKind::WouldBlock),
        || err(io::ErrorKind::Interrupted),
    ];
    for (i, attempt) in nothing.iter().enumerate() {
        for then in [Idle::Empty, Idle::Sleep] {
            let clock = Clock::new(10 * US);
            let mut tries = 0;
            let r = idle(100 * US, then).run(
                &mut (),
                |_| {
                    tries += 1;
                    attempt()
                },
                || clock.elapsed(),
            );
            assert_eq!(
                matches!(r, Polled::Empty),
                then == Idle::Empty,
                "attempt {i}"
            );
            assert_eq!(matches!(r, Polled::Sleep), then == Idle::Sleep);
            // The clock reads 10, 20, ... 100 µs after tries 1..=10.
            assert_eq!(tries, 10, "attempt {i}");
        }
    }
}

#[test]
fn a_zero_budget_tries_exactly_once() {
    for then in [Idle::Empty, Idle::Sleep] {
        let clock = Clock::new(Duration::ZERO);
        let mut tries = 0;
        let r = idle(Duration::ZERO, then).run(
            &mut (),
            |_| {
                tries += 1;
                Ok(0)
            },
            || clock.elapsed(),
        );
        assert_eq!(tries, 1);
        assert_eq!(matches!(r, Polled::Sleep), then == Idle::Sleep);
    }
}

#[test]
fn datagrams_after_empty_tries_within_the_budget_are_got() {
    let clock = Clock::new(US);
    let mut batch = Vec::new();
    let mut tries = 0;
    let r = idle(MAX_SPIN, Idle::Empty).run(
        &mut batch,
        |b: &mut Vec<u32>| {
            tries += 1;
            if tries < 5 {
                return err(io::ErrorKind::WouldBlock);
            }
            b.push(tries);
            Ok(1)
        },
        || clock.elapsed(),
    );
    assert!(matches!(r, Polled::Got));
    assert_eq!(batch, [5]);
    assert_eq!(clock.reads.get(), 4);
}

#[test]
fn a_closed_source_ends_the_call_at_once() {
    let clock = Clock::new(US);
    let mut tries = 0;
    let r = idle(MAX_SPIN, Idle::Empty).run(
        &mut (),
        |_| {
            tries += 1;
            err(io::ErrorKind::NotConnected)
        },
        || clock.elapsed(),
    );
    assert!(matches!(r, Polled::Closed));
    assert_eq!((tries, clock.reads.get()), (1, 0));
}

#[test]
fn other_errors_end_the_call_and_keep_their_kind() {
    for kind in [
        io::ErrorKind::ConnectionRefused,
        io::ErrorKind::PermissionDenied,
        io::ErrorKind::InvalidInput,
        io::ErrorKind::Other,
    ] {
        let mut tries = 0;
        let r = idle(MAX_SPIN, Idle::Empty).run(
            &mut (),
            |_| {
                tries += 1;
                err(kind)
            },
            || Duration::ZERO,
        );
        match r {
            Polled::Failed(e) => assert_eq!(e.kind(), kind),
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(tries, 1);
    }
}

#[test]
fn a_close_during_the_spin_ends_it_closed() {
    // The close lands between two tries: the next try sees the source
    // closed, whatever budget is left.
    let closed = Cell::new(false);
    let clock = Clock::new(US);
    let mut tries = 0;
    let r = idle(MAX_SPIN, Idle::Empty).run(
        &mut (),
        |_| {
            tries += 1;
            if tries == 3 {
                closed.set(true);
            }
            if closed.get() && tries > 3 {
                err(io::ErrorKind::NotConnected)
            } else {
                err(io::ErrorKind::WouldBlock)
            }
        },
        || clock.elapsed(),
    );
    assert!(matches!(r, Polled::Closed));
    assert_eq!(tries, 4);
}

#[test]
fn timeslice_percent_is_tenths_of_a_millisecond_capped_at_100() {
    let cases = [
        (Duration::ZERO, 0),
        (9 * US, 0),
        (10 * US, 1),
        (MAX_SPIN, 10),
        (500 * US, 50),
        (Duration::from_millis(1), 100),
        (Duration::from_secs(1), 100),
        (Duration::MAX, 100),
    ];
    for (used, pct) in cases {
        assert_eq!(timeslice_percent(used), pct, "{used:?}");
    }
}

// --- PollState::recv: the plan on the real clock ---

#[test]
fn recv_by_park_tries_once_and_says_sleep() {
    let st: PollState<u32, u32> = PollState::new(WaitStrategy::Park, 50 * US, 0);
    let (r, _) = st.recv(Duration::ZERO, |n| {
        *n += 1;
        Ok(0)
    });
    assert!(matches!(r, Polled::Sleep));
    let (r, _) = st.recv(Duration::ZERO, |n| Ok(*n as usize));
    assert!(matches!(r, Polled::Got), "the buffers kept the first try");
}

#[test]
fn recv_by_busy_spin_spins_max_spin_and_reports_the_time() {
    let st: PollState<(), u32> = PollState::new(WaitStrategy::BusySpin, Duration::ZERO, ());
    let mut tries = 0u64;
    let (r, used) = st.recv(Duration::ZERO, |_| {
        tries += 1;
        err(io::ErrorKind::WouldBlock)
    });
    assert!(matches!(r, Polled::Empty));
    assert!(used >= MAX_SPIN, "{used:?}");
    assert!(tries >= 1);
    assert!(timeslice_percent(used) >= 10);
}

#[test]
fn recv_by_yield_and_backoff_follow_the_window() {
    for w in [WaitStrategy::Yield, WaitStrategy::Backoff] {
        let st: PollState<(), u32> = PollState::new(w, 20 * US, ());
        let (r, _) = st.recv(Duration::ZERO, |_| Ok(0));
        assert!(matches!(r, Polled::Empty), "{w:?}");
        let (r, _) = st.recv(20 * US, |_| Ok(0));
        assert!(matches!(r, Polled::Sleep), "{w:?}");
    }
}

// --- PollState::select and close ---

/// What a close asked of the runtime.
#[derive(Debug, PartialEq, Eq)]
struct Effects {
    stopped: Vec<RawFd>,
    closed: u32,
}

fn close(st: &PollState<(), u32>, fd: Option<RawFd>, stop_ok: bool) -> (Option<u32>, Effects) {
    let stopped = std::cell::RefCell::new(Vec::new());
    let closed = Cell::new(0);
    let woken = st.close(
        fd,
        |fd| {
            stopped.borrow_mut().push(fd);
            stop_ok
        },
        || closed.set(closed.get() + 1),
    );
    let fx = Effects {
        stopped: stopped.into_inner(),
        closed: closed.get(),
    };
    (woken, fx)
}

fn effects(stopped: &[RawFd], closed: u32) -> Effects {
    Effects {
        stopped: stopped.to_vec(),
        closed,
    }
}

fn state() -> PollState<(), u32> {
    PollState::new(WaitStrategy::Backoff, 50 * US, ())
}

#[test]
fn never_selected_closes_the_descriptor_now_and_wakes_nobody() {
    let st = state();
    assert_eq!(close(&st, Some(7), true), (None, effects(&[], 1)));
}

#[test]
fn selected_is_stopped_in_the_runtime_and_its_waiter_woken() {
    let st = state();
    assert_eq!(
        st.select(Some(7), |fd| {
            assert_eq!(fd, 7);
            Some(1)
        }),
        Ok(())
    );
    // The runtime closes it in its stop callback: not closed here.
    assert_eq!(close(&st, Some(7), true), (Some(1), effects(&[7], 0)));
}

#[test]
fn a_refused_stop_closes_the_descriptor_now() {
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    assert_eq!(close(&st, Some(7), false), (Some(1), effects(&[7], 1)));
}

#[test]
fn selected_but_no_descriptor_left_is_closed_not_stopped() {
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    assert_eq!(close(&st, None, true), (Some(1), effects(&[], 1)));
}

#[test]
fn close_happens_once() {
    for selected in [false, true] {
        let st = state();
        if selected {
            st.select(Some(7), |_| Some(1)).unwrap();
        }
        let (woken, _) = close(&st, Some(7), true);
        assert_eq!(woken.is_some(), selected);
        // Again: nothing stopped, closed nor woken.
        assert_eq!(close(&st, Some(7), true), (None, effects(&[], 0)));
        assert_eq!(close(&st, None, false), (None, effects(&[], 0)));
    }
}

#[test]
fn select_after_close_is_refused_without_asking_the_runtime() {
    // The wake-up of a close that came before the process selected is not
    // lost: the select itself says closed.
    let st = state();
    assert_eq!(close(&st, Some(7), true), (None, effects(&[], 1)));
    let r = st.select(Some(7), |_| panic!("armed after close"));
    assert_eq!(r, Err(SelectError::Closed));
}

#[test]
fn select_without_a_descriptor_is_closed() {
    let st = state();
    let r = st.select(None, |_| panic!("armed without a descriptor"));
    assert_eq!(r, Err(SelectError::Closed));
    // Nothing was selected: a close closes now.
    assert_eq!(close(&st, Some(7), true), (None, effects(&[], 1)));
}

#[test]
fn a_refused_select_registers_no_waiter() {
    let st = state();
    assert_eq!(st.select(Some(7), |_| None), Err(SelectError::Refused));
    assert_eq!(close(&st, Some(7), true), (None, effects(&[], 1)));
}

#[test]
fn a_refused_select_keeps_the_earlier_waiter() {
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    assert_eq!(st.select(Some(7), |_| None), Err(SelectError::Refused));
    assert_eq!(close(&st, Some(7), true), (Some(1), effects(&[7], 0)));
}

#[test]
fn close_wakes_the_last_process_to_select() {
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    st.select(Some(7), |_| Some(2)).unwrap();
    assert_eq!(close(&st, Some(7), true), (Some(2), effects(&[7], 0)));
}

#[test]
fn a_waiter_already_woken_by_readiness_is_woken_by_a_close_too() {
    // The runtime's readiness message is one shot and not seen here: the
    // waiter stays registered, and a close wakes it (a message too many
    // that the receive loop drops).
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    let (r, _) = st.recv(Duration::ZERO, |_| Ok(1));
    assert!(matches!(r, Polled::Got));
    assert_eq!(close(&st, Some(7), true), (Some(1), effects(&[7], 0)));
}

#[test]
fn close_during_a_recv_does_not_wait_for_it() {
    // A close from within a receive (the buffers' lock held) completes:
    // it takes the select state only. The receive then sees its source
    // closed.
    let st = state();
    st.select(Some(7), |_| Some(1)).unwrap();
    let closed = Cell::new(false);
    let mut woken = None;
    let mut once = |_: &mut ()| {
        if !closed.get() {
            woken = st.close(Some(7), |_| true, || {});
            closed.set(true);
            return err(io::ErrorKind::WouldBlock);
        }
        err(io::ErrorKind::NotConnected)
    };
    let (mut r, _) = st.recv(Duration::ZERO, &mut once);
    if matches!(r, Polled::Empty) {
        // Preempted past the spin budget between the two tries (a loaded
        // machine): the call ended empty, and the next one says closed.
        r = st.recv(Duration::ZERO, &mut once).0;
    }
    assert!(matches!(r, Polled::Closed), "{r:?}");
    assert_eq!(woken, Some(1));
}

#[test]
fn close_racing_a_polling_thread_ends_its_receive_closed() {
    let st = Arc::new(PollState::<u64, u32>::new(
        WaitStrategy::Yield,
        Duration::from_secs(10),
        0,
    ));
    let closed = Arc::new(AtomicBool::new(false));
    let poller = {
        let (st, closed) = (st.clone(), closed.clone());
        std::thread::spawn(move || loop {
            let (r, _) = st.recv(Duration::ZERO, |n| {
                *n += 1;
                if closed.load(Ordering::Acquire) {
                    err(io::ErrorKind::NotConnected)
                } else {
                    Ok(0)
                }
            });
            match r {
                Polled::Empty => continue,
                Polled::Closed => return,
                other => panic!("{other:?}"),
            }
        })
    };
    std::thread::sleep(Duration::from_millis(2));
    // The source is marked closed first (as the endpoint's request_stop
    // does), then the poll state closes.
    closed.store(true, Ordering::Release);
    assert_eq!(st.close(Some(7), |_| true, || {}), None);
    poller.join().unwrap();
}

#[test]
fn a_select_racing_a_close_is_either_woken_or_told_closed() {
    // Never both: armed, and the close saw no waiter (a lost wake-up).
    for _ in 0..500 {
        let st = Arc::new(state());
        let go = Arc::new(Barrier::new(2));
        let selector = {
            let (st, go) = (st.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                st.select(Some(7), |_| Some(1))
            })
        };
        go.wait();
        let woken = st.close(Some(7), |_| true, || {});
        let selected = selector.join().unwrap();
        match selected {
            Ok(()) => assert_eq!(woken, Some(1)),
            Err(e) => {
                assert_eq!(e, SelectError::Closed);
                assert_eq!(woken, None);
            }
        }
    }
}
