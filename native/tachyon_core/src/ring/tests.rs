use super::*;

fn drain(c: &mut Consumer) -> Vec<Vec<u8>> {
    let b = c.batch(usize::MAX, usize::MAX);
    let v = b.iter().map(|s| s.to_vec()).collect();
    b.release();
    v
}

#[test]
fn capacity_rules() {
    assert_eq!(
        Ring::with_capacity(1000).err(),
        Some(RingError::BadCapacity)
    );
    assert_eq!(
        Ring::with_capacity(2048).err(),
        Some(RingError::BadCapacity)
    );
    assert_eq!(
        Ring::with_capacity(MAX_CAPACITY * 2).err(),
        Some(RingError::BadCapacity)
    );
    let r = Ring::with_capacity(4096).unwrap();
    assert_eq!(r.capacity(), 4096);
    assert_eq!(r.max_payload(), 2040);
    assert_eq!(record_size(0), 8);
    assert_eq!(record_size(1), 16);
    assert_eq!(record_size(8), 16);
    assert_eq!(record_size(9), 24);
}

#[test]
fn order_and_empty_records() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    assert!(c.is_empty());
    assert!(c.batch(10, 100).is_empty());
    let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; i as usize]).collect();
    for m in &msgs {
        p.try_push(m).unwrap();
    }
    assert!(!c.is_empty());
    assert_eq!(drain(&mut c), msgs);
    assert!(c.is_empty());
    assert_eq!(c.ring().used(), 0);
}

#[test]
fn a_batch_dropped_without_release_gives_nothing_back() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    p.try_push(b"one").unwrap();
    p.try_push(b"two").unwrap();
    {
        let b = c.batch(1, usize::MAX);
        assert_eq!(b.iter().next(), Some(&b"one"[..]));
    }
    assert_eq!(drain(&mut c), vec![b"one".to_vec(), b"two".to_vec()]);
    assert!(c.is_empty());
}

#[test]
fn batch_limits() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    for i in 0..10u8 {
        p.try_push(&[i; 100]).unwrap();
    }
    let b = c.batch(3, usize::MAX);
    assert_eq!(b.len(), 3);
    assert_eq!(b.payload_bytes(), 300);
    assert_eq!(b.span(), 3 * record_size(100) as u64);
    let got: Vec<u8> = b.iter().map(|s| s[0]).collect();
    assert_eq!(got, vec![0, 1, 2]);
    // Iterating twice (the iterator is Clone) sees the same records.
    let it = b.iter();
    assert_eq!(it.clone().count(), 3);
    assert_eq!(it.len(), 3);
    b.release();
    // A byte limit stops after the record that crosses it, but always
    // returns at least one.
    let b = c.batch(usize::MAX, 150);
    assert_eq!(b.len(), 2);
    b.release();
    let b = c.batch(usize::MAX, 1);
    assert_eq!(b.len(), 1);
    b.release();
    assert_eq!(drain(&mut c).len(), 4);
}

#[test]
fn full_and_too_large() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    assert_eq!(p.try_push(&[0; 2041]), Err(PushError::TooLarge));
    p.try_push(&[1; 2040]).unwrap();
    p.try_push(&[2; 2040]).unwrap();
    // 2 x 2048 bytes: exactly full.
    assert_eq!(c.ring().used(), 4096);
    assert_eq!(p.try_push(&[]), Err(PushError::Full));
    assert!(!p.has_room_for(0));
    let b = c.batch(1, usize::MAX);
    b.release();
    assert!(p.has_room_for(2040));
    p.try_push(&[3; 2040]).unwrap();
    assert_eq!(p.try_push(&[]), Err(PushError::Full));
    let got = drain(&mut c);
    assert_eq!(got, vec![vec![2; 2040], vec![3; 2040]]);
}

