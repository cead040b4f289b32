//! Page-aligned I/O buffers of fixed capacity.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every [`IoBuf`]: one page, which is what `O_DIRECT` needs of
/// a buffer's address on every file system we run on.
pub const IO_ALIGN: usize = 4096;

/// A heap buffer aligned to [`IO_ALIGN`], with a capacity fixed at creation.
///
/// The memory never moves while the buffer lives, which is what lets a
/// backend register it with the kernel (io_uring fixed buffers) and hand it to
/// a storage thread by value. A registered buffer carries its slot index.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
    registered_index: Option<u16>,
}

// SAFETY: `IoBuf` owns its allocation exclusively (like `Vec<u8>`); nothing
// else aliases the pointer, so moving it to another thread is sound.
unsafe impl Send for IoBuf {}
// SAFETY: shared references only allow reads of initialised bytes.
unsafe impl Sync for IoBuf {}

impl IoBuf {
    /// A new, empty buffer able to hold `capacity` bytes (rounded up to a
    /// whole page).
    ///
    /// # Panics
    /// If the allocation fails or `capacity` overflows when rounded up.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_multiple_of(IO_ALIGN);
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size (at least one page).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Self {
            ptr,
            len: 0,
            capacity,
            registered_index: None,
        }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut buf = Self::with_capacity(bytes.len());
        buf.extend_from_slice(bytes);
        buf
    }

    fn layout(capacity: usize) -> Layout {
        match Layout::from_size_align(capacity, IO_ALIGN) {
            Ok(layout) => layout,
            Err(error) => panic!("invalid I/O buffer layout for {capacity} bytes: {error}"),
        }
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer can hold; fixed for its lifetime.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes that can still be appended.
    pub fn remaining(&self) -> usize {
        self.capacity - self.len
    }

    /// Appends `bytes`.
    ///
    /// # Panics
    /// If they do not fit: the capacity never grows, so callers check
    /// [`IoBuf::remaining`] first.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= self.remaining(),
            "I/O buffer overflow: {} bytes into {} remaining",
            bytes.len(),
            self.remaining()
        );
        // SAFETY: the destination range [len, len + bytes.len()) lies inside
        // the allocation (checked above) and cannot overlap `bytes`, which is
        // borrowed immutably while `self` is borrowed mutably.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len += bytes.len();
    }

    /// Appends `count` zero bytes (padding).
    ///
    /// # Panics
    /// If they do not fit.
    pub fn extend_zeros(&mut self, count: usize) {
        assert!(
            count <= self.remaining(),
            "I/O buffer overflow: {count} zeros"
        );
        // SAFETY: the range lies inside the allocation, checked above.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), 0, count) };
        self.len += count;
    }

    /// Shortens the buffer to `len` bytes; does nothing if it is shorter.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Empties the buffer, keeping its memory (and registration).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Sets the length after bytes were written into the spare capacity by
    /// [`IoBuf::spare_capacity_mut`] (a read).
    ///
    /// # Panics
    /// If `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(
            len <= self.capacity,
            "I/O buffer length {len} beyond capacity {}",
            self.capacity
        );
        self.len = len;
    }

    /// The whole allocation, initialised (zeroed at creation), for reads into
    /// the buffer.
    pub fn spare_capacity_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `capacity` bytes, all initialised (it was
        // zero-allocated), and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.capacity) }
    }

    /// The fixed-buffer slot this buffer is registered in, if any.
    pub fn registered_index(&self) -> Option<u16> {
        self.registered_index
    }

    /// Records the slot a backend registered this buffer in. Only backends
    /// call this.
    pub fn set_registered_index(&mut self, index: Option<u16>) {
        self.registered_index = index;
    }

    /// Start of the allocation, for backends that hand it to the kernel.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl Deref for IoBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are inside the allocation and
        // initialised; the borrow of `self` keeps the allocation alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for IoBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, with exclusive access from `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated in `with_capacity` with exactly this
        // layout and is freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.capacity)) };
    }
}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("registered_index", &self.registered_index)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_rounded_up() {
        let buf = IoBuf::with_capacity(10);
        assert_eq!(buf.as_ptr() as usize % IO_ALIGN, 0);
        assert_eq!(buf.capacity(), IO_ALIGN);
    }

    #[test]
    fn appends_and_pads_within_capacity() {
        let mut buf = IoBuf::with_capacity(8);
        buf.extend_from_slice(b"abc");
        buf.extend_zeros(2);
        assert_eq!(&buf[..], b"abc\0\0");
        buf.clear();
        assert!(buf.is_empty());
        assert_eq!(buf.remaining(), IO_ALIGN);
    }

    #[test]
    #[should_panic(expected = "I/O buffer overflow")]
    fn refuses_to_grow_past_capacity() {
        let mut buf = IoBuf::with_capacity(IO_ALIGN);
        buf.extend_from_slice(&[0u8; IO_ALIGN + 1]);
    }
}
