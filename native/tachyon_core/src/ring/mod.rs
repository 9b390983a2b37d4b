//! A single-producer single-consumer byte ring for variable-length records.
//!
//! The buffer is allocated once (page aligned, every page touched up front so
//! the producer never takes a page fault) and never grows. A record is an
//! 8-byte header holding the payload length followed by the payload, padded
//! to a multiple of 8 bytes. A record never straddles the end of the buffer:
//! when it does not fit in the bytes left before the end, the producer writes
//! a padding header there and starts the record at offset 0.
//!
//! `head` (bytes ever written) and `tail` (bytes ever released) are 64-bit
//! counters that only grow; each sits on its own cache line. The producer
//! keeps a cached copy of `tail` and the consumer a cached copy of `head`, so
//! in the steady state each side reads the other's line only when its cache
//! says the ring is full (producer) or empty (consumer).
//!
//! Publication: the producer writes the record bytes, then stores `head` with
//! `Release`; the consumer loads `head` with `Acquire` before reading them.
//! The consumer stores `tail` with `Release` once it is done with the bytes;
//! the producer loads it with `Acquire` before overwriting them.
//!
//! ```
//! use tachyon_core::ring::Ring;
//! let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
//! p.try_push(b"hello").unwrap();
//! let batch = c.batch(16, usize::MAX);
//! assert_eq!(batch.iter().collect::<Vec<_>>(), vec![&b"hello"[..]]);
//! batch.release();
//! assert!(c.is_empty());
//! ```

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;

/// Bytes of a record header (the payload length, padded to 8).
pub const HEADER: usize = 8;
/// Smallest ring.
pub const MIN_CAPACITY: usize = 4096;
/// Largest ring (1 GiB).
pub const MAX_CAPACITY: usize = 1 << 30;
/// A header value that means "skip to the start of the buffer".
const PAD: u32 = u32::MAX;
const PAGE: usize = 4096;

/// Bytes a record with a `len`-byte payload takes in the ring.
#[inline]
pub const fn record_size(len: usize) -> usize {
    (HEADER + len + 7) & !7
}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// Not enough free space now; retry after the consumer released some.
    Full,
    /// The payload can never fit (larger than [`Ring::max_payload`]).
    TooLarge,
}

/// Why a ring could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The capacity must be a power of two between [`MIN_CAPACITY`] and
    /// [`MAX_CAPACITY`].
    BadCapacity,
    /// The allocation failed.
    NoMemory,
}

/// The shared part: the buffer and the two positions.
pub struct Ring {
    buf: NonNull<u8>,
    cap: usize,
    mask: u64,
    /// Bytes ever published by the producer.
    head: CachePadded<AtomicU64>,
    /// Bytes ever released by the consumer.
    tail: CachePadded<AtomicU64>,
}

// SAFETY: the buffer is plain bytes owned by the ring; concurrent access is
// confined to the SPSC protocol documented in the module (the producer only
// writes [head, tail + cap), the consumer only reads [tail, head), ordered by
// the Release/Acquire pairs on `head` and `tail`). `Producer` and `Consumer`
// are the only handles that touch the bytes and each exists once.
unsafe impl Send for Ring {}
// SAFETY: see above; the shared fields are atomics or immutable.
unsafe impl Sync for Ring {}

impl Ring {
    /// Allocates a ring of `capacity` bytes (a power of two) and touches every
    /// page of it.
    pub fn with_capacity(capacity: usize) -> Result<Ring, RingError> {
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(RingError::BadCapacity);
        }
        let layout = Layout::from_size_align(capacity, PAGE).map_err(|_| RingError::BadCapacity)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let buf = NonNull::new(ptr).ok_or(RingError::NoMemory)?;
        // Fault every page in now (a zeroed allocation may be backed by the
        // shared zero page until first written).
        for off in (0..capacity).step_by(PAGE) {
            // SAFETY: `off < capacity`, inside the allocation we own.
            unsafe { std::ptr::write_volatile(buf.as_ptr().add(off), 0) };
        }
        Ok(Ring {
            buf,
            cap: capacity,
            mask: capacity as u64 - 1,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
        })
    }

    /// Splits the ring into its two ends.
    pub fn split(self) -> (Producer, Consumer) {
        let ring = Arc::new(self);
        (
            Producer {
                ring: ring.clone(),
                head: 0,
                cached_tail: 0,
            },
            Consumer {
                ring,
                tail: 0,
                cached_head: 0,
            },
        )
    }

    /// Bytes in the buffer.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The largest payload a push accepts: whatever the positions, a record
    /// of this size fits once the ring is empty.
    pub fn max_payload(&self) -> usize {
        Self::max_payload_for(self.cap)
    }

    /// [`Ring::max_payload`] for a ring of `capacity` bytes.
    pub const fn max_payload_for(capacity: usize) -> usize {
        capacity / 2 - HEADER
    }

    /// Bytes currently in use (written and not yet released). Exact only
    /// when called by one of the two sides while the other is idle.
    pub fn used(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        head.saturating_sub(tail) as usize
    }

    #[inline]
    fn at(&self, pos: u64) -> *mut u8 {
        // SAFETY: `pos & mask < cap`, so the offset stays inside the buffer.
        unsafe { self.buf.as_ptr().add((pos & self.mask) as usize) }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        let layout =
            Layout::from_size_align(self.cap, PAGE).expect("layout was valid at allocation");
        // SAFETY: allocated in `with_capacity` with this very layout; both
        // ends are gone (the ring is dropped with its last Arc).
        unsafe { alloc::dealloc(self.buf.as_ptr(), layout) };
    }
}

