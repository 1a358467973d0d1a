//! The POSIX layer's on-disk records (ZFS's `zfs_znode.h`, `zfs_sa.h`,
//! `zfs_dir.h`): the master node, the znode kept in each file's dnode
//! bonus, directory entries and the delete queue.
//!
//! A filesystem dataset is an object set whose objects are files,
//! directories, symlinks and special nodes; the object number *is* the
//! inode number, so inode numbers survive remounts.
//!
//! ## Master node (object 1, a ZAP of type `MasterNode`)
//! | key            | value (one u64)                                        |
//! |----------------|--------------------------------------------------------|
//! | `VERSION`      | [`ZPL_VERSION`]; a newer version is refused at mount     |
//! | `ROOT`         | object number of the root directory                      |
//! | `DELETE_QUEUE` | object of a ZAP listing files unlinked while still open  |
//! | `GENERATION`   | base of generation numbers: a new inode's is base + txg  |
//!
//! Extended-attribute directories are not listed in the master node: each
//! znode names its own (`xattr` field), as in ZFS.
//!
//! ## Znode (the dnode bonus of every file, 144..=320 bytes)
//! ZFS keeps these attributes in a self-describing "system attribute" (SA)
//! layout; tarn uses one fixed layout versioned by its magic, followed by
//! the inline extended attributes of `xattr=sa`.
//! ```text
//! off  size  field
//!   0     4  magic         ZNODE_MAGIC "tZN1"
//!   4     4  mode          st_mode: S_IFMT type bits | permission bits (07777)
//!   8     4  uid
//!  12     4  gid
//!  16     8  size          bytes (files, symlink target); entries + 2 for dirs
//!  24     8  links         hard link count
//!  32     8  parent        object of the directory holding it (root: itself)
//!  40     8  flags         ZNODE_FLAG_* bits; unknown bits are corruption
//!  48     8  gen           generation number (distinguishes reused inode numbers)
//!  56     8  rdev          device number of char/block device nodes
//!  64     8  xattr         object of the xattr directory, 0 = none
//!  72    12  atime         seconds (i64) then nanoseconds (u32, < 10^9)
//!  84    12  mtime
//!  96    12  ctime
//! 108    12  crtime        creation (birth) time
//! 120     2  sa_xattr_len  bytes used of the inline xattr area
//! 122    22  reserved      zero
//! 144     -  inline xattrs, packed, sa_xattr_len bytes (at most 176):
//!            0  1  name_len   1..=255
//!            1  2  value_len
//!            3  -  name, then value
//! ```
//! The bonus length is exactly `144 + sa_xattr_len`, so a file without
//! inline xattrs keeps a 144-byte bonus.
//!
//! ## Directory entries (a ZAP of type `DirectoryContents`)
//! Key: the name (1..=255 bytes, no `/`, no NUL, not `.` or `..`). Value:
//! one u64 `dtype << 60 | object`, as ZFS's `ZFS_DIRENT_MAKE`: the object
//! number in the low 48 bits, bits 48..60 zero, the `d_type` (`S_IFMT >> 12`)
//! in the top 4 bits, so `readdir` needs no znode read.
//!
//! ## Delete queue (a ZAP of type `Zap`)
//! Key: the object number in lower-case hexadecimal (ZFS's `zap_add_int`);
//! value: the object number. An object is listed here, in the same txg that
//! removed its last link, when it was still open; it is freed on its last
//! release or, after a crash, when the dataset is next mounted.
//!
//! ## Extended-attribute directories
//! A per-file ZAP of type `DirectoryContents` (znode flag `XATTR`, mode
//! `S_IFDIR | 0700`) whose entries are directory entries naming one
//! `PlainFile` object per attribute (znode flag `XATTR`, the value as its
//! contents). Objects flagged `XATTR` are never reachable as inodes.

use crate::dnode::DNODE_BONUS_SIZE;
use crate::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::Corrupted;

pub const MASTER_NODE_OBJ: u64 = 1;
pub const ZPL_VERSION: u64 = 1;
pub const ZPL_VERSION_KEY: &str = "VERSION";
pub const ZPL_ROOT_KEY: &str = "ROOT";
pub const ZPL_DELETE_QUEUE_KEY: &str = "DELETE_QUEUE";
pub const ZPL_GENERATION_KEY: &str = "GENERATION";

