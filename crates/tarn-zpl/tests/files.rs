//! Regular files: data, sparse holes, SEEK_DATA/SEEK_HOLE, truncate,
//! fallocate, recordsize block sizing, fsync and remounts.

mod common;

use common::{root, MemFs};
use tarn_zpl::{
    SetAttr, Settings, ZplError, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FILE_SIZE_MAX,
};

fn read_all(fs: &tarn_zpl::Zpl, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0xEEu8; size + 100];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n, size);
    buf.truncate(n);
    buf
}

#[test]
fn write_read_extend_and_remount() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let f = m.fs().create(r, b"f", 0o644, &root(), true).unwrap();
    assert_eq!(f.size, 0);
    assert_eq!(m.fs().write(f.ino, 0, b"hello", &root()).unwrap(), 5);
    assert_eq!(m.fs().write(f.ino, 3, b"LO world", &root()).unwrap(), 8);
    assert_eq!(read_all(m.fs(), f.ino), b"helLO world");
    let mut small = [0u8; 4];
    assert_eq!(m.fs().read(f.ino, 9, &mut small).unwrap(), 2);
    assert_eq!(m.fs().read(f.ino, 100, &mut small).unwrap(), 0);
    m.remount();
    assert_eq!(
        m.fs().lookup(r, b"f", &root()).unwrap().ino,
        f.ino,
        "stable ino"
    );
    assert_eq!(read_all(m.fs(), f.ino), b"helLO world");
    assert_eq!(m.fs().getattr(f.ino).unwrap().gen, f.gen);
}

#[test]
fn sparse_files_read_zeros_and_seek() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let f = fs.create(r, b"sparse", 0o644, &root(), true).unwrap().ino;
    let rs = 128 << 10;
    fs.write(f, 0, &[1u8; 1000], &root()).unwrap();
    fs.write(f, 10 * rs, &[2u8; 10], &root()).unwrap();
    let size = 10 * rs + 10;
    assert_eq!(fs.getattr(f).unwrap().size, size);
    let mut buf = vec![0xFFu8; 4096];
    fs.read(f, 5 * rs, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "hole reads zeros");
    fs.read(f, 1000, &mut buf[..10]).unwrap();
    assert!(buf[..10].iter().all(|&b| b == 0), "tail of block 0");
    assert_eq!(fs.lseek_data(f, 0).unwrap(), 0);
    assert_eq!(fs.lseek_hole(f, 0).unwrap(), rs);
    assert_eq!(fs.lseek_data(f, rs).unwrap(), 10 * rs);
    assert_eq!(fs.lseek_hole(f, 10 * rs).unwrap(), size, "EOF is a hole");
    assert_eq!(fs.lseek_data(f, size).err().unwrap().errno(), libc::ENXIO);
    // A hole punched in the middle of data.
    fs.write(f, rs, &vec![3u8; 3 * rs as usize], &root())
        .unwrap();
    fs.fallocate(
        f,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        2 * rs,
        rs,
        &root(),
    )
    .unwrap();
    assert_eq!(fs.lseek_hole(f, rs).unwrap(), 2 * rs);
    assert_eq!(fs.lseek_data(f, 2 * rs).unwrap(), 3 * rs);
    fs.read(f, 2 * rs, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs.getattr(f).unwrap().size, size, "KEEP_SIZE");
    // Holes take no space once committed.
    fs.fsync(f).unwrap();
    let used = fs.getattr(f).unwrap().blocks * 512;
    // Four data blocks and one indirect block; the 7 holes take nothing.
    assert!(used <= 5 * rs, "used {used}");
}

