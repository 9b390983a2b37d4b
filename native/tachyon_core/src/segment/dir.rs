//! What a directory holds: its manifest, `tachyon.meta`.
//!
//! A store, a table and a sequencer node's log are each a directory of
//! segment files with the same names (`<id:020>.seg`), so a file name says
//! nothing about whose it is. Before anything in a directory is read,
//! locked, created or removed, the part opening it checks the directory's
//! manifest: a few lines naming the [`Kind`] of part that owns the
//! directory and the format version of its files, with a CRC32C:
//!
//! ```text
//! # Tachyon directory: which part owns it. Checked at every open; do not edit.
//! kind=store
//! format=1
//! crc32c=cf4c8c38
//! ```
//!
//! * a manifest of another kind is [`DirError::WrongKind`], of a newer
//!   format [`DirError::UnsupportedFormat`], one that does not verify
//!   [`DirError::BadManifest`]: the open fails before it has created,
//!   locked or changed anything (not even the lock file);
//! * a missing or empty directory becomes the opener's: the manifest is
//!   written (to `tachyon.tmp`, `fdatasync`, renamed, the directory
//!   `fsync`ed) under the directory's lock, before the first segment;
//! * a directory without a manifest (written by the release before
//!   manifests) is the opener's if its files are its kind's and nobody
//!   else's (segment headers, hint files, a node's `vote` or `meta` file:
//!   [`classify`]); it then gets the manifest. Anything else is refused:
//!   files of another kind as that kind, files of several kinds or of none
//!   (a directory holding other things) as `WrongKind(None)`.
//!
//! A reader (a store opened `access: :read`) checks the same way but never
//! writes, and also reads a sequencer's log, which is a store.
//!
//! Why a manifest and not the segment headers: a directory has a kind
//! before it has any segment (and a sequencer's directory holds store
//! segments: only the kind tells them apart); a table's segment may be
//! shorter than a store's header page, which is how a store used to take a
//! small table's segment for a leftover of its own and delete it; and one
//! small file is checked before any segment is listed, opened or mapped.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use super::parse_file_name;
use crate::sys::{fsync_dir, write_file_durably};

/// The manifest's file name.
pub const MANIFEST: &str = "tachyon.meta";
/// Where the manifest is written before it is renamed into place.
pub const MANIFEST_TMP: &str = "tachyon.tmp";
/// The largest manifest read (a bigger file is not one).
const MAX_LEN: usize = 4096;

/// The part that owns a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A `Tachyon.Store` (also the one an `AsyncStore` writes to).
    Store,
    /// A `Tachyon.Table`.
    Table,
    /// A `Tachyon.Sequencer` node's log (a store and the node's Raft state).
    Sequencer,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Store, Kind::Table, Kind::Sequencer];

    /// The name in the manifest, and the atom the BEAM sees.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Store => "store",
            Kind::Table => "table",
            Kind::Sequencer => "sequencer",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The newest format of this kind's files that this release reads
    /// (and the one it writes).
    pub fn format(self) -> u32 {
        match self {
            Kind::Store | Kind::Table | Kind::Sequencer => 1,
        }
    }

    /// Whether a reader of this kind may read a directory of `other`'s: a
    /// store reader also reads a sequencer's log (it is a store).
    fn reads(self, other: Kind) -> bool {
        self == other || (self == Kind::Store && other == Kind::Sequencer)
    }
}

/// Why a directory cannot be opened by a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirError {
    /// The directory is another part's (`None`: its files are several
    /// parts', or none's).
    WrongKind(Option<Kind>),
    /// The directory's files are of a newer format than this release reads.
    UnsupportedFormat(u32),
    /// `tachyon.meta` is not a manifest (its CRC, or its fields).
    BadManifest,
}

impl DirError {
    /// The kind's name for `WrongKind` (`"unknown"` for `None`).
    pub fn kind_name(k: Option<Kind>) -> &'static str {
        k.map_or("unknown", Kind::name)
    }
}

impl std::fmt::Display for DirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DirError::WrongKind(k) => write!(f, "the directory is a {}'s", Self::kind_name(*k)),
            DirError::UnsupportedFormat(v) => write!(f, "unsupported format {v}"),
            DirError::BadManifest => write!(f, "{MANIFEST} does not verify"),
        }
    }
}

/// A directory's manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    pub kind: Kind,
    pub format: u32,
}

impl Manifest {
    /// The manifest of a directory `kind` writes now.
    pub fn current(kind: Kind) -> Manifest {
        Manifest {
            kind,
            format: kind.format(),
        }
    }

