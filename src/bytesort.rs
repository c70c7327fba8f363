//! Ordering many strings by their bytes without a comparison sort's pointer
//! chasing.
//!
//! A comparison sort of `n` strings reads two of them per comparison, about
//! `n log n` times, each read a jump to wherever that string lives. Once the
//! strings outgrow the caches nearly every such read misses, and the sort's
//! time grows much faster than `n log n`. Here each string is read once per
//! 8-byte chunk needed to tell it apart from the others: chunks are packed
//! with the string's index into integers, sorted in one contiguous array, and
//! only runs that tie on a chunk are sorted again on their next chunk (a most
//! significant digit first radix sort with 8-byte digits).

/// `n` strings in byte order: see [`sort`].
pub(crate) struct Sorted {
    /// The indices `0..n` in the order of their strings by bytes (the order
    /// of `[u8]` and of `str`), equal strings by index.
    pub order: Vec<u32>,
    /// `same[p]`: the string at `order[p]` equals the one at `order[p - 1]`.
    pub same: Vec<bool>,
}

/// Orders the `n` strings `text(0..n)` by their bytes and marks repeats.
pub(crate) fn sort<'t>(n: usize, text: impl Fn(usize) -> &'t [u8]) -> Sorted {
    sort_items((0..n).map(|i| item(text(i), i)).collect(), text)
}

/// String `i`'s entry in the list [`sort_items`] orders: `s` is `text(i)`.
/// Lets a caller that reads the strings anyway build the list in the same
/// pass.
pub(crate) fn item(s: &[u8], i: usize) -> u128 {
    debug_assert!(u32::try_from(i).is_ok());
    chunk(s, 0) | i as u128
}

/// [`sort`], given `items[i] == item(text(i), i)` for each string `i`.
pub(crate) fn sort_items<'t>(items: Vec<u128>, text: impl Fn(usize) -> &'t [u8]) -> Sorted {
    sort_chunked(items, |i, depth| chunk(text(i), depth))
}

/// [`sort_items`] for strings that are not stored whole: `chunk_at(i,
/// depth)` is [`parts_chunk`] of string `i`'s parts (or [`item`]'s chunk of a
/// stored one) at `depth`.
pub(crate) fn sort_chunked(mut items: Vec<u128>, chunk_at: impl Fn(usize, usize) -> u128) -> Sorted {
    let n = items.len();
    debug_assert!(u32::try_from(n).is_ok());
    let mut same = vec![false; n];
    // (start, end, depth) of runs still to order on the chunk at `depth`. Each
    // adjacent pair inside a run is decided when the run is sorted: distinct
    // chunks or lengths, equal (the strings end here), or still tied (more
    // bytes follow), in which case the tied run is sorted again one chunk on
    // and decides its pairs then.
    let mut todo: Vec<(usize, usize, usize)> = vec![(0, n, 0)];
    while let Some((lo, hi, depth)) = todo.pop() {
        let run = &mut items[lo..hi];
        if depth > 0 {
            for it in run.iter_mut() {
                let i = *it as u32 as usize;
                *it = chunk_at(i, depth) | i as u128;
            }
        }
        run.sort_unstable();
        let mut s = 0;
        while s < run.len() {
            let head = run[s] >> 32;
            let mut e = s + 1;
            while e < run.len() && run[e] >> 32 == head {
                e += 1;
            }
            if e - s > 1 {
                if head as u32 == MORE {
                    todo.push((lo + s, lo + e, depth + 1));
                } else {
                    same[lo + s + 1..lo + e].fill(true);
                }
            }
            if s > 0 {
                same[lo + s] = false;
            }
            s = e;
        }
    }
    Sorted { order: items.into_iter().map(|it| it as u32).collect(), same }
}

/// The chunk at `depth` (see [`sort_chunked`]) of the string made of `parts`
/// back to back, without building that string.
pub(crate) fn parts_chunk(parts: &[&[u8]], depth: usize) -> u128 {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut skip = depth * 8;
    let rest = total.saturating_sub(skip);
    // The window's bytes so far, from the top; `filled` of them.
    let mut window = 0u64;
    let mut filled = 0;
    for p in parts {
        if skip >= p.len() {
            skip -= p.len();
            continue;
        }
        let here = &p[skip..];
        skip = 0;
        let take = here.len().min(8 - filled);
        window |= leading(here, take) >> (8 * filled);
        filled += take;
        if filled == 8 {
            break;
        }
    }
    (u128::from(window) << 64) | (u128::from(rest.min(MORE as usize) as u32) << 32)
}