#[test]
fn truncate_down_then_up_reads_zeros() {
    let m = MemFs::new();
    let fs = m.fs();
    let f = fs
        .create(fs.root_ino(), b"t", 0o644, &root(), true)
        .unwrap()
        .ino;
    fs.write(f, 0, &[7u8; 300_000], &root()).unwrap();
    let sa = |size| SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(f, &sa(1000), &root()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 1000);
    fs.setattr(f, &sa(200_000), &root()).unwrap();
    let data = read_all(fs, f);
    assert!(data[..1000].iter().all(|&b| b == 7));
    assert!(data[1000..].iter().all(|&b| b == 0), "no stale bytes");
    fs.setattr(f, &sa(0), &root()).unwrap();
    assert_eq!(read_all(fs, f), b"");
    let d = fs.mkdir(fs.root_ino(), b"d", 0o755, &root()).unwrap().ino;
    assert_eq!(fs.setattr(d, &sa(0), &root()), Err(ZplError::IsDir));
    assert_eq!(
        fs.setattr(f, &sa(FILE_SIZE_MAX + 1), &root())
            .unwrap_err()
            .errno(),
        libc::EFBIG
    );
    assert_eq!(
        fs.write(f, FILE_SIZE_MAX - 1, b"ab", &root())
            .unwrap_err()
            .errno(),
        libc::EFBIG
    );
}

#[test]
fn fallocate_extends_size_only() {
    let m = MemFs::new();
    let fs = m.fs();
    let f = fs
        .create(fs.root_ino(), b"fa", 0o644, &root(), true)
        .unwrap()
        .ino;
    fs.fallocate(f, 0, 0, 1 << 20, &root()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 1 << 20);
    fs.fallocate(f, FALLOC_FL_KEEP_SIZE, 0, 4 << 20, &root())
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().size, 1 << 20);
    assert_eq!(
        fs.fallocate(f, 0, 0, 0, &root()).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        fs.fallocate(f, 0x10, 0, 1, &root()).unwrap_err().errno(),
        libc::EOPNOTSUPP
    );
    let mut buf = vec![1u8; 1000];
    fs.read(f, 500_000, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
    assert_eq!(fs.lseek_data(f, 0).unwrap_err().errno(), libc::ENXIO);
    assert_eq!(fs.lseek_hole(f, 10).unwrap(), 10);
}

#[test]
fn recordsize_block_sizing() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let bs = |m: &MemFs, ino| m.fs().getattr(ino).unwrap().blksize;
    let small = m
        .fs()
        .create(r, b"small", 0o644, &root(), true)
        .unwrap()
        .ino;
    assert_eq!(bs(&m, small), 512);
    m.fs().write(small, 0, &[1; 700], &root()).unwrap();
    assert_eq!(
        bs(&m, small),
        1024,
        "one block of its own size, 512-rounded"
    );
    m.fs().write(small, 700, &[2; 5000], &root()).unwrap();
    assert_eq!(bs(&m, small), 6144);
    let big = m.fs().create(r, b"big", 0o644, &root(), true).unwrap().ino;
    m.fs().write(big, 0, &vec![3; 300_000], &root()).unwrap();
    assert_eq!(bs(&m, big), 128 << 10, "recordsize blocks");
    // Changing recordsize reaches new (single-block) files only.
    let mut s = m.fs().settings();
    s.recordsize = 16 << 10;
    m.fs().set_settings(s).unwrap();
    let newer = m
        .fs()
        .create(r, b"newer", 0o644, &root(), true)
        .unwrap()
        .ino;
    m.fs().write(newer, 0, &vec![4; 100_000], &root()).unwrap();
    assert_eq!(bs(&m, newer), 16 << 10);
    m.fs().write(big, 300_000, &[5; 10], &root()).unwrap();
    assert_eq!(bs(&m, big), 128 << 10, "multi-block file keeps its size");
    assert_eq!(read_all(m.fs(), small)[..700], [1; 700]);
    s.recordsize = 1000;
    assert!(m.fs().set_settings(s).is_err(), "not a multiple of 512");
    m.remount_with(Settings {
        recordsize: 1 << 20,
        ..Settings::default()
    });
    assert_eq!(bs(&m, newer), 16 << 10);
    let data = read_all(m.fs(), big);
    assert_eq!(data.len(), 300_010);
    assert!(data[..300_000].iter().all(|&b| b == 3));
}

