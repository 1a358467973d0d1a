//! Volumes end to end: `zfs create -V` through the real CLI and daemon,
//! served over NBD at `<run dir>/zvol/POOL/VOL` and used by real clients
//! (`nbdinfo`, `qemu-io`, `qemu-img`, `nbdcopy`) and by tarn-nbd's own
//! blocking client where a test must know exactly which request was
//! acknowledged: properties, sizes and flags; patterns, FUA, zeroing,
//! discard and flush; a 1 GiB image in and out; TRIM space accounting;
//! snapshots (served read-only with `snapdev=visible`), clones, rollback
//! under a connected client, grow and shrink, send and receive; a crash
//! test (`kill -9` of the daemon at random moments: every write
//! acknowledged before a completed flush reads back); and bad input — past
//! the end, misaligned, hostile handshakes, a client gone mid-request, a
//! thousand idle connections, a full pool.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{noise, Env, GIB, MIB};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tarn_nbd::client::Client;

const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;
const EPERM: u32 = 1;

/// A pool `tank` on a mirror of two files of `size` bytes.
fn pool(size: u64) -> Env {
    let env = Env::new();
    let (a, b) = (env.vdev("a", size), env.vdev("b", size));
    env.ok(&["zpool", "create", "tank", "mirror", &a, &b]);
    env
}

fn sock(env: &Env, name: &str) -> PathBuf {
    env.run_dir().join("zvol").join(name)
}

fn uri(env: &Env, name: &str) -> String {
    format!("nbd+unix:///?socket={}", sock(env, name).display())
}

fn qemu_path(env: &Env, name: &str) -> String {
    format!("nbd:unix:{}", sock(env, name).display())
}

