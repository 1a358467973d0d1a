//! The server against real clients (`nbdinfo`, `qemu-io`) and hostile
//! raw-socket ones, over an in-memory export.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tarn_nbd::proto::*;
use tarn_nbd::{serve, Config, Export, ExportResult, Extent, Limits, Runtime};

/// An export in memory; blocks of 4 KiB never written (or trimmed) are
/// holes.
struct Mem {
    data: Mutex<Vec<u8>>,
    written: Mutex<Vec<bool>>,
    flushes: std::sync::atomic::AtomicU64,
    read_only: bool,
}

const BLOCK: u64 = 4096;

impl Mem {
    fn new(size: u64, read_only: bool) -> Arc<Mem> {
        Arc::new(Mem {
            data: Mutex::new(vec![0; size as usize]),
            written: Mutex::new(vec![false; (size / BLOCK) as usize]),
            flushes: Default::default(),
            read_only,
        })
    }
}

impl Export for Mem {
    fn size(&self) -> u64 {
        self.data.lock().len() as u64
    }
    fn preferred_block(&self) -> u32 {
        BLOCK as u32
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()> {
        let d = self.data.lock();
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8], _fua: bool) -> ExportResult<()> {
        self.data.lock()[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        let mut w = self.written.lock();
        for b in offset / BLOCK..(offset + data.len() as u64).div_ceil(BLOCK) {
            w[b as usize] = true;
        }
        Ok(())
    }
    fn flush(&self) -> ExportResult<()> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64, _fua: bool) -> ExportResult<()> {
        self.zero(offset, len, true, false)
    }
    fn zero(&self, offset: u64, len: u64, may_trim: bool, _fua: bool) -> ExportResult<()> {
        self.data.lock()[offset as usize..(offset + len) as usize].fill(0);
        if may_trim {
            let mut w = self.written.lock();
            for b in offset.div_ceil(BLOCK)..(offset + len) / BLOCK {
                w[b as usize] = false;
            }
        }
        Ok(())
    }
    fn extents(&self, offset: u64, len: u64) -> ExportResult<Vec<Extent>> {
        let w = self.written.lock();
        let end = (offset + len).min(w.len() as u64 * BLOCK);
        let mut out: Vec<Extent> = Vec::new();
        let mut at = offset;
        while at < end {
            let b = at / BLOCK;
            let next = ((b + 1) * BLOCK).min(end);
            let hole = !w[b as usize];
            match out.last_mut() {
                Some(e) if e.hole == hole => e.len += next - at,
                _ => out.push(Extent {
                    len: next - at,
                    hole,
                }),
            }
            at = next;
        }
        Ok(out)
    }
}

struct Served {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    listener: Option<tarn_nbd::Listener>,
    mem: Arc<Mem>,
}

fn start(size: u64, read_only: bool, limits: Limits) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol");
    let mem = Mem::new(size, read_only);
    let rt = Runtime::new(limits);
    let config = Config {
        name: "tank/vol".into(),
        description: "test volume".into(),
        label: "nbd test".into(),
        mode: 0o660,
        group: None,
    };
    let listener = serve(&path, mem.clone(), config, rt).unwrap();
    Served {
        _dir: dir,
        path,
        listener: Some(listener),
        mem,
    }
}

fn uri(path: &Path) -> String {
    format!("nbd+unix:///?socket={}", path.display())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a client");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn nbdinfo_sees_size_flags_block_sizes_and_map() {
    let s = start(8 << 20, false, Limits::default());
    s.mem.write(1 << 20, &[7u8; 8192], false).unwrap();
    let info = run(Command::new("nbdinfo").arg("--json").arg(uri(&s.path)));
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], 8 << 20);
    assert_eq!(e["can_flush"], true);
    assert_eq!(e["can_fua"], true);
    assert_eq!(e["can_trim"], true);
    assert_eq!(e["can_zero"], true);
    assert_eq!(e["can_fast_zero"], true);
    assert_eq!(e["can_multi_conn"], true);
    assert_eq!(e["can_cache"], true);
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32 << 20);
    let map = run(Command::new("nbdinfo").arg("--map").arg(uri(&s.path)));
    let lines: Vec<&str> = map.lines().collect();
    assert_eq!(lines.len(), 3, "{map}");
    assert!(
        lines[0]
            .split_whitespace()
            .take(3)
            .eq(["0", "1048576", "3"]),
        "{map}"
    );
    assert!(
        lines[1]
            .split_whitespace()
            .take(3)
            .eq(["1048576", "8192", "0"]),
        "{map}"
    );
    let list = run(Command::new("nbdinfo").arg("--list").arg(uri(&s.path)));
    assert!(list.contains("tank/vol"), "{list}");
}