#[test]
fn concurrent_writers_on_distinct_and_same_files() {
    let m = MemFs::new();
    let fs = m.fs();
    let r = fs.root_ino();
    let shared = fs.create(r, b"shared", 0o644, &root(), true).unwrap().ino;
    std::thread::scope(|s| {
        for t in 0..8u8 {
            s.spawn(move || {
                let name = format!("f{t}");
                let own = fs
                    .create(r, name.as_bytes(), 0o644, &root(), true)
                    .unwrap()
                    .ino;
                for i in 0..200u64 {
                    fs.write(own, i * 1000, &[t; 1000], &root()).unwrap();
                    fs.write(shared, (i * 8 + u64::from(t)) * 100, &[t; 100], &root())
                        .unwrap();
                }
            });
        }
    });
    for t in 0..8u8 {
        let a = fs.lookup(r, format!("f{t}").as_bytes(), &root()).unwrap();
        assert_eq!(a.size, 200_000);
        assert!(read_all(fs, a.ino).iter().all(|&b| b == t));
    }
    let data = read_all(fs, shared);
    assert_eq!(data.len(), 200 * 8 * 100);
    for (i, chunk) in data.chunks(100).enumerate() {
        assert!(chunk.iter().all(|&b| b == (i % 8) as u8));
    }
}

#[test]
fn crash_keeps_fsynced_data() {
    let mut m = MemFs::new();
    let r = m.fs().root_ino();
    let f = m
        .fs()
        .create(r, b"durable", 0o644, &root(), true)
        .unwrap()
        .ino;
    m.fs().write(f, 0, b"synced", &root()).unwrap();
    m.fs().fsync(f).unwrap();
    m.crash_and_remount();
    assert_eq!(read_all(m.fs(), f), b"synced");
}

/// A new file in the root directory, grown to `size` by truncate and
/// never written.
fn empty_file_of_size(fs: &tarn_zpl::Zpl, name: &[u8], size: u64) -> u64 {
    let f = fs
        .create(fs.root_ino(), name, 0o644, &root(), true)
        .unwrap()
        .ino;
    let sa = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(f, &sa, &root()).unwrap();
    f
}

/// A small write into a record not yet dirty holds the whole record in
/// memory until the txg syncs, and the txg's dirty data says so (OpenZFS
/// charges the whole dbuf): random 4 KiB writes into a large file then
/// reach the throttle and the sync threshold by what they hold, not by
/// the few bytes they write.
#[test]
fn small_writes_charge_the_records_they_make_dirty() {
    let m = MemFs::new();
    let fs = m.fs();
    let f = empty_file_of_size(fs, b"big", 1 << 30);
    m.txg().wait_synced(0).unwrap();
    let before = m.txg().dirty_bytes();
    let rs = 128 << 10;
    for i in 0..16u64 {
        fs.write(f, i * 7 * rs + 4096, &[0xa5; 4096], &root())
            .unwrap();
    }
    // A second write into each record holds nothing more.
    for i in 0..16u64 {
        fs.write(f, i * 7 * rs + 3 * 4096, &[0x5a; 4096], &root())
            .unwrap();
    }
    let held = m.txg().dirty_bytes() - before;
    assert!(
        held >= 16 * rs,
        "16 records of 128 KiB made dirty, {held} bytes charged"
    );
    assert!(
        held < 16 * rs + 16 * 2 * 4096 + (64 << 10),
        "{held} bytes charged"
    );
}

/// A file made large before its first write (`truncate -s 32G`, a VM
/// image) gets recordsize blocks like any other large file. The block
/// size was once worked out in 32 bits: sizes of 4 GiB and more wrapped,
/// and such a file kept 512-byte blocks (eight allocations per 4 KiB
/// write, and an indirect block for every 64 KiB).
#[test]
fn a_file_grown_past_4_gib_before_its_first_write_gets_recordsize_blocks() {
    let m = MemFs::new();
    let fs = m.fs();
    for (i, size) in [4u64 << 30, (4 << 30) + 4096, 32 << 30]
        .into_iter()
        .enumerate()
    {
        let f = empty_file_of_size(fs, format!("image{i}").as_bytes(), size);
        fs.write(f, size / 2, &[7; 4096], &root()).unwrap();
        assert_eq!(fs.getattr(f).unwrap().blksize, 128 << 10, "size {size}");
    }
}
