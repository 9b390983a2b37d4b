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
//! format=2
//! crc32c=fbab24a1
//! ```
//!
//! * a manifest of another kind is [`DirError::WrongKind`], of a newer
//!   format [`DirError::UnsupportedFormat`], one that does not verify
//!   [`DirError::BadManifest`]: the open fails before it has created,
//!   locked or changed anything (not even the lock file);
//! * a missing or empty directory becomes the opener's: the manifest is
//!   written (to `tachyon.tmp`, `fdatasync`, renamed, the directory
//!   `fsync`ed) under the directory's lock, before the first segment;
//! * a manifest of an older format of the opener's kind is rewritten with
//!   the current one by a writer, before it writes anything (a store's
//!   directory of format 1 becomes format 2: its new segments are of
//!   format 2, which a release reading only format 1 must refuse);
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
    /// (and the one it writes). A store's (and a sequencer's log, a store)
    /// is 2: record checksums chained from their segment's header, so that
    /// a reused segment file's old records never verify (format 1
    /// segments are still read: each header says its own).
    pub fn format(self) -> u32 {
        match self {
            Kind::Store | Kind::Sequencer => 2,
            Kind::Table => 1,
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
            // A store segment whose file was being reused.
            (_, Some((_, "retired"))) => store = true,
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
    /// A manifest that admits the opener, of this format.
    Manifest(u32),
    /// No manifest: the directory is missing, empty, or holds only the
    /// opener's files (a directory of the release before manifests).
    Unclaimed,
}

/// Checks `dir` for an opener of `kind` without changing anything.
fn check(dir: &Path, kind: Kind, reader: bool) -> Result<Found, ReadError> {
    if let Some(m) = read(dir)? {
        m.admits(kind, reader).map_err(ReadError::Dir)?;
        return Ok(Found::Manifest(m.format));
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
/// claimed it meanwhile) and writes the manifest if it has none, or one of
/// an older format (the writer is about to write files of its own format:
/// a release that reads only the older one must refuse the directory from
/// now on). Returns the lock, held as long as the file.
pub fn open_writer(dir: &Path, kind: Kind) -> Result<Option<File>, ReadError> {
    check(dir, kind, false)?;
    fs::create_dir_all(dir).map_err(ReadError::Io)?;
    let Some(lock) = super::lock_dir(dir).map_err(ReadError::Io)? else {
        return Ok(None);
    };
    match check(dir, kind, false)? {
        Found::Manifest(f) if f >= kind.format() => {}
        _ => write(dir, &Manifest::current(kind)).map_err(ReadError::Io)?,
    }
    Ok(Some(lock))
}

/// Checks `dir` for a reader of `kind` (nothing is written).
pub fn check_reader(dir: &Path, kind: Kind) -> Result<(), ReadError> {
    check(dir, kind, true).map(|_| ())
}

#[cfg(test)]
mod tests;
