//! Block checksums: the 256-bit value stored in a block pointer.
//!
//! Every algorithm returns four `u64` words, the layout of the block
//! pointer's checksum field. Fletcher-4 yields its four accumulators directly;
//! the cryptographic hashes produce 32 bytes, which are split the way ZFS does
//! for SHA-256 (big-endian words, so the words read in order spell the usual
//! hex digest) and, for BLAKE3, as little-endian words (the byte order BLAKE3
//! itself uses for its internal words; ZFS stores it the same way). `Off`
//! yields all zeros so that a pointer to unchecksummed data still has a
//! well-defined field.
//!
//! SHA-256 comes from `sha2`, which selects SHA-NI at run time; BLAKE3 from
//! `blake3`, which selects its SIMD kernels at run time. Neither is worth
//! writing ourselves.

use sha2::Digest;
use tarn_format::ChecksumAlg;

use crate::fletcher4::fletcher4;

/// 256-bit checksum of `data` as four u64 words (the block pointer's checksum
/// field). `ChecksumAlg::Off` gives `[0; 4]`.
pub fn checksum(alg: ChecksumAlg, data: &[u8]) -> [u64; 4] {
    match alg {
        ChecksumAlg::Off => [0; 4],
        ChecksumAlg::Fletcher4 => fletcher4(data),
        ChecksumAlg::Sha256 => {
            let digest: [u8; 32] = sha2::Sha256::digest(data).into();
            split_words(&digest, u64::from_be_bytes)
        }
        ChecksumAlg::Blake3 => split_words(blake3::hash(data).as_bytes(), u64::from_le_bytes),
    }
}

fn split_words(bytes: &[u8; 32], word: fn([u8; 8]) -> u64) -> [u64; 4] {
    std::array::from_fn(|i| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
        word(w)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_is_zero() {
        assert_eq!(checksum(ChecksumAlg::Off, b"anything"), [0; 4]);
    }

    #[test]
    fn sha256_abc_known_answer() {
        // FIPS 180-2 appendix B.1: SHA-256("abc").
        assert_eq!(
            checksum(ChecksumAlg::Sha256, b"abc"),
            [
                0xba7816bf8f01cfea,
                0x414140de5dae2223,
                0xb00361a396177a9c,
                0xb410ff61f20015ad
            ]
        );
    }

    #[test]
    fn sha256_padded_sector_known_answer() {
        // "abc" zero-padded to one sector, as a block would be stored.
        // Reference value from Python: hashlib.sha256(b"abc" + bytes(509)).
        let mut sector = [0u8; 512];
        sector[..3].copy_from_slice(b"abc");
        let words = checksum(ChecksumAlg::Sha256, &sector);
        let hex: String = words.iter().map(|w| format!("{w:016x}")).collect();
        assert_eq!(hex, SHA256_ABC_PADDED_512);
    }

    #[test]
    fn blake3_abc_known_answer() {
        // BLAKE3("abc") = 6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85;
        // little-endian words of those bytes.
        assert_eq!(
            checksum(ChecksumAlg::Blake3, b"abc"),
            [
                u64::from_le_bytes([0x64, 0x37, 0xb3, 0xac, 0x38, 0x46, 0x51, 0x33]),
                u64::from_le_bytes([0xff, 0xb6, 0x3b, 0x75, 0x27, 0x3a, 0x8d, 0xb5]),
                u64::from_le_bytes([0x48, 0xc5, 0x58, 0x46, 0x5d, 0x79, 0xdb, 0x03]),
                u64::from_le_bytes([0xfd, 0x35, 0x9c, 0x6c, 0xd5, 0xbd, 0x9d, 0x85]),
            ]
        );
    }

    #[test]
    fn fletcher4_dispatches() {
        assert_eq!(
            checksum(ChecksumAlg::Fletcher4, &[1, 0, 0, 0, 2, 0, 0, 0]),
            [3, 4, 5, 6]
        );
    }

    #[test]
    fn one_bit_flip_changes_every_algorithm() {
        let mut data = vec![0x5au8; 4096];
        for alg in [
            ChecksumAlg::Fletcher4,
            ChecksumAlg::Sha256,
            ChecksumAlg::Blake3,
        ] {
            let before = checksum(alg, &data);
            data[1234] ^= 0x10;
            assert_ne!(before, checksum(alg, &data), "{alg:?}");
            data[1234] ^= 0x10;
        }
    }

    const SHA256_ABC_PADDED_512: &str =
        "b064446561934ed673ed230b6c0e68ebde7d574bf81288b00ac88ff6e518ade4";
}