    /// The file's bytes (see the module doc).
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "# Tachyon directory: which part owns it. Checked at every open; do not edit.\n\
             kind={}\nformat={}\n",
            self.kind.name(),
            self.format
        );
        let crc = crate::crc::crc32c(s.as_bytes());
        s.push_str(&format!("crc32c={crc:08x}\n"));
        s.into_bytes()
    }

    /// Reads a manifest's bytes: the last line must be `crc32c=` and the
    /// CRC32C (8 lower-case hex digits) of every byte before it; then
    /// `kind=` and `format=` (once each; `#` lines and unknown keys are
    /// skipped, so that a later release may add keys without changing the
    /// format). A kind this release does not know is `WrongKind(None)`.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, DirError> {
        let bad = DirError::BadManifest;
        let text = std::str::from_utf8(bytes).map_err(|_| bad)?;
        if bytes.len() > MAX_LEN || !text.ends_with('\n') {
            return Err(bad);
        }
        let body_end = text[..text.len() - 1].rfind('\n').map_or(0, |i| i + 1);
        let (body, last) = text.split_at(body_end);
        let hex = last
            .strip_prefix("crc32c=")
            .and_then(|h| h.strip_suffix('\n'))
            .filter(|h| h.len() == 8 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
            .ok_or(bad)?;
        if u32::from_str_radix(hex, 16).ok() != Some(crate::crc::crc32c(body.as_bytes())) {
            return Err(bad);
        }
        let (mut kind, mut format) = (None, None);
        for line in body.lines() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or(bad)?;
            let slot = match k {
                "kind" => &mut kind,
                "format" => &mut format,
                _ => continue,
            };
            if slot.replace(v).is_some() {
                return Err(bad);
            }
        }
        let format: u32 = format
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse().ok())
            .filter(|&v| v >= 1)
            .ok_or(bad)?;
        let kind = kind.ok_or(bad)?;
        let kind = Kind::parse(kind).ok_or(DirError::WrongKind(None))?;
        Ok(Manifest { kind, format })
    }

    /// Whether a writer (`reader`: a reader) of `kind` may open a directory
    /// with this manifest.
    pub fn admits(&self, kind: Kind, reader: bool) -> Result<(), DirError> {
        let ok = if reader {
            kind.reads(self.kind)
        } else {
            kind == self.kind
        };
        if !ok {
            return Err(DirError::WrongKind(Some(self.kind)));
        }
        if self.format > self.kind.format() {
            return Err(DirError::UnsupportedFormat(self.format));
        }
        Ok(())
    }
}

/// The manifest of `dir`, if it has one (`None` also when `dir` does not
/// exist).
pub fn read(dir: &Path) -> Result<Option<Manifest>, ReadError> {
    let bytes = match fs::read(dir.join(MANIFEST)) {
        Ok(b) => b,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            return Ok(None)
        }
        Err(e) => return Err(ReadError::Io(e)),
    };
    Manifest::decode(&bytes).map(Some).map_err(ReadError::Dir)
}

/// Writes `m` as the manifest of `dir`, durably (see the module doc).
pub fn write(dir: &Path, m: &Manifest) -> io::Result<()> {
    write_file_durably(&dir.join(MANIFEST_TMP), &dir.join(MANIFEST), &m.encode())?;
    fsync_dir(dir)
}

/// A failure to read or check a directory: its files, or the system.
#[derive(Debug)]
pub enum ReadError {
    Dir(DirError),
    Io(io::Error),
}

/// What the files of a directory without a manifest say about its owner.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// Kinds whose files are there (a sequencer's: its `vote` or `meta`
    /// file; its store segments are not counted as a store's then).
    pub kinds: Vec<Kind>,
    /// Names of files that are no part's (or segments whose header is no
    /// part's).
    pub foreign: Vec<String>,
}

impl Evidence {
    /// Nothing but neutral files (or nothing at all).
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.foreign.is_empty()
    }

    /// The one kind the files are of, if they are of exactly one.
    pub fn only(&self) -> Option<Kind> {
        match (self.kinds.as_slice(), self.foreign.is_empty()) {
            ([k], true) => Some(*k),
            _ => None,
        }
    }
}