/// Runs a client tool that must succeed; its stdout.
fn tool(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run a client tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `qemu-io` commands on a volume, which must all succeed (a pattern
/// that does not match fails the tool).
fn qemu_io(env: &Env, name: &str, cmds: &[&str]) -> String {
    qemu_io_with(env, name, &[], cmds)
}

/// `qemu-io -r` (a read-only open: snapshots).
fn qemu_io_ro(env: &Env, name: &str, cmds: &[&str]) -> String {
    qemu_io_with(env, name, &["-r"], cmds)
}

fn qemu_io_with(env: &Env, name: &str, opts: &[&str], cmds: &[&str]) -> String {
    let mut c = Command::new("qemu-io");
    c.args(opts).args(["-f", "raw"]);
    for cmd in cmds {
        c.args(["-c", cmd]);
    }
    c.arg(qemu_path(env, name));
    tool(&mut c)
}

/// A command that must succeed once the server has seen a client go
/// (a disconnect reaches it a moment after the client closes).
fn retry_ok(env: &Env, args: &[&str]) {
    for _ in 0..50 {
        if env.run(args).code == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    env.ok(args);
}

fn connect(env: &Env, name: &str) -> Client {
    Client::connect(&sock(env, name)).expect("connect to the volume")
}

/// [`connect`], trying again until `limit` has passed (a daemon that is
/// still starting).
fn connect_within(env: &Env, name: &str, limit: Duration) -> Client {
    let start = std::time::Instant::now();
    loop {
        match Client::connect(&sock(env, name)) {
            Ok(c) => return c,
            Err(e) if start.elapsed() > limit => panic!("connect to the volume: {e}"),
            Err(_) => {
                let _ = env.run(&["zpool", "list"]);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn num(env: &Env, prop: &str, ds: &str) -> u64 {
    env.get(prop, ds)
        .parse()
        .unwrap_or_else(|_| panic!("{prop} of {ds}"))
}

#[test]
fn volumes_are_created_listed_and_served() {
    let env = pool(1 << 30);
    env.ok(&["zfs", "set", "tarn:zvol_group=1", "tank"]);
    env.ok(&["zfs", "create", "-V", "100M", "tank/vol"]);
    env.ok(&["zfs", "create", "-s", "-b", "4k", "-V", "1G", "tank/sparse"]);
    env.ok(&[
        "zfs",
        "create",
        "-V",
        "10000",
        "-o",
        "compression=off",
        "tank/odd",
    ]);
    let list = env.ok(&[
        "zfs",
        "list",
        "-H",
        "-t",
        "volume",
        "-o",
        "name,type,volsize",
    ]);
    assert_eq!(
        list,
        "tank/odd\tvolume\t16K\ntank/sparse\tvolume\t1G\ntank/vol\tvolume\t100M\n"
    );
    assert_eq!(
        env.ok(&["zfs", "list", "-H", "-t", "filesystem", "-o", "name"]),
        "tank\n"
    );
    assert_eq!(num(&env, "volsize", "tank/vol"), 100 * MIB);
    assert_eq!(num(&env, "volblocksize", "tank/vol"), 16384);
    assert_eq!(num(&env, "volblocksize", "tank/sparse"), 4096);
    assert_eq!(
        num(&env, "volsize", "tank/odd"),
        16384,
        "rounded up to a block"
    );
    // Thick: a reservation a little over the size; sparse: none.
    let reserve = num(&env, "refreservation", "tank/vol");
    assert!(reserve > 100 * MIB && reserve < 110 * MIB, "{reserve}");
    assert!(num(&env, "used", "tank/vol") >= reserve);
    assert_eq!(num(&env, "refreservation", "tank/sparse"), 0);
    assert!(num(&env, "used", "tank/sparse") < MIB);
    // `zfs get all` shows what applies to a volume.
    let all = env.ok(&["zfs", "get", "-H", "-o", "property", "all", "tank/vol"]);
    for p in [
        "volsize",
        "volblocksize",
        "snapdev",
        "volmode",
        "compression",
        "sync",
    ] {
        assert!(all.lines().any(|l| l == p), "{p} missing from zfs get all");
    }
    for p in ["recordsize", "mountpoint", "atime", "quota", "mounted"] {
        assert!(
            !all.lines().any(|l| l == p),
            "{p} in zfs get all of a volume"
        );
    }
    let fs_all = env.ok(&["zfs", "get", "-H", "-o", "property", "all", "tank"]);
    assert!(!fs_all.lines().any(|l| l == "volsize"));
    // The socket: mode 0660, the group the property names.
    let meta = std::fs::symlink_metadata(sock(&env, "tank/vol")).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), 1);
    // What a client sees.
    let info = tool(
        Command::new("nbdinfo")
            .arg("--json")
            .arg(uri(&env, "tank/vol")),
    );
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "tank/vol");
    assert_eq!(e["export-size"], 100 * MIB);
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
        "can_cache",
    ] {
        assert_eq!(e[flag], true, "{flag}");
    }
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["block_size_preferred"], 16384);
    let info = tool(
        Command::new("nbdinfo")
            .arg("--json")
            .arg(uri(&env, "tank/sparse")),
    );
    let v: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(v["exports"][0]["block_size_preferred"], 4096);
    // Refusals, in zfs(8)'s words.
    assert!(env
        .fail(&["zfs", "create", "-b", "3000", "-V", "1M", "tank/x"])
        .contains("volblocksize"));
    assert!(env
        .fail(&["zfs", "create", "-b", "256k", "-V", "1M", "tank/x"])
        .contains("volblocksize"));
    assert!(env.fail(&["zfs", "create", "-s", "tank/x"]).contains("-V"));
    assert!(env
        .fail(&["zfs", "create", "-o", "volblocksize=8k", "tank/x"])
        .contains("does not apply"));
    assert!(env
        .fail(&["zfs", "create", "-o", "recordsize=8k", "-V", "1M", "tank/x"])
        .contains("does not apply"));
    assert!(env
        .fail(&["zfs", "create", "-V", "0", "tank/x"])
        .contains("zero"));
    assert!(env
        .fail(&["zfs", "create", "-V", "100G", "tank/x"])
        .contains("out of space"));
    assert!(env
        .fail(&["zfs", "set", "recordsize=8k", "tank/vol"])
        .contains("does not apply"));
    assert!(env
        .fail(&["zfs", "set", "volblocksize=8k", "tank/vol"])
        .contains("creation"));
    assert!(env
        .fail(&["zfs", "set", "volsize=1G", "tank"])
        .contains("does not apply"));
    assert!(env
        .fail(&["zfs", "mount", "tank/vol"])
        .contains("not applicable"));
    assert!(!env.datasets().contains(&"tank/x".to_string()));
    // Destroy takes the socket away; volmode=none serves none.
    env.ok(&["zfs", "destroy", "tank/odd"]);
    assert!(!sock(&env, "tank/odd").exists());
    env.ok(&[
        "zfs",
        "create",
        "-s",
        "-o",
        "volmode=none",
        "-V",
        "1M",
        "tank/hidden",
    ]);
    assert!(!sock(&env, "tank/hidden").exists());
    env.ok(&["zfs", "set", "volmode=default", "tank/hidden"]);
    assert!(sock(&env, "tank/hidden").exists());
    // Export removes every socket; import brings them back.
    env.ok(&["zpool", "export", "tank"]);
    assert!(!env.run_dir().join("zvol/tank").exists());
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    assert!(sock(&env, "tank/vol").exists() && sock(&env, "tank/sparse").exists());
    // So does a daemon restart.
    env.kill_daemon();
    env.ok(&["zpool", "list"]);
    assert!(sock(&env, "tank/vol").exists());
}

#[test]
fn qemu_io_patterns_fua_zeroes_discard_and_flush() {
    let env = pool(512 * MIB);
    env.ok(&["zfs", "create", "-V", "64M", "tank/vol"]);
    qemu_io(
        &env,
        "tank/vol",
        &[
            "write -P 0xab 0 4M",
            "write -f -P 0xcd 4M 64k",
            "write -z 64k 64k",
            "write -z -u 256k 128k",
            "discard 1M 1M",
            "flush",
            "read -P 0xab 0 64k",
            "read -P 0 64k 64k",
            "read -P 0xab 128k 128k",
            "read -P 0 256k 128k",
            "read -P 0xab 384k 640k",
            "read -P 0 1M 1M",
            "read -P 0xab 2M 2M",
            "read -P 0xcd 4M 64k",
            "read -P 0 5M 59M",
        ],
    );
    // Byte-granular requests are read-modify-write for the server.
    qemu_io(
        &env,
        "tank/vol",
        &[
            "write -P 0x5a 3 1000",
            "read -P 0x5a 3 1000",
            "read -P 0xab 0 3",
        ],
    );
    // The map: data, the discarded hole, data, then never written.
    let map = tool(
        Command::new("nbdinfo")
            .arg("--map")
            .arg(uri(&env, "tank/vol")),
    );
    let rows: Vec<Vec<u64>> = map
        .lines()
        .map(|l| {
            l.split_whitespace()
                .take(3)
                .map(|w| w.parse().unwrap())
                .collect()
        })
        .collect();
    let hole_at = |off: u64| {
        rows.iter()
            .find(|r| r[0] <= off && off < r[0] + r[1])
            .map(|r| r[2] & 1 == 1)
            .unwrap()
    };
    assert!(!hole_at(0));
    assert!(hole_at(MIB + 4096), "{map}");
    assert!(!hole_at(2 * MIB));
    assert!(hole_at(10 * MIB), "{map}");
    // Everything survives an export and import (written, not only logged).
    env.ok(&["zpool", "export", "tank"]);
    env.ok(&["zpool", "import", "-d", &env.vdev_dir(), "tank"]);
    qemu_io(
        &env,
        "tank/vol",
        &[
            "read -P 0xab 2M 2M",
            "read -P 0xcd 4M 64k",
            "read -P 0 1M 1M",
        ],
    );
}

#[test]
fn a_1g_image_goes_in_and_out_with_qemu_img_and_nbdcopy() {
    let env = pool(3 * GIB);
    env.ok(&["zfs", "create", "-s", "-V", "1G", "tank/vm"]);
    // A 1 GiB raw image: 48 MiB of noise in pieces spread over it, zeros
    // between (as a freshly installed guest looks).
    let img = env.dir.path().join("image.raw");
    {
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(GIB).unwrap();
        for i in 0..48u64 {
            let at = i * (GIB / 48) + (i % 7) * 4096;
            std::os::unix::fs::FileExt::write_all_at(&f, &noise(MIB as usize, i), at).unwrap();
        }
    }
    let target = uri(&env, "tank/vm");
    let img_s = img.to_str().unwrap();
    tool(
        Command::new("qemu-img").args(["convert", "-n", "-f", "raw", "-O", "raw", img_s, &target]),
    );
    tool(Command::new("qemu-img").args(["compare", "-f", "raw", "-F", "raw", img_s, &target]));
    // Only what was written takes space.
    env.ok(&["zpool", "sync", "tank"]);
    let refer = num(&env, "referenced", "tank/vm");
    assert!(refer > 40 * MIB && refer < 80 * MIB, "{refer}");
    // Out again with qemu-img, and with nbdcopy over four connections.
    let out = env.dir.path().join("out.raw");
    tool(Command::new("qemu-img").args([
        "convert",
        "-f",
        "raw",
        "-O",
        "raw",
        &target,
        out.to_str().unwrap(),
    ]));
    tool(Command::new("cmp").args([img_s, out.to_str().unwrap()]));
    std::fs::remove_file(&out).unwrap();
    tool(Command::new("nbdcopy").args(["--connections=4", &target, out.to_str().unwrap()]));
    tool(Command::new("cmp").args([img_s, out.to_str().unwrap()]));
    // And nbdcopy in, over four connections, into a second volume.
    env.ok(&["zfs", "create", "-s", "-V", "1G", "tank/vm2"]);
    tool(Command::new("nbdcopy").args(["--connections=4", img_s, &uri(&env, "tank/vm2")]));
    tool(Command::new("qemu-img").args([
        "compare",
        "-f",
        "raw",
        "-F",
        "raw",
        img_s,
        &uri(&env, "tank/vm2"),
    ]));
}

#[test]
fn trim_and_zeroing_free_space_and_thick_volumes_keep_their_reservation() {
    let env = pool(512 * MIB);
    env.ok(&[
        "zfs",
        "create",
        "-s",
        "-o",
        "compression=off",
        "-V",
        "128M",
        "tank/sp",
    ]);
    let mut c = connect(&env, "tank/sp");
    let data = noise(MIB as usize, 1);
    for i in 0..32 {
        c.write(i * MIB, &data, false).unwrap().unwrap();
    }
    c.flush().unwrap().unwrap();
    env.ok(&["zpool", "sync", "tank"]);
    let full = num(&env, "used", "tank/sp");
    assert!(full >= 32 * MIB, "{full}");
    // TRIM of 16 MiB: used drops by about that.
    c.trim(0, (16 * MIB) as u32).unwrap().unwrap();
    env.ok(&["zpool", "sync", "tank"]);
    let trimmed = num(&env, "used", "tank/sp");
    assert!(full - trimmed >= 15 * MIB, "{full} -> {trimmed}");
    // WRITE_ZEROES may punch holes; with NO_HOLE it writes zeros.
    c.zero(16 * MIB, (8 * MIB) as u32, false).unwrap().unwrap();
    env.ok(&["zpool", "sync", "tank"]);
    let zeroed = num(&env, "used", "tank/sp");
    assert!(trimmed - zeroed >= 7 * MIB, "{trimmed} -> {zeroed}");
    c.zero(24 * MIB, (4 * MIB) as u32, true).unwrap().unwrap();
    env.ok(&["zpool", "sync", "tank"]);
    let kept = num(&env, "used", "tank/sp");
    assert!(
        kept + MIB > zeroed,
        "NO_HOLE keeps the blocks: {zeroed} -> {kept}"
    );
    // A partial-block TRIM zeroes the edges and keeps the rest.
    c.write(40 * MIB, &data[..65536], false).unwrap().unwrap();
    c.trim(40 * MIB + 4096, 8192).unwrap().unwrap();
    let back = c.read(40 * MIB, 65536).unwrap().unwrap();
    assert_eq!(&back[..4096], &data[..4096]);
    assert!(back[4096..12288].iter().all(|&b| b == 0));
    assert_eq!(&back[12288..], &data[12288..65536]);
    for (off, len) in [(0, 16 * MIB), (16 * MIB, 12 * MIB)] {
        let r = c.read(off, len as u32).unwrap().unwrap();
        assert!(r.iter().all(|&b| b == 0));
    }
    // A thick volume: used stays at its reservation while it fills.
    env.ok(&["zfs", "create", "-V", "32M", "tank/thick"]);
    let reserve = num(&env, "refreservation", "tank/thick");
    let before = num(&env, "used", "tank/thick");
    let mut t = connect(&env, "tank/thick");
    for i in 0..16 {
        t.write(i * MIB, &data, false).unwrap().unwrap();
    }
    env.ok(&["zpool", "sync", "tank"]);
    let after = num(&env, "used", "tank/thick");
    assert!(
        before >= reserve && after >= reserve && after < reserve + 2 * MIB,
        "{before} {after} {reserve}"
    );
    assert!(num(&env, "usedbyrefreservation", "tank/thick") < before);
}

#[test]
fn snapshots_clones_rollback_resize_and_replication() {
    let env = pool(1 << 30);
    env.ok(&["zfs", "create", "-V", "32M", "tank/vol"]);
    qemu_io(&env, "tank/vol", &["write -P 0x11 0 8M"]);
    env.ok(&["zfs", "snapshot", "tank/vol@gold"]);
    assert!(
        !sock(&env, "tank/vol@gold").exists(),
        "snapdev=hidden by default"
    );
    env.ok(&["zfs", "set", "snapdev=visible", "tank/vol"]);
    assert!(sock(&env, "tank/vol@gold").exists());
    qemu_io(&env, "tank/vol", &["write -P 0x22 0 4M"]);
    // The snapshot: the old contents, read-only.
    qemu_io_ro(&env, "tank/vol@gold", &["read -P 0x11 0 8M"]);
    let mut s = connect(&env, "tank/vol@gold");
    assert_eq!(s.flags() & 2, 2, "READ_ONLY flag");
    assert_eq!(s.write(0, &[0u8; 512], false).unwrap(), Err(EPERM));
    drop(s);
    // New snapshots appear beside it; hidden again, they go.
    env.ok(&["zfs", "snapshot", "tank/vol@two"]);
    assert!(sock(&env, "tank/vol@two").exists());
    env.ok(&["zfs", "destroy", "tank/vol@two"]);
    assert!(!sock(&env, "tank/vol@two").exists());
    // A clone per guest, served at once, writable, independent.
    env.ok(&["zfs", "clone", "tank/vol@gold", "tank/guest1"]);
    assert_eq!(env.get("type", "tank/guest1"), "volume");
    assert_eq!(env.get("origin", "tank/guest1"), "tank/vol@gold");
    qemu_io(
        &env,
        "tank/guest1",
        &["read -P 0x11 0 8M", "write -P 0x33 0 1M"],
    );
    qemu_io(
        &env,
        "tank/vol",
        &["read -P 0x22 0 4M", "read -P 0x11 4M 4M"],
    );
    // Rollback under a connected client: it reads the old contents
    // without reconnecting.
    let mut c = connect(&env, "tank/vol");
    assert!(c.read(0, 4096).unwrap().unwrap().iter().all(|&b| b == 0x22));
    env.ok(&["zfs", "rollback", "tank/vol@gold"]);
    assert!(c.read(0, 4096).unwrap().unwrap().iter().all(|&b| b == 0x11));
    c.write(0, &[0x44; 4096], true).unwrap().unwrap();
    drop(c);
    // Grow: the size, the reservation and the new end (zeros).
    let reserve = num(&env, "refreservation", "tank/vol");
    env.ok(&["zfs", "set", "volsize=64M", "tank/vol"]);
    assert_eq!(num(&env, "volsize", "tank/vol"), 64 * MIB);
    assert!(num(&env, "refreservation", "tank/vol") > reserve + 31 * MIB);
    let info = tool(
        Command::new("nbdinfo")
            .arg("--size")
            .arg(uri(&env, "tank/vol")),
    );
    assert_eq!(info.trim(), (64 * MIB).to_string());
    qemu_io(
        &env,
        "tank/vol",
        &["read -P 0 32M 32M", "write -P 0x55 60M 1M"],
    );
    // Shrink: refused while a client is connected, done after.
    let c = connect(&env, "tank/vol");
    assert!(env
        .fail(&["zfs", "set", "volsize=16M", "tank/vol"])
        .contains("in use"));
    drop(c);
    retry_ok(&env, &["zfs", "set", "volsize=16M", "tank/vol"]);
    assert_eq!(num(&env, "volsize", "tank/vol"), 16 * MIB);
    qemu_io(
        &env,
        "tank/vol",
        &["read -P 0x44 0 4k", "read -P 0x11 4k 8188k"],
    );
    // A destroy of a volume in use is refused without -f.
    let c = connect(&env, "tank/guest1");
    assert!(env
        .fail(&["zfs", "destroy", "tank/guest1"])
        .contains("in use"));
    env.ok(&["zfs", "destroy", "-f", "tank/guest1"]);
    drop(c);
    // Send and receive: full, then incremental, into a served volume.
    env.ok(&["zfs", "snapshot", "tank/vol@s1"]);
    let stream = env.dir.path().join("s1.stream");
    let f = std::fs::File::create(&stream).unwrap();
    assert!(env
        .cmd(&["zfs", "send", "tank/vol@s1"])
        .stdout(f)
        .status()
        .unwrap()
        .success());
    let f = std::fs::File::open(&stream).unwrap();
    assert!(env
        .cmd(&["zfs", "receive", "tank/copy"])
        .stdin(f)
        .status()
        .unwrap()
        .success());
    assert_eq!(env.get("type", "tank/copy"), "volume");
    assert_eq!(num(&env, "volsize", "tank/copy"), 16 * MIB);
    qemu_io(
        &env,
        "tank/copy",
        &["read -P 0x44 0 4k", "read -P 0x11 4k 8188k"],
    );
    qemu_io(&env, "tank/vol", &["write -P 0x66 1M 1M"]);
    env.ok(&["zfs", "snapshot", "tank/vol@s2"]);
    let f = std::fs::File::create(&stream).unwrap();
    assert!(env
        .cmd(&["zfs", "send", "-i", "@s1", "tank/vol@s2"])
        .stdout(f)
        .status()
        .unwrap()
        .success());
    let mut reader = connect(&env, "tank/copy");
    let f = std::fs::File::open(&stream).unwrap();
    assert!(env
        .cmd(&["zfs", "receive", "tank/copy"])
        .stdin(f)
        .status()
        .unwrap()
        .success());
    assert!(reader
        .read(MIB, 4096)
        .unwrap()
        .unwrap()
        .iter()
        .all(|&b| b == 0x66));
    // A volume stream does not land on a filesystem.
    env.ok(&["zfs", "create", "tank/fs"]);
    env.ok(&["zfs", "snapshot", "tank/fs@s1"]);
    let f = std::fs::File::open(&stream).unwrap();
    let out = env
        .cmd(&["zfs", "receive", "-F", "tank/fs"])
        .stdin(f)
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Nor a full one, even forced; and a filesystem's not on a volume.
    let recv_f = |stream: &std::path::Path, target: &str| {
        let f = std::fs::File::open(stream).unwrap();
        let out = env
            .cmd(&["zfs", "receive", "-F", target])
            .stdin(f)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let full = env.dir.path().join("full.stream");
    let send_to = |snap: &str| {
        let f = std::fs::File::create(&full).unwrap();
        assert!(env
            .cmd(&["zfs", "send", snap])
            .stdout(f)
            .status()
            .unwrap()
            .success());
    };
    send_to("tank/vol@s2");
    env.ok(&["zfs", "create", "tank/fs2"]);
    let err = recv_f(&full, "tank/fs2");
    assert!(
        err.contains("is a filesystem and the stream is of a volume"),
        "{err}"
    );
    send_to("tank/fs@s1");
    env.ok(&["zfs", "create", "-s", "-V", "1M", "tank/v2"]);
    let err = recv_f(&full, "tank/v2");
    assert!(
        err.contains("is a volume and the stream is of a filesystem"),
        "{err}"
    );
    assert_eq!(env.get("type", "tank/fs2"), "filesystem");
    assert_eq!(env.get("type", "tank/v2"), "volume");
    // Rename moves the socket (refused while a client is connected).
    assert!(env
        .fail(&["zfs", "rename", "tank/copy", "tank/copy2"])
        .contains("in use"));
    drop(reader);
    retry_ok(&env, &["zfs", "rename", "tank/copy", "tank/copy2"]);
    assert!(!sock(&env, "tank/copy").exists());
    qemu_io(&env, "tank/copy2", &["read -P 0x66 1M 1M"]);
}

/// `kill -9` of the daemon while a client writes: every write that a
/// completed flush (or FUA) covered reads back after the restart; writes
/// after the last flush may or may not be there, but each block holds one
/// of the values written to it, never anything else.
#[test]
fn acknowledged_flushes_survive_kill_9() {
    let env = pool(512 * MIB);
    env.ok(&["zfs", "create", "-V", "16M", "tank/vol"]);
    const BLOCK: usize = 4096;
    const BLOCKS: u64 = 16 * MIB / BLOCK as u64;
    let seeds = tarn_testkit::seeds(0, 4);
    // Per block: the value durable for sure, and every value written since.
    let mut durable: Vec<u64> = vec![0; BLOCKS as usize];
    let mut pending: Vec<Vec<u64>> = vec![Vec::new(); BLOCKS as usize];
    let fill = |v: u64| -> Vec<u8> {
        let mut b = vec![0u8; BLOCK];
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(v ^ i as u64).to_le_bytes());
        }
        b
    };
    let decode = |b: &[u8]| -> Option<u64> {
        let v = u64::from_le_bytes(b[..8].try_into().unwrap());
        (fill(v) == b).then_some(v)
    };
    let mut value = 1u64;
    for seed in seeds {
        let round = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut c = connect(&env, "tank/vol");
            let kill_after = rng.random_range(50..400);
            let pid = env.daemon_pid().unwrap();
            let mut n = 0;
            loop {
                if n == kill_after {
                    // SAFETY: kill(2) of our own daemon.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                n += 1;
                let b = rng.random_range(0..BLOCKS);
                let r = match rng.random_range(0..10) {
                    0..=6 => {
                        value += 1;
                        let fua = rng.random_range(0..8) == 0;
                        pending[b as usize].push(value);
                        match c.write(b * BLOCK as u64, &fill(value), fua) {
                            Ok(Ok(())) if fua => {
                                durable[b as usize] = value;
                                pending[b as usize].clear();
                                Ok(())
                            }
                            Ok(Ok(())) => Ok(()),
                            Ok(Err(e)) => panic!("write failed: {e}"),
                            Err(e) => Err(e),
                        }
                    }
                    7..=8 => match c.flush() {
                        Ok(Ok(())) => {
                            for (d, p) in durable.iter_mut().zip(pending.iter_mut()) {
                                if let Some(&last) = p.last() {
                                    *d = last;
                                }
                                p.clear();
                            }
                            Ok(())
                        }
                        Ok(Err(e)) => panic!("flush failed: {e}"),
                        Err(e) => Err(e),
                    },
                    _ => c.read(b * BLOCK as u64, BLOCK as u32).map(|_| ()),
                };
                if r.is_err() {
                    break;
                }
            }
            drop(c);
            // The daemon restarts with the next command and replays; on
            // a loaded machine that command may give up waiting before
            // the daemon serves, so the volume's socket is waited for.
            let _ = env.run(&["zpool", "list"]);
            let mut c = connect_within(&env, "tank/vol", Duration::from_secs(30));
            for b in 0..BLOCKS {
                let got = c.read(b * BLOCK as u64, BLOCK as u32).unwrap().unwrap();
                let v = if got.iter().all(|&x| x == 0) {
                    0
                } else {
                    decode(&got).unwrap_or_else(|| panic!("block {b} holds garbage"))
                };
                let d = durable[b as usize];
                let ok = v == d || pending[b as usize].contains(&v);
                assert!(
                    ok,
                    "block {b}: read {v}, durable {d}, pending {:?}",
                    pending[b as usize]
                );
                durable[b as usize] = v;
                pending[b as usize].clear();
            }
        }));
        if let Err(panic) = round {
            eprintln!(
                "{}",
                tarn_testkit::replay_line("acknowledged_flushes_survive_kill_9", seed)
            );
            std::panic::resume_unwind(panic);
        }
    }
}

