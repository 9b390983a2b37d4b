//! Opening a table again: hint files, sealed segments, torn batches and
//! tails, leftover files, a full disk.

use super::*;

/// A table in `d` with keys 0..3000 put and the hint files of its sealed
/// segments written.
fn filled_with_hints(d: &TmpDir, mode: ValueMode) -> Table {
    let t = Table::open(&d.0, small(mode)).unwrap();
    for i in 0..3000 {
        t.put(&key(i), &val(i, 0)).unwrap();
    }
    {
        let _g = lock(&t.inner.bg);
        t.inner.write_hints().unwrap();
    }
    t
}

#[test]
fn hints_are_used_on_reopen() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = filled_with_hints(&d, mode);
        let sealed = sealed(&t);
        assert!(sealed >= 3);
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        let r = t.recovery().clone();
        assert_eq!(r.hinted_segments, sealed, "{r:?}");
        assert_eq!(r.scanned_segments, 1);
        assert_eq!(r.keys, 3000);
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
        // A damaged hint is ignored: the segment is scanned instead.
        let _ = t.shut(false); // what a drop did, synchronously
        let hint = fs::read_dir(&d.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "hint"))
            .unwrap();
        let mut b = fs::read(&hint).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0x55;
        fs::write(&hint, b).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.recovery().hinted_segments, sealed - 1);
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    }
}

#[test]
fn sealed_segments_drop_their_writable_mapping_before_sync() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = filled_with_hints(&d, mode);
        let active = lock(&t.inner.writer).active.clone().unwrap();
        let segs: Vec<Arc<Segment>> = lock(&t.inner.segs).by_id.values().cloned().collect();
        let mut hinted = 0;
        for s in &segs {
            assert_eq!(s.is_mapped(), mode != ValueMode::File, "{mode:?}");
            if s.hinted.load(Ordering::Acquire) {
                hinted += 1;
                // Synced without a writable mapping; writing is refused.
                assert!(s.writable_map().is_none(), "{mode:?} segment {}", s.id);
                if s.is_mapped() {
                    assert!(s.write_record(s.cap - 64, &[1u8; 32]).is_err());
                }
            }
        }
        assert!(hinted >= 3, "{mode:?}: {hinted} hinted segments");
        assert_eq!(
            active.writable_map().is_some(),
            mode != ValueMode::File,
            "{mode:?}"
        );
        drop((active, segs));
        // Values in sealed segments and the active one still read (through
        // the read-only mapping in the Mapped mode), and new puts land.
        for i in 0..3000 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)), "{mode:?} key {i}");
        }
        for i in 0..500 {
            t.put(&key(i), &val(i, 1)).unwrap();
        }
        t.close().unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..3000 {
            let v = if i < 500 { val(i, 1) } else { val(i, 0) };
            assert_eq!(
                t.get(&key(i)).unwrap(),
                Some(v),
                "{mode:?} key {i} after reopen"
            );
        }
    }
}

#[test]
fn torn_batch_is_all_or_nothing() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    t.put(b"before", b"1").unwrap();
    let v = vec![7u8; 1000];
    let batch: Vec<(Vec<u8>, &[u8])> = (0..10).map(|i| (key(i), &v[..])).collect();
    let refs: Vec<(&[u8], &[u8])> = batch.iter().map(|(k, v)| (&k[..], *v)).collect();
    t.put_many(&refs).unwrap();
    let end = lock(&t.inner.writer).pos;
    let _ = t.shut(false); // what a drop did, synchronously
                           // Damage the last byte of the batch record: none of it survives.
    let f = seg_files(&d.0).pop().unwrap();
    let mut b = fs::read(&f).unwrap();
    b[end - 1] ^= 0xff;
    fs::write(&f, &b).unwrap();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    let r = t.recovery();
    assert!(r.cut.is_some() && r.truncated_bytes > 0, "{r:?}");
    assert_eq!(t.get(b"before").unwrap(), Some(b"1".to_vec()));
    for i in 0..10 {
        assert_eq!(t.get(&key(i)).unwrap(), None);
    }
    assert_eq!(t.count().unwrap(), 1);
}

