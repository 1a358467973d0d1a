//! ZLE, ZFS's zero-length encoding (`module/zfs/zle.c`, with `n = 64`).
//!
//! ZLE only squeezes runs of zero bytes, which is what sparse-ish records
//! (partially written database pages, VM images) are full of, and costs
//! almost nothing to run. The stream is a sequence of control bytes `c`:
//! * `c < 64`: a literal run; the next `c + 1` bytes are copied as they are;
//! * `c >= 64`: a zero run of `c + 1 - 64` zero bytes (1..=192).
//!
//! The encoder follows zle.c step by step so that it produces the same bytes
//! as ZFS: a literal run keeps going over isolated zeros and stops at two
//! zeros in a row or after 64 bytes; and, like zle.c, it gives up on a
//! literal when fewer than 64 output bytes remain, even if the literal would
//! be shorter. The decoder checks every run against both the input and the
//! output bounds and, stricter than zle.c, requires the input to be consumed
//! exactly when the output is full: our frame header gives the exact payload
//! length, so leftover bytes can only mean corruption.

/// Literal runs are at most `N` bytes; zero runs at most `256 - N`.
const N: usize = 64;

/// Encodes `src` into `dst`. Returns the encoded length, or `None` when the
/// encoding does not fit in `dst` (the caller then stores the record as is).
pub fn encode(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let (mut s, mut d) = (0usize, 0usize);
    while s < src.len() && d + 1 < dst.len() {
        let first = s;
        let control = d;
        d += 1;
        if src[s] == 0 {
            let last = (first + 256 - N).min(src.len());
            while s < last && src[s] == 0 {
                s += 1;
            }
            dst[control] = (s - first - 1 + N) as u8;
        } else {
            if dst.len() - d < N {
                break;
            }
            let last = (first + N).min(src.len());
            while s < last - 1 && (src[s] | src[s + 1]) != 0 {
                dst[d] = src[s];
                d += 1;
                s += 1;
            }
            if src[s] != 0 {
                dst[d] = src[s];
                d += 1;
                s += 1;
            }
            dst[control] = (s - first - 1) as u8;
        }
    }
    (s == src.len()).then_some(d)
}

/// Decodes `src` into `out`, which must arrive zero-filled (zero runs only
/// advance over it). Fails with a reason unless the output is filled exactly
/// and the input consumed exactly.
pub fn decode(src: &[u8], out: &mut [u8]) -> Result<(), &'static str> {
    let (mut s, mut d) = (0usize, 0usize);
    while s < src.len() && d < out.len() {
        let len = 1 + src[s] as usize;
        s += 1;
        if len <= N {
            if len > src.len() - s || len > out.len() - d {
                return Err("zle literal run past the end");
            }
            out[d..d + len].copy_from_slice(&src[s..s + len]);
            s += len;
            d += len;
        } else {
            let zeros = len - N;
            if zeros > out.len() - d {
                return Err("zle zero run past the end of the record");
            }
            d += zeros;
        }
    }
    if d != out.len() {
        return Err("zle stream ends before the record does");
    }
    if s != src.len() {
        return Err("zle stream has bytes after the record is full");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn roundtrip(src: &[u8]) -> Vec<u8> {
        let mut enc = vec![0u8; src.len() * 2 + 2 * N];
        let n = encode(src, &mut enc).expect("fits in a generous buffer");
        let mut out = vec![0u8; src.len()];
        decode(&enc[..n], &mut out).expect("own output decodes");
        out
    }

    #[test]
    fn known_encoding() {
        // Three literal bytes (with one isolated zero kept inside the literal),
        // then a run of 5 zeros: [2, 7, 0, 9] [64 + 5 - 1].
        let src = [7, 0, 9, 0, 0, 0, 0, 0];
        let mut enc = [0u8; 128];
        let n = encode(&src, &mut enc).unwrap();
        assert_eq!(&enc[..n], &[2, 7, 0, 9, 68]);
    }

    #[test]
    fn long_zero_runs_split_at_192() {
        let src = vec![0u8; 4096];
        let mut enc = [0u8; 64];
        let n = encode(&src, &mut enc).unwrap();
        // 4096 = 21 * 192 + 64.
        assert_eq!(n, 22);
        assert!(enc[..21].iter().all(|&c| c == 255));
        assert_eq!(enc[21], (64 - 1 + N) as u8);
        assert_eq!(roundtrip(&src), src);
    }

    #[test]
    fn refuses_when_output_too_small() {
        let src: Vec<u8> = (1..=255).collect();
        let mut enc = [0u8; 100];
        assert_eq!(encode(&src, &mut enc), None);
    }

    #[test]
    fn decoder_rejects_bad_streams() {
        let mut out = [0u8; 8];
        assert!(decode(&[5, 1, 2], &mut out).is_err(), "literal past input");
        assert!(decode(&[255], &mut out).is_err(), "zero run past output");
        assert!(decode(&[64 + 3], &mut out).is_err(), "short output");
        assert!(decode(&[64 + 7, 0], &mut out).is_err(), "trailing input");
        assert!(decode(&[64 + 7], &mut out).is_ok());
    }

    proptest! {
        #[test]
        fn roundtrips(src in proptest::collection::vec(
            prop_oneof![3 => Just(0u8), 1 => any::<u8>()], 0..5000)) {
            prop_assert_eq!(roundtrip(&src), src);
        }

        #[test]
        fn decode_never_panics(src in proptest::collection::vec(any::<u8>(), 0..600),
                               len in 0usize..4096) {
            let mut out = vec![0u8; len];
            let _ = decode(&src, &mut out);
        }
    }
}