#[test]
fn qemu_io_patterns_fua_zero_discard_flush() {
    let s = start(16 << 20, false, Limits::default());
    let img = format!("nbd:unix:{}", s.path.display());
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 0xab 0 1M",
        "-c",
        "write -f -P 0xcd 1M 64k",
        "-c",
        "write -z 4k 4k",
        "-c",
        "discard 512k 256k",
        "-c",
        "flush",
        "-c",
        "read -P 0xab 0 4k",
        "-c",
        "read -P 0 4k 4k",
        "-c",
        "read -P 0xab 8k 504k",
        "-c",
        "read -P 0 512k 256k",
        "-c",
        "read -P 0xab 768k 256k",
        "-c",
        "read -P 0xcd 1M 64k",
        &img,
    ]));
    assert!(s.mem.flushes.load(std::sync::atomic::Ordering::SeqCst) >= 1);
}

#[test]
fn read_only_exports_refuse_writes() {
    let s = start(1 << 20, true, Limits::default());
    let img = format!("nbd:unix:{}", s.path.display());
    let out = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 1 0 4k", &img])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("ermission") || text.contains("read-only") || text.contains("Read-only"),
        "{text}"
    );
    run(Command::new("qemu-io").args(["-f", "raw", "-r", "-c", "read -P 0 0 4k", &img]));
}

/// A client speaking raw bytes.
struct Raw(UnixStream);

impl Raw {
    fn connect(path: &Path) -> Raw {
        let s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw(s)
    }
    fn greeting(&mut self) {
        let mut g = [0u8; 18];
        self.0.read_exact(&mut g).unwrap();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
    }
    fn option(&mut self, opt: u32, data: &[u8]) {
        let mut b = Vec::new();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&opt.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.0.write_all(&b).unwrap();
    }
    fn opt_reply(&mut self) -> (u32, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(
            u64::from_be_bytes(h[0..8].try_into().unwrap()),
            OPT_REPLY_MAGIC
        );
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let typ = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut d = vec![0u8; len as usize];
        self.0.read_exact(&mut d).unwrap();
        (opt, typ, d)
    }
    /// Fixed newstyle, then GO for the default export (simple replies).
    fn go(path: &Path, structured: bool) -> Raw {
        let mut c = Raw::connect(path);
        c.greeting();
        c.0.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
        if structured {
            c.option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(c.opt_reply().1, REP_ACK);
        }
        let mut d = Vec::new();
        d.extend_from_slice(&0u32.to_be_bytes());
        d.extend_from_slice(&1u16.to_be_bytes());
        d.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        c.option(OPT_GO, &d);
        loop {
            let (_, typ, _) = c.opt_reply();
            if typ == REP_ACK {
                break;
            }
            assert_eq!(typ, REP_INFO);
        }
        c
    }
    fn request(
        &mut self,
        typ: u16,
        flags: u16,
        cookie: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let r = Request {
            flags,
            typ,
            cookie,
            offset,
            len,
        };
        self.0.write_all(&r.encode()).unwrap();
        self.0.write_all(payload).unwrap();
    }
    /// A simple reply: (error, cookie).
    fn simple(&mut self) -> (u32, u64) {
        let mut h = [0u8; 16];
        self.0.read_exact(&mut h).unwrap();
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            SIMPLE_REPLY_MAGIC
        );
        (
            u32::from_be_bytes(h[4..8].try_into().unwrap()),
            u64::from_be_bytes(h[8..16].try_into().unwrap()),
        )
    }
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.0.read(&mut b), Ok(0) | Err(_))
    }
}