/// Speaks raw bytes to a volume's socket.
fn raw(env: &Env, name: &str) -> UnixStream {
    let s = UnixStream::connect(sock(env, name)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn closed(s: &mut UnixStream) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

#[test]
fn bad_input_gets_clear_errors_and_everything_keeps_serving() {
    let env = pool(256 * MIB);
    env.ok(&["zfs", "create", "-s", "-V", "1G", "tank/big"]);
    env.ok(&["zfs", "create", "-V", "8M", "tank/other"]);
    qemu_io(&env, "tank/other", &["write -P 0x77 0 8M"]);
    let mut c = connect(&env, "tank/big");
    // Past the end: EINVAL for reads and trims, ENOSPC for writes.
    assert_eq!(c.read(GIB, 512).unwrap(), Err(EINVAL));
    assert_eq!(c.read(GIB - 512, 1024).unwrap(), Err(EINVAL));
    assert_eq!(
        c.write(GIB - 512, &[1u8; 1024], false).unwrap(),
        Err(ENOSPC)
    );
    assert_eq!(c.trim(u64::MAX - 100, 512).unwrap(), Err(EINVAL));
    // Misaligned (the client asked for block sizes) and oversized.
    assert_eq!(c.write(7, &[1u8; 512], false).unwrap(), Err(EINVAL));
    assert_eq!(c.read(0, (32 << 20) + 512).unwrap(), Err(EINVAL));
    // The connection still works.
    c.write(4096, &[3u8; 4096], false).unwrap().unwrap();
    assert!(c.read(4096, 4096).unwrap().unwrap() == vec![3u8; 4096]);
    // A full pool: ENOSPC on the wire, nothing else harmed.
    let data = noise(4 * MIB as usize, 9);
    let mut full = false;
    for i in 1..256u64 {
        match c.write(i * 4 * MIB, &data, false).unwrap() {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e, ENOSPC);
                full = true;
                break;
            }
        }
    }
    assert!(full, "a 1 GiB sparse volume on a 256 MiB pool fills it");
    c.flush().unwrap().unwrap();
    assert!(c.read(4096, 4096).unwrap().unwrap() == vec![3u8; 4096]);
    qemu_io(&env, "tank/other", &["read -P 0x77 0 8M"]);
    // Space comes back with TRIM, and writes work again.
    c.trim(4 * MIB, (64 * MIB) as u32).unwrap().unwrap();
    env.ok(&["zpool", "sync", "tank"]);
    c.write(0, &data, false).unwrap().unwrap();
    drop(c);
    // Hostile handshakes: garbage, a huge option, a lie inside one.
    let mut s = raw(&env, "tank/big");
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello).unwrap();
    s.write_all(&[0xff; 64]).unwrap();
    assert!(closed(&mut s));
    let mut s = raw(&env, "tank/big");
    s.read_exact(&mut hello).unwrap();
    s.write_all(&1u32.to_be_bytes()).unwrap();
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&7u32.to_be_bytes());
    opt.extend_from_slice(&u32::MAX.to_be_bytes());
    s.write_all(&opt).unwrap();
    assert!(closed(&mut s));
    // A client gone in the middle of a write payload.
    let mut s = raw(&env, "tank/big");
    s.read_exact(&mut hello).unwrap();
    drop(s);
    {
        let c = connect(&env, "tank/big");
        drop(c);
        let mut s = UnixStream::connect(sock(&env, "tank/big")).unwrap();
        s.read_exact(&mut hello).unwrap();
        s.write_all(&3u32.to_be_bytes()).unwrap();
        let mut go = Vec::new();
        go.extend_from_slice(b"IHAVEOPT");
        go.extend_from_slice(&7u32.to_be_bytes());
        go.extend_from_slice(&6u32.to_be_bytes());
        go.extend_from_slice(&[0u8; 6]);
        s.write_all(&go).unwrap();
        let mut reply = vec![0u8; 20 + 12 + 20 + 14 + 20];
        s.read_exact(&mut reply).unwrap();
        let req = tarn_nbd::proto::Request {
            flags: 0,
            typ: 1,
            cookie: 1,
            offset: 0,
            len: 65536,
        };
        s.write_all(&req.encode()).unwrap();
        s.write_all(&[9u8; 1000]).unwrap();
    }
    // A thousand idle connections, and one that works.
    let idle: Vec<Client> = (0..1000).map(|_| connect(&env, "tank/big")).collect();
    qemu_io(
        &env,
        "tank/other",
        &["read -P 0x77 0 8M", "write -P 0x78 0 4k"],
    );
    let mut c = connect(&env, "tank/big");
    assert!(c.read(0, 4096).unwrap().unwrap() == data[..4096]);
    drop(idle);
    // The daemon said what happened.
    let log = std::fs::read_to_string(env.run_dir().join("daemon.log")).unwrap_or_default();
    assert!(log.contains("nbd tank/big"), "{log}");
    // Nothing on disk is hurt.
    env.ok(&["zpool", "scrub", "-w", "tank"]);
    let status = env.ok(&["zpool", "status", "tank"]);
    assert!(
        status.contains("No known data errors") || status.contains("errors: No known"),
        "{status}"
    );
}
