//! mimalloc as Rust's global allocator, for the front ends users call (the
//! Python and Node extensions, `car`, `car-server`).
//!
//! The `mimalloc` crate asks for every block through `mi_malloc_aligned`,
//! even at alignment 1 or 8. In mimalloc 3, when the page of a size class
//! has no free block left, that call falls to a generic path which, for a
//! size class that is not a power of two (24, 40, 224 bytes, ...),
//! over-allocates and aligns by hand: a proposal's parse spent about a
//! twentieth of its instructions there (docs/performance.md). Every block
//! mimalloc hands out is aligned to at least the word size, so a layout of
//! that alignment or less goes through the plain `mi_malloc` family, and
//! only a larger alignment through the aligned one.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every mimalloc block has (its smallest block is one word,
/// and every size class is a multiple of it).
const PLAIN_ALIGN: usize = core::mem::size_of::<usize>();

/// The global allocator: `#[global_allocator] static A: car_runtime_alloc::MiMalloc = car_runtime_alloc::MiMalloc;`
pub struct MiMalloc;

// SAFETY: every method hands the layout's size to mimalloc, and asks for the
// layout's alignment explicitly whenever it exceeds what mimalloc guarantees
// for every block ([`PLAIN_ALIGN`]); blocks are freed with `mi_free`, which
// takes a block from either family.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation functions take any size.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator with `layout` (the caller's
        // contract); the new block keeps the alignment.
        unsafe {
            if layout.align() <= PLAIN_ALIGN {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    /// Every alignment, across the sizes of several size classes, comes back
    /// aligned, writable, zeroed when asked, and keeps its bytes through a
    /// reallocation.
    #[test]
    fn blocks_are_aligned_and_hold_their_bytes() {
        let a = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 7, 8, 9, 24, 40, 56, 100, 224, 1000, 5000, 70_000] {
                let layout = Layout::from_size_align(size, align).unwrap();
                let mut blocks = Vec::new();
                // Enough blocks to empty a page, so the generic path runs too.
                for round in 0..200u8 {
                    // SAFETY: the layout's size is non-zero.
                    let p = unsafe { if round % 2 == 0 { a.alloc(layout) } else { a.alloc_zeroed(layout) } };
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    // SAFETY: `p` is a block of `size` bytes.
                    let bytes = unsafe { core::slice::from_raw_parts_mut(p, size) };
                    if round % 2 == 1 {
                        assert!(bytes.iter().all(|&b| b == 0));
                    }
                    bytes.fill(round);
                    blocks.push((p, round));
                }
                for (p, round) in blocks {
                    // SAFETY: `p` came from `alloc` with `layout`.
                    let q = unsafe { a.realloc(p, layout, size * 3) };
                    assert_eq!(q as usize % align, 0);
                    // SAFETY: the first `size` bytes were kept.
                    let kept = unsafe { core::slice::from_raw_parts(q, size) };
                    assert!(kept.iter().all(|&b| b == round));
                    // SAFETY: `q` has the layout `size * 3`, `align`.
                    unsafe { a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap()) };
                }
            }
        }
    }
}