#[test]
fn bad_requests_get_errors_on_the_wire_and_the_connection_goes_on() {
    let s = start(1 << 20, false, Limits::default());
    let mut c = Raw::go(&s.path, false);
    // Past the end: ENOSPC for writes, EINVAL for reads and trims.
    c.request(CMD_READ, 0, 1, 1 << 20, 512, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 1));
    c.request(CMD_WRITE, 0, 2, (1 << 20) - 512, 1024, &[0u8; 1024]);
    assert_eq!(c.simple(), (Errno::NoSpc as u32, 2));
    c.request(CMD_TRIM, 0, 3, u64::MAX - 10, 512, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 3));
    // Misaligned (the client asked for block sizes).
    c.request(CMD_WRITE, 0, 4, 100, 512, &[1u8; 512]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 4));
    // Unknown command and flags; BLOCK_STATUS without a context.
    c.request(99, 0, 5, 0, 512, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 5));
    c.request(CMD_FLUSH, CMD_FLAG_NO_HOLE, 6, 0, 0, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 6));
    c.request(CMD_BLOCK_STATUS, 0, 7, 0, 512, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 7));
    // FAST_ZERO with NO_HOLE: not fast.
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE,
        8,
        0,
        512,
        &[],
    );
    assert_eq!(c.simple(), (Errno::NotSup as u32, 8));
    // Oversized read.
    c.request(CMD_READ, 0, 9, 0, (32 << 20) + 512, &[]);
    assert_eq!(c.simple(), (Errno::Inval as u32, 9));
    // And a good write and read still work.
    c.request(CMD_WRITE, CMD_FLAG_FUA, 10, 4096, 512, &[9u8; 512]);
    assert_eq!(c.simple(), (0, 10));
    c.request(CMD_READ, 0, 11, 4096, 512, &[]);
    assert_eq!(c.simple(), (0, 11));
    let mut d = [0u8; 512];
    c.0.read_exact(&mut d).unwrap();
    assert_eq!(d, [9u8; 512]);
    // An oversized write is a disconnect (the protocol allows it).
    c.request(CMD_WRITE, 0, 12, 0, (32 << 20) + 512, &[]);
    assert!(c.closed());
}

#[test]
fn hostile_handshakes_are_cut_and_the_server_keeps_serving() {
    let s = start(1 << 20, false, Limits::default());
    // Unknown client flags.
    let mut c = Raw::connect(&s.path);
    c.greeting();
    c.0.write_all(&0x8000_0000u32.to_be_bytes()).unwrap();
    assert!(c.closed());
    // A bad option magic.
    let mut c = Raw::connect(&s.path);
    c.greeting();
    c.0.write_all(&1u32.to_be_bytes()).unwrap();
    c.0.write_all(&[0xffu8; 16]).unwrap();
    assert!(c.closed());
    // A huge option length.
    let mut c = Raw::connect(&s.path);
    c.greeting();
    c.0.write_all(&1u32.to_be_bytes()).unwrap();
    let mut h = Vec::new();
    h.extend_from_slice(&IHAVEOPT.to_be_bytes());
    h.extend_from_slice(&OPT_GO.to_be_bytes());
    h.extend_from_slice(&u32::MAX.to_be_bytes());
    c.0.write_all(&h).unwrap();
    assert!(c.closed());
    // Lengths inside an option that lie: INVALID, and the handshake goes on.
    let mut c = Raw::connect(&s.path);
    c.greeting();
    c.0.write_all(&1u32.to_be_bytes()).unwrap();
    c.option(OPT_GO, &[0, 0, 0x10, 0, b'x']);
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);
    c.option(
        OPT_SET_META_CONTEXT,
        &[0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff],
    );
    assert_eq!(c.opt_reply().1, REP_ERR_INVALID);
    c.option(77, &[1, 2, 3]);
    assert_eq!(c.opt_reply().1, REP_ERR_UNSUP);
    let mut d = Vec::new();
    d.extend_from_slice(&3u32.to_be_bytes());
    d.extend_from_slice(b"zzz");
    d.extend_from_slice(&0u16.to_be_bytes());
    c.option(OPT_GO, &d);
    assert_eq!(c.opt_reply().1, REP_ERR_UNKNOWN);
    c.option(OPT_ABORT, &[]);
    assert_eq!(c.opt_reply().1, REP_ACK);
    assert!(c.closed());
    // A client that disconnects in the middle of a write payload.
    let mut c = Raw::go(&s.path, false);
    c.request(CMD_WRITE, 0, 1, 0, 4096, &[5u8; 100]);
    drop(c);
    // The server still serves.
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 3 0 4k",
        "-c",
        "read -P 3 0 4k",
        &format!("nbd:unix:{}", s.path.display()),
    ]));
}