/// File type bits of `st_mode` (the Linux values, fixed by POSIX practice).
pub const S_IFMT: u32 = 0o170000;
pub const S_IFIFO: u32 = 0o010000;
pub const S_IFCHR: u32 = 0o020000;
pub const S_IFDIR: u32 = 0o040000;
pub const S_IFBLK: u32 = 0o060000;
pub const S_IFREG: u32 = 0o100000;
pub const S_IFLNK: u32 = 0o120000;
pub const S_IFSOCK: u32 = 0o140000;
/// Permission and set-id bits.
pub const MODE_PERM_MASK: u32 = 0o7777;

pub const ZNODE_MAGIC: u32 = u32::from_le_bytes(*b"tZN1");
pub const ZNODE_FIXED_SIZE: usize = 144;
/// Room for inline (`xattr=sa`) extended attributes in the bonus.
pub const ZNODE_SA_XATTR_SPACE: usize = DNODE_BONUS_SIZE - ZNODE_FIXED_SIZE;
pub const SA_XATTR_ENTRY_HEADER: usize = 3;
pub const XATTR_NAME_MAX: usize = 255;

/// The object is an xattr directory or value, not a namespace inode.
pub const ZNODE_FLAG_XATTR: u64 = 1;
const KNOWN_ZNODE_FLAGS: u64 = ZNODE_FLAG_XATTR;

const OFF_MODE: usize = 4;
const OFF_UID: usize = 8;
const OFF_GID: usize = 12;
const OFF_SIZE: usize = 16;
const OFF_LINKS: usize = 24;
const OFF_PARENT: usize = 32;
const OFF_FLAGS: usize = 40;
const OFF_GEN: usize = 48;
const OFF_RDEV: usize = 56;
const OFF_XATTR: usize = 64;
const OFF_ATIME: usize = 72;
const OFF_MTIME: usize = 84;
const OFF_CTIME: usize = 96;
const OFF_CRTIME: usize = 108;
const OFF_SA_LEN: usize = 120;
const OFF_RESERVED: usize = 122;

const _: () = assert!(OFF_RESERVED + 22 == ZNODE_FIXED_SIZE);
const _: () = assert!(ZNODE_SA_XATTR_SPACE == 176);

pub const NSEC_PER_SEC: u32 = 1_000_000_000;

/// A timestamp: seconds since the epoch and nanoseconds (< 10^9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub const fn new(sec: i64, nsec: u32) -> Self {
        Timespec { sec, nsec }
    }
    fn put(&self, b: &mut [u8], off: usize) {
        debug_assert!(self.nsec < NSEC_PER_SEC);
        put_u64(b, off, self.sec as u64);
        put_u32(b, off + 8, self.nsec);
    }
    fn get(b: &[u8], off: usize) -> Result<Self, Corrupted> {
        let t = Timespec {
            sec: u64_at(b, off) as i64,
            nsec: u32_at(b, off + 8),
        };
        if t.nsec >= NSEC_PER_SEC {
            return Err(Corrupted::new("znode", "nanoseconds out of range"));
        }
        Ok(t)
    }
}

/// One inline extended attribute: name and value.
pub type SaXattr = (Vec<u8>, Vec<u8>);

/// The znode: a file's attributes, kept in its dnode's bonus.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ZnodePhys {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub links: u64,
    pub parent: u64,
    pub flags: u64,
    pub gen: u64,
    pub rdev: u64,
    pub xattr: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    /// Inline xattrs in stored order (`xattr=sa`).
    pub sa_xattrs: Vec<SaXattr>,
}

/// Bytes the inline xattrs take in the bonus.
pub fn sa_xattrs_len(x: &[SaXattr]) -> usize {
    x.iter()
        .map(|(n, v)| SA_XATTR_ENTRY_HEADER + n.len() + v.len())
        .sum()
}

impl ZnodePhys {
    pub fn file_type(&self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }

    /// Do the inline xattrs fit the bonus (and each its length fields)?
    pub fn sa_fits(&self) -> bool {
        sa_xattrs_len(&self.sa_xattrs) <= ZNODE_SA_XATTR_SPACE
            && self
                .sa_xattrs
                .iter()
                .all(|(n, v)| (1..=XATTR_NAME_MAX).contains(&n.len()) && v.len() <= 0xFFFF)
    }

    /// The bonus bytes: `ZNODE_FIXED_SIZE + sa_xattr_len` of them.
    /// The caller keeps `sa_fits()` true (a bug otherwise).
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.sa_fits(), "inline xattrs overflow the bonus");
        let sa_len = sa_xattrs_len(&self.sa_xattrs);
        let mut b = vec![0u8; ZNODE_FIXED_SIZE + sa_len];
        put_u32(&mut b, 0, ZNODE_MAGIC);
        put_u32(&mut b, OFF_MODE, self.mode);
        put_u32(&mut b, OFF_UID, self.uid);
        put_u32(&mut b, OFF_GID, self.gid);
        put_u64(&mut b, OFF_SIZE, self.size);
        put_u64(&mut b, OFF_LINKS, self.links);
        put_u64(&mut b, OFF_PARENT, self.parent);
        put_u64(&mut b, OFF_FLAGS, self.flags);
        put_u64(&mut b, OFF_GEN, self.gen);
        put_u64(&mut b, OFF_RDEV, self.rdev);
        put_u64(&mut b, OFF_XATTR, self.xattr);
        self.atime.put(&mut b, OFF_ATIME);
        self.mtime.put(&mut b, OFF_MTIME);
        self.ctime.put(&mut b, OFF_CTIME);
        self.crtime.put(&mut b, OFF_CRTIME);
        put_u16(&mut b, OFF_SA_LEN, sa_len as u16);
        let mut off = ZNODE_FIXED_SIZE;
        for (n, v) in &self.sa_xattrs {
            b[off] = n.len() as u8;
            put_u16(&mut b, off + 1, v.len() as u16);
            off += SA_XATTR_ENTRY_HEADER;
            b[off..off + n.len()].copy_from_slice(n);
            off += n.len();
            b[off..off + v.len()].copy_from_slice(v);
            off += v.len();
        }
        debug_assert_eq!(off, b.len());
        b
    }

    /// Decodes a bonus; anything but a well-formed znode is `Corrupted`.
    pub fn decode(b: &[u8]) -> Result<ZnodePhys, Corrupted> {
        let bad = |why: &str| Corrupted::new("znode", why.to_string());
        if b.len() < ZNODE_FIXED_SIZE || b.len() > DNODE_BONUS_SIZE {
            return Err(bad("bonus length"));
        }
        if u32_at(b, 0) != ZNODE_MAGIC {
            return Err(bad("bad magic"));
        }
        let sa_len = usize::from(u16_at(b, OFF_SA_LEN));
        if ZNODE_FIXED_SIZE + sa_len != b.len() {
            return Err(bad("inline xattr length disagrees with bonus length"));
        }
        if b[OFF_RESERVED..ZNODE_FIXED_SIZE].iter().any(|&x| x != 0) {
            return Err(bad("reserved bytes not zero"));
        }
        let flags = u64_at(b, OFF_FLAGS);
        if flags & !KNOWN_ZNODE_FLAGS != 0 {
            return Err(bad("unknown flags"));
        }
        let mode = u32_at(b, OFF_MODE);
        if !valid_file_type(mode) || mode & !(S_IFMT | MODE_PERM_MASK) != 0 {
            return Err(bad("bad mode"));
        }
        Ok(ZnodePhys {
            mode,
            uid: u32_at(b, OFF_UID),
            gid: u32_at(b, OFF_GID),
            size: u64_at(b, OFF_SIZE),
            links: u64_at(b, OFF_LINKS),
            parent: u64_at(b, OFF_PARENT),
            flags,
            gen: u64_at(b, OFF_GEN),
            rdev: u64_at(b, OFF_RDEV),
            xattr: u64_at(b, OFF_XATTR),
            atime: Timespec::get(b, OFF_ATIME)?,
            mtime: Timespec::get(b, OFF_MTIME)?,
            ctime: Timespec::get(b, OFF_CTIME)?,
            crtime: Timespec::get(b, OFF_CRTIME)?,
            sa_xattrs: decode_sa_xattrs(&b[ZNODE_FIXED_SIZE..])?,
        })
    }
}

