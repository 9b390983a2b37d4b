use super::*;

fn tmp(what: &str) -> std::path::PathBuf {
    let d = super::super::test_dir(what);
    fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_manifest_round_trips_and_reads_as_text() {
    // The example of docs/FORMAT.md and of this module's doc.
    assert_eq!(
        String::from_utf8(Manifest::current(Kind::Store).encode()).unwrap(),
        "# Tachyon directory: which part owns it. Checked at every open; do not edit.\n\
         kind=store\nformat=2\ncrc32c=fbab24a1\n"
    );
    for k in Kind::ALL {
        let m = Manifest::current(k);
        let b = m.encode();
        assert_eq!(Manifest::decode(&b), Ok(m));
        let text = String::from_utf8(b).unwrap();
        assert!(
            text.contains(&format!("\nkind={}\nformat={}\n", k.name(), k.format())),
            "{text}"
        );
    }
}

/// A manifest with `body` and a correct CRC line.
fn signed(body: &str) -> Vec<u8> {
    let crc = crate::crc::crc32c(body.as_bytes());
    format!("{body}crc32c={crc:08x}\n").into_bytes()
}

#[test]
fn garbage_and_truncated_manifests_are_refused() {
    let good = Manifest::current(Kind::Table).encode();
    // Every truncation (a torn write would leave one; the rename makes
    // it impossible, a copy by hand does not).
    for n in 0..good.len() {
        assert_eq!(
            Manifest::decode(&good[..n]),
            Err(DirError::BadManifest),
            "cut at {n}"
        );
    }
    // Every single flipped bit.
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut b = good.clone();
            b[i] ^= 1 << bit;
            assert!(Manifest::decode(&b).is_err(), "bit {bit} of byte {i}");
        }
    }
    for junk in [
        &b""[..],
        b"\n",
        b"kind=store\nformat=1\n",
        b"crc32c=00000000\n",
        &[0u8; 64],
        &[0xffu8; 64],
        b"TACHLOG1\x01\x00\x00\x00",
    ] {
        assert_eq!(
            Manifest::decode(junk),
            Err(DirError::BadManifest),
            "{junk:?}"
        );
    }
    // Signed, but not a manifest: fields missing, twice, or malformed.
    for body in [
        "kind=store\n",
        "format=1\n",
        "kind=store\nkind=store\nformat=1\n",
        "kind=store\nformat=one\n",
        "kind=store\nformat=0\n",
        "kind=store\nformat=-1\n",
        "kind=store\nformat=\n",
        "kind=store\nformat=1\nnonsense\n",
    ] {
        assert_eq!(
            Manifest::decode(&signed(body)),
            Err(DirError::BadManifest),
            "{body:?}"
        );
    }
    // Too long to be one.
    let long = format!("kind=store\nformat=1\n#{}\n", "x".repeat(MAX_LEN));
    assert_eq!(Manifest::decode(&signed(&long)), Err(DirError::BadManifest));
    // Unknown keys and comments are skipped; an unknown kind is no
    // kind this release knows.
    assert_eq!(
        Manifest::decode(&signed("# hi\nkind=table\nadded_later=7\nformat=1\n")),
        Ok(Manifest::current(Kind::Table))
    );
    assert_eq!(
        Manifest::decode(&signed("kind=queue\nformat=1\n")),
        Err(DirError::WrongKind(None))
    );
}

#[test]
fn a_newer_format_and_another_kind_are_refused() {
    let newer = Manifest::decode(&signed("kind=store\nformat=3\n")).unwrap();
    assert_eq!(
        newer.admits(Kind::Store, false),
        Err(DirError::UnsupportedFormat(3))
    );
    assert_eq!(
        newer.admits(Kind::Store, true),
        Err(DirError::UnsupportedFormat(3))
    );
    // Another kind is that kind, whatever its format.
    assert_eq!(
        newer.admits(Kind::Table, false),
        Err(DirError::WrongKind(Some(Kind::Store)))
    );
    for (m, opener, reader, ok) in [
        (Kind::Store, Kind::Store, false, true),
        (Kind::Table, Kind::Store, false, false),
        (Kind::Store, Kind::Table, false, false),
        (Kind::Sequencer, Kind::Store, false, false),
        (Kind::Store, Kind::Sequencer, false, false),
        // A store reader reads a sequencer's log (a store), not the
        // other way round, and never a table.
        (Kind::Sequencer, Kind::Store, true, true),
        (Kind::Store, Kind::Sequencer, true, false),
        (Kind::Table, Kind::Store, true, false),
    ] {
        let r = Manifest::current(m).admits(opener, reader);
        assert_eq!(r.is_ok(), ok, "{m:?} opened by {opener:?} reader {reader}");
        if !ok {
            assert_eq!(r, Err(DirError::WrongKind(Some(m))));
        }
    }
}