/// The writing end. Not `Clone`: there is exactly one.
pub struct Producer {
    ring: Arc<Ring>,
    /// Local copy of `ring.head` (only this side writes it).
    head: u64,
    /// Last value of `ring.tail` seen.
    cached_tail: u64,
}

impl Producer {
    /// Copies `payload` into the ring as one record.
    #[inline]
    pub fn try_push(&mut self, payload: &[u8]) -> Result<(), PushError> {
        let len = payload.len();
        // SAFETY: `write` receives exactly `len` bytes of reserved space.
        self.try_push_with(len, |dst| unsafe {
            std::ptr::copy_nonoverlapping(payload.as_ptr(), dst, len);
        })
    }

    /// Reserves a record of `len` payload bytes and lets `write` fill them
    /// (through a pointer to `len` writable bytes), then publishes it. On
    /// error `write` is not called.
    #[inline]
    pub fn try_push_with(
        &mut self,
        len: usize,
        write: impl FnOnce(*mut u8),
    ) -> Result<(), PushError> {
        let ring = &*self.ring;
        if len > ring.max_payload() {
            return Err(PushError::TooLarge);
        }
        let need = record_size(len) as u64;
        let cap = ring.cap as u64;
        let to_end = cap - (self.head & ring.mask);
        // A record that does not fit before the end wraps: the bytes up to the
        // end become padding.
        let pad = if need > to_end { to_end } else { 0 };
        let total = pad + need;
        if self.head + total - self.cached_tail > cap {
            self.cached_tail = ring.tail.load(Ordering::Acquire);
            if self.head + total - self.cached_tail > cap {
                return Err(PushError::Full);
            }
        }
        let mut pos = self.head;
        if pad > 0 {
            // SAFETY: [pos, pos + pad) is free (checked above), 8-aligned and
            // at least 8 bytes long (positions and the capacity are multiples
            // of 8), and the consumer does not read it before `head` moves.
            unsafe { ring.at(pos).cast::<u32>().write(PAD) };
            pos += pad;
        }
        let at = ring.at(pos);
        // SAFETY: [pos, pos + need) is free and contiguous (it does not cross
        // the end: `need <= to_end` or `pos` is at offset 0 and
        // `need <= cap / 2`), 8-aligned, and unpublished until the store of
        // `head` below.
        unsafe {
            at.cast::<u32>().write(len as u32);
        }
        // SAFETY: as above; the payload goes right after the header and has
        // `len` bytes reserved.
        write(unsafe { at.add(HEADER) });
        self.head = pos + need;
        ring.head.store(self.head, Ordering::Release);
        // The next record (guessing it is as long as this one) goes into
        // lines the consumer read last, on its core: ask for them now.
        let next = (self.head & ring.mask) as usize;
        let len = (need as usize).min(ring.cap - next);
        crate::prefetch::write_range(ring.at(self.head), len);
        Ok(())
    }

    /// Whether a record with a `len`-byte payload would fit now.
    pub fn has_room_for(&mut self, len: usize) -> bool {
        let ring = &*self.ring;
        if len > ring.max_payload() {
            return false;
        }
        let need = record_size(len) as u64;
        let to_end = ring.cap as u64 - (self.head & ring.mask);
        let total = if need > to_end { to_end + need } else { need };
        self.cached_tail = ring.tail.load(Ordering::Acquire);
        self.head + total - self.cached_tail <= ring.cap as u64
    }

    /// Whether more than `bytes` are in use, refreshing the cached tail
    /// only when the cached view says so (one load per `bytes` pushed).
    #[inline]
    pub fn backlog_over(&mut self, bytes: u64) -> bool {
        if self.head - self.cached_tail <= bytes {
            return false;
        }
        self.cached_tail = self.ring.tail.load(Ordering::Acquire);
        self.head - self.cached_tail > bytes
    }