/// The first `take` (1 to 8) bytes of `s` as the top bytes of a big-endian
/// word, the rest zero: one load when `s` has 8 bytes, else byte by byte
/// (short parts: a closing parenthesis, a short id).
#[inline]
fn leading(s: &[u8], take: usize) -> u64 {
    debug_assert!((1..=8).contains(&take) && take <= s.len());
    match s.first_chunk::<8>() {
        Some(b) if take == 8 => u64::from_be_bytes(*b),
        // The top `take` bytes kept (`take` < 8: the shift is under 64).
        Some(b) => u64::from_be_bytes(*b) & !(u64::MAX >> (8 * take)),
        None => s[..take].iter().enumerate().fold(0, |w, (k, &c)| w | u64::from(c) << (56 - 8 * k)),
    }
}

/// The length mark of a string with more than 8 bytes left.
const MORE: u32 = 9;

/// Bytes `8 * depth ..` of `s` as a sort key: the next 8 bytes (zero padded)
/// in the top 64 bits, then how many bytes are left (capped at [`MORE`]) in
/// the next 32. With equal padded bytes, the string with fewer bytes left is
/// a prefix of the other, so it sorts first.
fn chunk(s: &[u8], depth: usize) -> u128 {
    let rest = s.get(depth * 8..).unwrap_or_default();
    let bytes = match rest.first_chunk::<8>() {
        Some(b) => *b,
        None => {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            b
        }
    };
    (u128::from(u64::from_be_bytes(bytes)) << 64) | (u128::from(rest.len().min(MORE as usize) as u32) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(strings: &[&[u8]]) {
        let got = sort(strings.len(), |i| strings[i]);
        let mut want: Vec<u32> = (0..strings.len() as u32).collect();
        want.sort_by(|&a, &b| strings[a as usize].cmp(strings[b as usize]).then(a.cmp(&b)));
        assert_eq!(got.order, want, "{strings:?}");
        let same: Vec<bool> =
            (0..want.len()).map(|p| p > 0 && strings[want[p] as usize] == strings[want[p - 1] as usize]).collect();
        assert_eq!(got.same, same, "{strings:?}");
    }

    #[test]
    fn orders_like_byte_comparison() {
        check(&[]);
        check(&[b"b", b"a"]);
        check(&[b"k10", b"k2", b"k1", b"k", b"", b"k\0", b"k\0\0", b"k\0a", b"K"]);
        // Ties over several chunks, prefixes at and around chunk boundaries,
        // zero bytes that only the length tells apart, and repeats.
        let base = b"xxxxxxxxyyyyyyyyzzzzzzzz";
        let mut owned: Vec<Vec<u8>> = Vec::new();
        for cut in 0..=base.len() {
            owned.push(base[..cut].to_vec());
            let mut z = base[..cut].to_vec();
            z.push(0);
            owned.push(z.clone());
            z.push(0);
            owned.push(z);
            let mut hi = base[..cut].to_vec();
            hi.push(0xff);
            owned.push(hi);
        }
        owned.extend(owned.clone());
        owned.push("é".as_bytes().to_vec());
        owned.reverse();
        let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        check(&refs);
    }

    #[test]
    fn parts_chunk_is_the_chunk_of_the_joined_parts() {
        let pieces: [&[u8]; 6] = [b"", b"a", b"bcdefgh", b"ijklmnopq", b"' (value set at runtime by action ", b")"];
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    let joined = [a, b, c].concat();
                    for depth in 0..8 {
                        assert_eq!(parts_chunk(&[a, b, c], depth), chunk(&joined, depth), "{joined:?} at {depth}");
                    }
                }
            }
        }
        // Parts of every length from 0 to 17 (a window taken whole from one
        // part, or cut from its start, middle or end), bytes 0x00 and 0xff
        // among them.
        let bytes: Vec<u8> = (0u8..=17).map(|k| k.wrapping_mul(37).wrapping_add(0xf0)).collect();
        for la in 0..=17 {
            for lb in 0..=17 {
                let (a, b) = (&bytes[..la], &bytes[17 - lb..]);
                let joined = [a, b, b")"].concat();
                for depth in 0..6 {
                    assert_eq!(parts_chunk(&[a, b, b")"], depth), chunk(&joined, depth), "{joined:?} at {depth}");
                }
            }
        }
    }

    #[test]
    fn orders_generated_strings() {
        // A small generator: strings over a three-letter alphabet with a shared
        // prefix of random length, so ties reach several chunks deep.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut owned = Vec::new();
        for _ in 0..2000 {
            let mut s = vec![b'p'; (next() % 20) as usize];
            for _ in 0..next() % 6 {
                s.push([0u8, b'a', b'b'][(next() % 3) as usize]);
            }
            owned.push(s);
        }
        let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        check(&refs);
    }
}