/// Every file of `dir` with its bytes, and the names in it.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_refused_directory_is_left_as_it_was() {
    let d = tmp("dir-refused");
    write(&d, &Manifest::current(Kind::Table)).unwrap();
    fs::write(d.join("00000000000000000001.seg"), b"TCHYTBL1").unwrap();
    let before = snapshot(&d);
    for k in [Kind::Store, Kind::Sequencer] {
        assert!(matches!(
            open_writer(&d, k),
            Err(ReadError::Dir(DirError::WrongKind(Some(Kind::Table))))
        ));
        assert!(matches!(
            check_reader(&d, k),
            Err(ReadError::Dir(DirError::WrongKind(Some(Kind::Table))))
        ));
    }
    // Not even the lock file.
    assert_eq!(snapshot(&d), before);
    // A newer format of the opener's own kind.
    fs::write(d.join(MANIFEST), signed("kind=table\nformat=9\n")).unwrap();
    let before = snapshot(&d);
    assert!(matches!(
        open_writer(&d, Kind::Table),
        Err(ReadError::Dir(DirError::UnsupportedFormat(9)))
    ));
    fs::write(d.join(MANIFEST), b"kind=table\n").unwrap();
    let garbage = snapshot(&d);
    assert!(matches!(
        open_writer(&d, Kind::Table),
        Err(ReadError::Dir(DirError::BadManifest))
    ));
    assert_eq!(snapshot(&d), garbage);
    assert_ne!(garbage, before);
    fs::remove_dir_all(&d).unwrap();
}

#[test]
fn new_and_empty_directories_become_the_openers() {
    let root = tmp("dir-new");
    let d = root.join("a/b");
    let lock = open_writer(&d, Kind::Sequencer).unwrap().unwrap();
    assert_eq!(read(&d).unwrap(), Some(Manifest::current(Kind::Sequencer)));
    // Locked: no second writer.
    assert!(open_writer(&d, Kind::Sequencer).unwrap().is_none());
    drop(lock);
    // An empty directory with only neutral files.
    let e = root.join("empty");
    fs::create_dir_all(e.join("lost+found")).unwrap();
    fs::write(e.join(".lock"), b"").unwrap();
    fs::write(e.join("00000000000000000000.seg"), [0u8; 100]).unwrap();
    assert!(open_writer(&e, Kind::Table).unwrap().is_some());
    assert_eq!(read(&e).unwrap(), Some(Manifest::current(Kind::Table)));
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn directories_without_a_manifest_are_classified_by_their_files() {
    let root = tmp("dir-legacy");
    let case = |name: &str, files: &[(&str, &[u8])]| {
        let d = root.join(name);
        fs::create_dir_all(&d).unwrap();
        for (f, b) in files {
            fs::write(d.join(f), b).unwrap();
        }
        d
    };
    let seg = "00000000000000000000.seg";
    let store = case("store", &[(seg, b"TACHLOG1xxxx"), (".lock", b"")]);
    let seq = case("seq", &[(seg, b"TACHLOG1xxxx"), ("vote", &[0u8; 16])]);
    let table = case(
        "table",
        &[
            ("00000000000000000001.seg", b"TCHYTBL1"),
            ("00000000000000000001.hint", b"x"),
        ],
    );
    let mixed = case(
        "mixed",
        &[(seg, b"TACHLOG1"), ("00000000000000000001.hint", b"x")],
    );
    let other = case("other", &[("notes.txt", b"mine")]);
    let junk = case("junk", &[(seg, b"PK\x03\x04")]);
    for (d, kind) in [
        (&store, Some(Kind::Store)),
        (&seq, Some(Kind::Sequencer)),
        (&table, Some(Kind::Table)),
        (&mixed, None),
        (&other, None),
        (&junk, None),
    ] {
        assert_eq!(classify(d).unwrap().only(), kind, "{d:?}");
        for opener in Kind::ALL {
            let before = snapshot(d);
            match open_writer(d, opener) {
                Ok(Some(_)) => {
                    assert_eq!(Some(opener), kind);
                    assert_eq!(read(d).unwrap(), Some(Manifest::current(opener)));
                    fs::remove_file(d.join(MANIFEST)).unwrap();
                }
                Err(ReadError::Dir(DirError::WrongKind(k))) => {
                    assert_ne!(Some(opener), kind);
                    assert_eq!(k, kind, "{d:?} opened by {opener:?}");
                    assert_eq!(snapshot(d), before);
                }
                other => panic!("{d:?} opened by {opener:?}: {other:?}"),
            }
        }
    }
    // A store reader reads a sequencer's log; nothing is written.
    let before = snapshot(&seq);
    check_reader(&seq, Kind::Store).unwrap();
    assert_eq!(snapshot(&seq), before);
    fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_writer_upgrades_an_older_format_and_a_reader_does_not() {
    for kind in [Kind::Store, Kind::Sequencer] {
        let d = tmp("dir-upgrade");
        let old = format!("kind={}\nformat=1\n", kind.name());
        fs::write(d.join(MANIFEST), signed(&old)).unwrap();
        check_reader(&d, Kind::Store).unwrap();
        assert_eq!(fs::read(d.join(MANIFEST)).unwrap(), signed(&old));
        let lock = open_writer(&d, kind).unwrap().unwrap();
        assert_eq!(read(&d).unwrap(), Some(Manifest::current(kind)));
        assert_eq!(Manifest::current(kind).format, 2);
        drop(lock);
        fs::remove_dir_all(&d).unwrap();
    }
}