    /// Bytes ever pushed (padding included).
    pub fn position(&self) -> u64 {
        self.head
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// A shared reference to the ring (for gauges such as [`Ring::used`]).
    pub fn ring_arc(&self) -> Arc<Ring> {
        self.ring.clone()
    }
}

/// The reading end. Not `Clone`: there is exactly one.
pub struct Consumer {
    ring: Arc<Ring>,
    /// Local copy of `ring.tail` (only this side writes it).
    tail: u64,
    /// Last value of `ring.head` seen.
    cached_head: u64,
}

/// A run of consecutive records ready to be read, borrowed from the
/// [`Consumer`] (as rtrb's `ReadChunk`): while it lives the consumer can take
/// no other batch, and [`Batch::release`] consumes it, so no safe code can
/// read the bytes of a released batch (the producer may already be
/// overwriting them). A batch dropped without `release` gives nothing back:
/// the next batch starts at the same records.
///
/// ```compile_fail
/// use tachyon_core::ring::Ring;
/// let (mut p, mut c) = Ring::with_capacity(4096).unwrap().split();
/// p.try_push(b"x").unwrap();
/// let b = c.batch(1, usize::MAX);
/// let it = b.iter();
/// b.release(); // error: `b` is still borrowed by `it`
/// assert_eq!(it.count(), 1);
/// ```
pub struct Batch<'c> {
    consumer: &'c mut Consumer,
    end: u64,
    count: usize,
    bytes: usize,
}

impl<'c> Batch<'c> {
    /// Number of records.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Sum of the payload lengths.
    pub fn payload_bytes(&self) -> usize {
        self.bytes
    }

    /// Ring bytes the batch spans (headers and padding included).
    pub fn span(&self) -> u64 {
        self.end - self.consumer.tail
    }

    /// Bytes written by the producer and not released yet (this batch
    /// included), as seen now.
    pub fn backlog(&self) -> u64 {
        self.consumer.ring.head.load(Ordering::Acquire) - self.consumer.tail
    }

    /// The payloads, in order. Any number of times.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter {
            ring: &self.consumer.ring,
            pos: self.consumer.tail,
            left: self.count,
        }
    }

    /// Gives the bytes of the batch back to the producer.
    pub fn release(self) {
        let c = self.consumer;
        c.tail = self.end;
        c.ring.tail.store(c.tail, Ordering::Release);
    }
}

/// Iterator over the payloads of a [`Batch`].
#[derive(Clone)]
pub struct BatchIter<'a> {
    ring: &'a Ring,
    pos: u64,
    left: usize,
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        // SAFETY: the batch was built from published records in [tail, head),
        // which the producer does not touch until they are released; this
        // iterator borrows the batch and `Batch::release` consumes it, so it
        // cannot outlive the bytes it reads.
        let (len, at) = unsafe { read_header(self.ring, &mut self.pos) };
        self.left -= 1;
        // SAFETY: `len` payload bytes follow the header inside the buffer.
        let s = unsafe { std::slice::from_raw_parts(at.add(HEADER), len) };
        self.pos += record_size(len) as u64;
        Some(s)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for BatchIter<'_> {}

/// Reads the header at `*pos`, skipping a padding header (which moves `*pos`
/// to the start of the buffer). Returns the payload length and the record's
/// address.
///
/// # Safety
/// `*pos` must be the position of a published, unreleased record (or of the
/// padding before one).
#[inline]
unsafe fn read_header(ring: &Ring, pos: &mut u64) -> (usize, *mut u8) {
    let mut at = ring.at(*pos);
    // SAFETY: the caller guarantees a published header at `*pos`.
    let mut len = unsafe { at.cast::<u32>().read() };
    if len == PAD {
        *pos += ring.cap as u64 - (*pos & ring.mask);
        at = ring.at(*pos);
        // SAFETY: a padding header is always followed by a record at the
        // start of the buffer, published with it.
        len = unsafe { at.cast::<u32>().read() };
    }
    (len as usize, at)
}

impl Consumer {
    /// Whether nothing is waiting (loads `head`).
    #[inline]
    pub fn is_empty(&mut self) -> bool {
        if self.cached_head == self.tail {
            self.cached_head = self.ring.head.load(Ordering::Acquire);
        }
        self.cached_head == self.tail
    }

    /// Up to `max_count` records and about `max_bytes` payload bytes (at
    /// least one record when any is waiting) of what is published now.
    /// Call [`Batch::release`] once done with the bytes.
    pub fn batch(&mut self, max_count: usize, max_bytes: usize) -> Batch<'_> {
        // One load per batch (not per record): see everything published.
        self.cached_head = self.ring.head.load(Ordering::Acquire);
        let mut pos = self.tail;
        let mut count = 0;
        let mut bytes = 0;
        while pos < self.cached_head && count < max_count && (count == 0 || bytes < max_bytes) {
            // SAFETY: `pos` is in [tail, head): a published record or the
            // padding before one.
            let (len, _) = unsafe { read_header(&self.ring, &mut pos) };
            pos += record_size(len) as u64;
            count += 1;
            bytes += len;
        }
        Batch {
            consumer: self,
            end: pos,
            count,
            bytes,
        }
    }

    /// Bytes written by the producer and not released yet, as seen now.
    pub fn backlog(&mut self) -> u64 {
        self.cached_head = self.ring.head.load(Ordering::Acquire);
        self.cached_head - self.tail
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

#[cfg(test)]
mod tests;