#[test]
fn wrap_around_with_padding() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    // 3000 bytes in, 3000 out: the next 2000-byte record does not fit in
    // the 1096 bytes before the end and wraps to offset 0.
    p.try_push(&[7; 2000]).unwrap();
    p.try_push(&[8; 992]).unwrap();
    assert_eq!(drain(&mut c).len(), 2);
    assert_eq!(p.position(), 3008);
    p.try_push(&[9; 2000]).unwrap();
    assert_eq!(p.position(), 4096 + 2008);
    let got = drain(&mut c);
    assert_eq!(got, vec![vec![9; 2000]]);
    // A wrapping record needs room for its padding too. The tail is at
    // offset 2008; a record at 2008..4016 leaves 80 bytes before the end,
    // so a 2048-byte record would need 80 + 2048 and overlap the tail...
    p.try_push(&[1; 2000]).unwrap();
    assert_eq!(p.try_push(&[2; 2040]), Err(PushError::Full));
    // ...while a 2008-byte one (80 + 2008) fills the ring exactly.
    p.try_push(&[2; 2000]).unwrap();
    assert_eq!(c.ring().used(), 4096);
    assert_eq!(p.try_push(&[]), Err(PushError::Full));
    assert_eq!(drain(&mut c), vec![vec![1; 2000], vec![2; 2000]]);
}

#[test]
fn many_laps_single_thread() {
    let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
    let mut next_out = 0u64;
    for i in 0..100_000u64 {
        let len = (i * 7919 % 700) as usize;
        let m: Vec<u8> = (0..len).map(|k| (i as usize + k) as u8).collect();
        while p.try_push(&m) == Err(PushError::Full) {
            let b = c.batch(5, usize::MAX);
            for s in b.iter() {
                let l = (next_out * 7919 % 700) as usize;
                assert_eq!(s.len(), l);
                assert!(s
                    .iter()
                    .enumerate()
                    .all(|(k, &x)| x == (next_out as usize + k) as u8));
                next_out += 1;
            }
            b.release();
        }
    }
    next_out += drain(&mut c).len() as u64;
    assert_eq!(next_out, 100_000);
    assert!(p.position() > 100 * 4096, "many laps around the ring");
}

/// Two threads: the producer pushes numbered records of varying length
/// as fast as it can; the consumer checks order and contents. Both back
/// off with `yield_now` instead of spinning, so the test is fair on a
/// two-core machine.
#[test]
fn two_thread_stress() {
    const N: u64 = 300_000;
    let (mut p, mut c) = Ring::with_capacity(8192).unwrap().split();
    let producer = std::thread::spawn(move || {
        let mut buf = [0u8; 600];
        for i in 0..N {
            let len = 8 + (i * 31 % 590) as usize;
            buf[..8].copy_from_slice(&i.to_le_bytes());
            for (k, b) in buf[8..len].iter_mut().enumerate() {
                *b = (i as usize ^ k) as u8;
            }
            let mut fulls = 0u32;
            loop {
                match p.try_push(&buf[..len]) {
                    Ok(()) => break,
                    Err(PushError::Full) => {
                        fulls += 1;
                        if fulls > 64 {
                            std::thread::yield_now();
                        } else {
                            std::hint::spin_loop();
                        }
                    }
                    Err(PushError::TooLarge) => unreachable!(),
                }
            }
        }
    });
    let mut expect = 0u64;
    let mut empties = 0u32;
    while expect < N {
        let b = c.batch(64, usize::MAX);
        if b.is_empty() {
            empties += 1;
            if empties > 64 {
                std::thread::yield_now();
            }
            continue;
        }
        empties = 0;
        for s in b.iter() {
            let i = u64::from_le_bytes(s[..8].try_into().unwrap());
            assert_eq!(i, expect, "records out of order");
            assert_eq!(s.len(), 8 + (i * 31 % 590) as usize);
            assert!(
                s[8..]
                    .iter()
                    .enumerate()
                    .all(|(k, &x)| x == (i as usize ^ k) as u8),
                "torn record {i}"
            );
            expect += 1;
        }
        b.release();
    }
    producer.join().unwrap();
    assert!(c.is_empty());
}