#[test]
fn a_slow_handshake_times_out() {
    let limits = Limits {
        handshake_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let s = start(1 << 20, false, limits);
    let mut c = Raw::connect(&s.path);
    c.greeting();
    std::thread::sleep(Duration::from_millis(400));
    assert!(c.closed());
}

#[test]
fn a_thousand_idle_connections_and_one_that_works() {
    let s = start(1 << 20, false, Limits::default());
    let idle: Vec<Raw> = (0..1000).map(|_| Raw::go(&s.path, true)).collect();
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 4 0 4k",
        "-c",
        "read -P 4 0 4k",
        &format!("nbd:unix:{}", s.path.display()),
    ]));
    assert_eq!(s.listener.as_ref().unwrap().connections(), 1000);
    drop(idle);
}

#[test]
fn many_requests_in_flight_are_answered_out_of_order() {
    let s = start(4 << 20, false, Limits::default());
    let mut c = Raw::go(&s.path, true);
    let n = 200u64;
    for i in 0..n {
        c.request(CMD_WRITE, 0, i, i * 4096, 4096, &vec![i as u8; 4096]);
    }
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..n {
        let mut h = [0u8; 20];
        c.0.read_exact(&mut h).unwrap();
        assert_eq!(
            u32::from_be_bytes(h[0..4].try_into().unwrap()),
            STRUCTURED_REPLY_MAGIC
        );
        seen.insert(u64::from_be_bytes(h[8..16].try_into().unwrap()));
    }
    assert_eq!(seen.len(), n as usize);
    c.request(CMD_DISC, 0, 0, 0, 0, &[]);
    assert!(c.closed());
}

#[test]
fn stop_closes_connections_and_removes_the_socket() {
    let mut s = start(1 << 20, false, Limits::default());
    let mut c = Raw::go(&s.path, false);
    s.listener.take().unwrap().stop();
    assert!(c.closed());
    assert!(!s.path.exists());
}

/// Seeded garbage: random bytes from the start, and valid sessions with
/// random bytes spliced in. No panic anywhere, and the server serves a
/// good client afterwards.
#[test]
fn random_bytes_never_panic_the_server() {
    use rand::{Rng, SeedableRng};
    static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        prev(info);
    }));
    let limits = Limits {
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let s = start(1 << 20, false, limits);
    for seed in 0..300u64 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut c = Raw::connect(&s.path);
        c.0.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut prefix: Vec<u8> = Vec::new();
        if seed % 2 == 0 {
            // A valid start: flags, then a GO, then requests.
            prefix.extend_from_slice(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes());
            if seed % 4 == 0 {
                prefix.extend_from_slice(&IHAVEOPT.to_be_bytes());
                prefix.extend_from_slice(&OPT_GO.to_be_bytes());
                prefix.extend_from_slice(&6u32.to_be_bytes());
                prefix.extend_from_slice(&[0u8; 6]);
                let r = Request {
                    flags: rng.random(),
                    typ: rng.random_range(0..10),
                    cookie: 1,
                    offset: rng.random_range(0..(2 << 20)),
                    len: rng.random_range(0..(1 << 16)),
                };
                prefix.extend_from_slice(&r.encode());
            }
        }
        let n = rng.random_range(0..4096);
        let junk: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let _ = c.0.write_all(&prefix);
        let _ = c.0.write_all(&junk);
        let mut sink = [0u8; 4096];
        let _ = c.0.read(&mut sink);
    }
    run(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 8 0 64k",
        "-c",
        "read -P 8 0 64k",
        &format!("nbd:unix:{}", s.path.display()),
    ]));
    assert_eq!(
        PANICS.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "a server thread panicked"
    );
}