#[test]
fn torn_tail_is_cut_and_reported() {
    for mode in MODES {
        let d = TmpDir::new();
        let t = Table::open(&d.0, small(mode)).unwrap();
        for i in 0..100 {
            t.put(&key(i), &val(i, 0)).unwrap();
        }
        let end = lock(&t.inner.writer).pos;
        let _ = t.shut(false); // what a drop did, synchronously
                               // A half-written record after the last one: a header claiming 200
                               // bytes, with a CRC that cannot match, and some payload.
        let f = seg_files(&d.0).pop().unwrap();
        let mut b = fs::read(&f).unwrap();
        assert_eq!(b.len(), end, "close gives back the preallocated tail");
        b.extend([0xde, 0xad, 0xbe, 0xef, 200, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        b.extend([0xabu8; 50]);
        fs::write(&f, &b).unwrap();
        let t = Table::open(&d.0, small(mode)).unwrap();
        let r = t.recovery().clone();
        assert_eq!(r.truncated_bytes, 66, "{mode:?} {r:?}");
        assert_eq!(r.cut.map(|c| c.1), Some(end as u64));
        assert_eq!(t.count().unwrap(), 100);
        // The table goes on after the cut.
        t.put(b"after", b"cut").unwrap();
        let _ = t.shut(false); // what a drop did, synchronously
        let t = Table::open(&d.0, small(mode)).unwrap();
        assert_eq!(t.recovery().cut, None);
        assert_eq!(t.get(b"after").unwrap(), Some(b"cut".to_vec()));
        for i in 0..100 {
            assert_eq!(t.get(&key(i)).unwrap(), Some(val(i, 0)));
        }
    }
}

#[test]
fn leftover_files_are_cleaned() {
    let d = TmpDir::new();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    t.put(b"k", b"v").unwrap();
    let _ = t.shut(false); // what a drop did, synchronously
                           // A segment whose creation never finished, an orphan hint, a temp file.
    fs::write(d.0.join(segment_file_name(999)), vec![0u8; 4096]).unwrap();
    fs::write(d.0.join(hint_file_name(555)), b"TCHYHNT1 orphan").unwrap();
    fs::write(d.0.join("00000000000000000001.tmp"), b"junk").unwrap();
    // Files that are not the table's are left alone: a "hint" that is not
    // one, a temporary file of another name.
    fs::write(d.0.join(hint_file_name(556)), b"not a hint").unwrap();
    fs::write(d.0.join("notes.tmp"), b"mine").unwrap();
    let t = Table::open(&d.0, small(ValueMode::Mapped)).unwrap();
    assert_eq!(t.recovery().removed_files, 3);
    assert_eq!(t.get(b"k").unwrap(), Some(b"v".to_vec()));
    let _ = t.shut(false); // what a drop did, synchronously
    assert_eq!(
        fs::read(d.0.join(hint_file_name(556))).unwrap(),
        b"not a hint"
    );
    assert_eq!(fs::read(d.0.join("notes.tmp")).unwrap(), b"mine");
    // A segment with a zero header over data is not one the table made
    // (it writes the header first): an error, the file stays.
    let mut odd = vec![0u8; 4096];
    odd[100] = 1;
    fs::write(d.0.join(segment_file_name(998)), &odd).unwrap();
    assert!(matches!(
        Table::open(&d.0, small(ValueMode::Mapped)),
        Err(TableError::Corrupt { segment: 998, .. })
    ));
    assert_eq!(fs::read(d.0.join(segment_file_name(998))).unwrap(), odd);
    fs::remove_file(d.0.join(segment_file_name(998))).unwrap();
    // A damaged segment header is an error, not silently dropped data.
    let f = seg_files(&d.0).pop().unwrap();
    let mut b = fs::read(&f).unwrap();
    b[3] ^= 1;
    fs::write(&f, b).unwrap();
    assert!(matches!(
        Table::open(&d.0, small(ValueMode::Mapped)),
        Err(TableError::Corrupt { .. })
    ));
}

/// A full disk: `put` gets `NoSpace`, everything acknowledged stays readable
/// and survives a reopen. Needs a small tmpfs (root); skipped otherwise.
#[test]
fn disk_full_is_enospc_not_sigbus() {
    let d = TmpDir::new();
    fs::create_dir_all(&d.0).unwrap();
    let target = std::ffi::CString::new(d.0.to_string_lossy().as_bytes()).unwrap();
    let fstype = std::ffi::CString::new("tmpfs").unwrap();
    let opts = std::ffi::CString::new("size=1m").unwrap();
    // SAFETY: plain mount(2) with valid C strings.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            opts.as_ptr() as *const libc::c_void,
        )
    };
    if rc != 0 {
        eprintln!(
            "disk_full_is_enospc_not_sigbus: skipped (cannot mount a tmpfs: {})",
            io::Error::last_os_error()
        );
        return;
    }
    struct Unmount(std::ffi::CString);
    impl Drop for Unmount {
        fn drop(&mut self) {
            // SAFETY: umount2 of the path we mounted.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _u = Unmount(target);
    for mode in MODES {
        let dir = d.0.join(mode.name());
        let t = Table::open(&dir, small(mode)).unwrap();
        let v = vec![5u8; 3000];
        let mut acked = 0u64;
        let err = loop {
            match t.put(&key(acked), &v) {
                Ok(()) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 10_000, "the disk never filled");
        };
        assert!(matches!(err, TableError::NoSpace), "{mode:?}: {err:?}");
        assert!(acked > 10);
        // The background thread may still free a little space (it cuts the
        // preallocated tail of sealed segments): a few more puts can fit,
        // then the disk is full again.
        let err = loop {
            match t.put(&key(acked), &v) {
                Ok(()) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 10_000);
        };
        assert!(matches!(err, TableError::NoSpace), "{mode:?}: {err:?}");
        for i in 0..acked {
            assert_eq!(t.get(&key(i)).unwrap(), Some(v.clone()));
        }
        let _ = t.shut(false); // what a drop did, synchronously
                               // It reopens on the full disk, with everything acknowledged.
        let t = Table::open(&dir, small(mode)).unwrap();
        assert_eq!(t.count().unwrap(), acked);
        for i in 0..acked {
            assert_eq!(t.get(&key(i)).unwrap(), Some(v.clone()));
        }
        let _ = t.shut(false); // what a drop did, synchronously
        fs::remove_dir_all(&dir).unwrap();
    }
}