fn decode_sa_xattrs(mut b: &[u8]) -> Result<Vec<SaXattr>, Corrupted> {
    let bad = |why: &str| Corrupted::new("znode inline xattr", why.to_string());
    let mut out: Vec<SaXattr> = Vec::new();
    while !b.is_empty() {
        if b.len() < SA_XATTR_ENTRY_HEADER {
            return Err(bad("truncated entry header"));
        }
        let nlen = usize::from(b[0]);
        let vlen = usize::from(u16_at(b, 1));
        let end = SA_XATTR_ENTRY_HEADER + nlen + vlen;
        if nlen == 0 || end > b.len() {
            return Err(bad("entry overruns the area"));
        }
        let name = b[SA_XATTR_ENTRY_HEADER..SA_XATTR_ENTRY_HEADER + nlen].to_vec();
        if out.iter().any(|(n, _)| *n == name) {
            return Err(bad("duplicate name"));
        }
        out.push((name, b[SA_XATTR_ENTRY_HEADER + nlen..end].to_vec()));
        b = &b[end..];
    }
    Ok(out)
}

fn valid_file_type(mode: u32) -> bool {
    matches!(
        mode & S_IFMT,
        S_IFIFO | S_IFCHR | S_IFDIR | S_IFBLK | S_IFREG | S_IFLNK | S_IFSOCK
    )
}

// ---------------------------------------------------------------- dirents

pub const DIRENT_OBJ_BITS: u32 = 48;
pub const DIRENT_TYPE_SHIFT: u32 = 60;
const DIRENT_OBJ_MASK: u64 = (1 << DIRENT_OBJ_BITS) - 1;
const DIRENT_RESERVED_MASK: u64 = ((1 << DIRENT_TYPE_SHIFT) - 1) & !DIRENT_OBJ_MASK;

/// `d_type` of a mode (`S_IFMT >> 12`: DT_REG = 8, DT_DIR = 4, ...).
pub fn dtype_of_mode(mode: u32) -> u8 {
    ((mode & S_IFMT) >> 12) as u8
}

/// A directory entry's value. Object numbers are below 2^48 (a bug
/// otherwise: the object layer never allocates that many).
pub fn dirent_encode(obj: u64, mode: u32) -> u64 {
    assert!(obj != 0 && obj <= DIRENT_OBJ_MASK, "object {obj}");
    u64::from(dtype_of_mode(mode)) << DIRENT_TYPE_SHIFT | obj
}

/// `(object, d_type)` of a directory entry's value.
pub fn dirent_decode(v: u64) -> Result<(u64, u8), Corrupted> {
    let obj = v & DIRENT_OBJ_MASK;
    let dtype = (v >> DIRENT_TYPE_SHIFT) as u8;
    if obj == 0 || v & DIRENT_RESERVED_MASK != 0 || !valid_file_type(u32::from(dtype) << 12) {
        return Err(Corrupted::new("directory entry", format!("value {v:#x}")));
    }
    Ok((obj, dtype))
}