/// Looks at the files of `dir` (which has no manifest) without changing
/// anything. Neutral: the lock file `.lock`, `tachyon.tmp`, other names
/// starting with a dot, `lost+found`, and segment files whose first 8
/// bytes are zero (created and never written: they hold nothing). A store
/// segment (magic `TACHLOG1` or `TACHPRE1`) is a store's, or a sequencer's
/// if there is a `vote` or `meta` file; a table segment (`TCHYTBL1`), a hint file, a
/// compaction manifest or a table's temporary file is a table's.
pub fn classify(dir: &Path) -> io::Result<Evidence> {
    let (mut store, mut table, mut vote) = (false, false, false);
    let mut foreign = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(Evidence::default()),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            foreign.push(name.to_string_lossy().into_owned());
            continue;
        };
        if name.starts_with('.') || name == "lost+found" || name == MANIFEST_TMP {
            continue;
        }
        match (name, parse_file_name(name)) {
            // A node's Raft state: `vote` before the log's metadata file,
            // `meta` after.
            ("vote", _) | ("meta", _) => vote = true,
            ("compact.del", _) | ("compact.tmp", _) => table = true,
            (_, Some((_, "hint"))) | (_, Some((_, "tmp"))) => table = true,
            (_, Some((_, "seg"))) => match segment_magic(&e.path())? {
                Magic::Zero => {}
                Magic::Store => store = true,
                Magic::Table => table = true,
                Magic::Other => foreign.push(name.to_string()),
            },
            _ => foreign.push(name.to_string()),
        }
    }
    let mut kinds = Vec::new();
    if vote {
        kinds.push(Kind::Sequencer);
    } else if store {
        kinds.push(Kind::Store);
    }
    if table {
        kinds.push(Kind::Table);
    }
    foreign.sort();
    Ok(Evidence { kinds, foreign })
}

enum Magic {
    Zero,
    Store,
    Table,
    Other,
}

/// Whose segment the file at `path` is, by its first 8 bytes (the one
/// place that knows every part's magic).
fn segment_magic(path: &Path) -> io::Result<Magic> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path)?;
    let mut b = [0u8; 8];
    let n = f.read_at(&mut b, 0)?;
    Ok(match b {
        _ if b[..n].iter().all(|&x| x == 0) => Magic::Zero,
        m if n == 8
            && (m == crate::store::format::MAGIC || m == crate::store::format::PREP_MAGIC) =>
        {
            Magic::Store
        }
        m if n == 8 && m == crate::table::format::SEG_MAGIC => Magic::Table,
        _ => Magic::Other,
    })
}

/// What `check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// A manifest that admits the opener.
    Manifest,
    /// No manifest: the directory is missing, empty, or holds only the
    /// opener's files (a directory of the release before manifests).
    Unclaimed,
}

/// Checks `dir` for an opener of `kind` without changing anything.
fn check(dir: &Path, kind: Kind, reader: bool) -> Result<Found, ReadError> {
    if let Some(m) = read(dir)? {
        m.admits(kind, reader).map_err(ReadError::Dir)?;
        return Ok(Found::Manifest);
    }
    let ev = classify(dir).map_err(ReadError::Io)?;
    if ev.is_empty() {
        return Ok(Found::Unclaimed);
    }
    match ev.only() {
        Some(k) if (reader && kind.reads(k)) || k == kind => Ok(Found::Unclaimed),
        Some(k) => Err(ReadError::Dir(DirError::WrongKind(Some(k)))),
        None => Err(ReadError::Dir(DirError::WrongKind(None))),
    }
}

/// Opens `dir` for the writer of a part of `kind`: checks it (see the
/// module doc; nothing is created or changed in a directory that is
/// refused), creates it if needed, takes its lock (`Ok(None)`: another
/// writer has it), checks it again under the lock (another part may have
/// claimed it meanwhile) and writes the manifest if it has none. Returns
/// the lock, held as long as the file.
pub fn open_writer(dir: &Path, kind: Kind) -> Result<Option<File>, ReadError> {
    check(dir, kind, false)?;
    fs::create_dir_all(dir).map_err(ReadError::Io)?;
    let Some(lock) = super::lock_dir(dir).map_err(ReadError::Io)? else {
        return Ok(None);
    };
    if check(dir, kind, false)? == Found::Unclaimed {
        write(dir, &Manifest::current(kind)).map_err(ReadError::Io)?;
    }
    Ok(Some(lock))
}

/// Checks `dir` for a reader of `kind` (nothing is written).
pub fn check_reader(dir: &Path, kind: Kind) -> Result<(), ReadError> {
    check(dir, kind, true).map(|_| ())
}

#[cfg(test)]
mod tests {
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
             kind=store\nformat=1\ncrc32c=cf4c8c38\n"
        );
        for k in Kind::ALL {
            let m = Manifest::current(k);
            let b = m.encode();
            assert_eq!(Manifest::decode(&b), Ok(m));
            let text = String::from_utf8(b).unwrap();
            assert!(
                text.contains(&format!("\nkind={}\nformat=1\n", k.name())),
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
        let newer = Manifest::decode(&signed("kind=store\nformat=2\n")).unwrap();
        assert_eq!(
            newer.admits(Kind::Store, false),
            Err(DirError::UnsupportedFormat(2))
        );
        assert_eq!(
            newer.admits(Kind::Store, true),
            Err(DirError::UnsupportedFormat(2))
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
}