/// The delete queue key of `obj` (lower-case hex, like ZFS's zap_add_int).
pub fn delete_queue_key(obj: u64) -> String {
    format!("{obj:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ZnodePhys {
        ZnodePhys {
            mode: S_IFREG | 0o4755,
            uid: 1000,
            gid: 100,
            size: 0x1234,
            links: 2,
            parent: 5,
            flags: 0,
            gen: 77,
            rdev: 0,
            xattr: 9,
            atime: Timespec::new(1, 2),
            mtime: Timespec::new(3, 4),
            ctime: Timespec::new(-5, 6),
            crtime: Timespec::new(7, 999_999_999),
            sa_xattrs: vec![(b"user.a".to_vec(), b"xy".to_vec())],
        }
    }

    #[test]
    fn golden_bytes() {
        let z = sample();
        let b = z.encode();
        let mut want = vec![0u8; ZNODE_FIXED_SIZE + 3 + 6 + 2];
        want[0..4].copy_from_slice(b"tZN1");
        want[4..8].copy_from_slice(&0o104755u32.to_le_bytes());
        want[8..12].copy_from_slice(&1000u32.to_le_bytes());
        want[12..16].copy_from_slice(&100u32.to_le_bytes());
        want[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        want[24] = 2;
        want[32] = 5;
        want[48] = 77;
        want[64] = 9;
        want[72] = 1;
        want[80] = 2;
        want[84] = 3;
        want[92] = 4;
        want[96..104].copy_from_slice(&(-5i64).to_le_bytes());
        want[104] = 6;
        want[108] = 7;
        want[116..120].copy_from_slice(&999_999_999u32.to_le_bytes());
        want[120] = 11;
        want[144] = 6;
        want[145] = 2;
        want[147..153].copy_from_slice(b"user.a");
        want[153..155].copy_from_slice(b"xy");
        assert_eq!(b, want);
        assert_eq!(ZnodePhys::decode(&b).unwrap(), z);
    }

    #[test]
    fn rejects_bad_znodes() {
        let good = sample().encode();
        let mut b = good.clone();
        b[0] ^= 1;
        assert!(ZnodePhys::decode(&b).is_err(), "magic");
        let mut b = good.clone();
        b[130] = 1;
        assert!(ZnodePhys::decode(&b).is_err(), "reserved");
        let mut b = good.clone();
        b[80..84].copy_from_slice(&NSEC_PER_SEC.to_le_bytes());
        assert!(ZnodePhys::decode(&b).is_err(), "nsec");
        let mut b = good.clone();
        b[120] = 12;
        assert!(ZnodePhys::decode(&b).is_err(), "sa length");
        let mut b = good.clone();
        b[4..8].copy_from_slice(&0o7755u32.to_le_bytes());
        assert!(ZnodePhys::decode(&b).is_err(), "no file type");
        let mut b = good.clone();
        b[40] = 2;
        assert!(ZnodePhys::decode(&b).is_err(), "flags");
        let mut b = good;
        b[144] = 200;
        assert!(ZnodePhys::decode(&b).is_err(), "entry overrun");
        assert!(ZnodePhys::decode(&[0u8; 10]).is_err());
    }

    #[test]
    fn inline_area_capacity() {
        let mut z = sample();
        z.sa_xattrs = vec![(vec![b'n'; 10], vec![0; ZNODE_SA_XATTR_SPACE - 13])];
        assert!(z.sa_fits());
        assert_eq!(z.encode().len(), DNODE_BONUS_SIZE);
        z.sa_xattrs[0].1.push(0);
        assert!(!z.sa_fits());
    }

    #[test]
    fn dirents() {
        let v = dirent_encode(0x1234, S_IFDIR | 0o755);
        assert_eq!(v, 4 << 60 | 0x1234);
        assert_eq!(dirent_decode(v).unwrap(), (0x1234, 4));
        assert_eq!(
            dirent_decode(dirent_encode(7, S_IFREG)).unwrap(),
            (7, dtype_of_mode(S_IFREG))
        );
        assert!(dirent_decode(0).is_err());
        assert!(dirent_decode(8 << 60).is_err(), "object 0");
        assert!(dirent_decode(8 << 60 | 1 << 50 | 3).is_err(), "reserved");
        assert!(dirent_decode(3 << 60 | 3).is_err(), "type 3");
        assert_eq!(delete_queue_key(255), "ff");
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            let _ = ZnodePhys::decode(&bytes);
        }

        #[test]
        fn decode_never_panics_with_magic(mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 144..=320)) {
            bytes[0..4].copy_from_slice(b"tZN1");
            bytes[122..144].fill(0);
            let n = bytes.len() - ZNODE_FIXED_SIZE;
            bytes[120..122].copy_from_slice(&(n as u16).to_le_bytes());
            if let Ok(z) = ZnodePhys::decode(&bytes) {
                proptest::prop_assert_eq!(z.encode(), bytes);
            }
        }

        #[test]
        fn dirent_decode_never_panics(v in proptest::num::u64::ANY) {
            if let Ok((obj, t)) = dirent_decode(v) {
                proptest::prop_assert_eq!(dirent_encode(obj, u32::from(t) << 12), v);
            }
        }
    }
}
