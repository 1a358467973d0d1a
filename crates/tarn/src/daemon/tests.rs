//! The daemon served in-process on a temporary socket, against an in-memory
//! fake backend: real sockets, real threads, real shutdown.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::*;
use crate::api::*;
use crate::client::Client;

/// Pools by name, each with its datasets.
#[derive(Default)]
struct FakeBackend {
    pools: Mutex<BTreeMap<String, Vec<String>>>,
    startups: AtomicUsize,
    shutdowns: AtomicUsize,
}

impl FakeBackend {
    fn known(&self, pool: &str) -> Result<(), BackendError> {
        if self.pools.lock().contains_key(pool) {
            Ok(())
        } else {
            Err(BackendError::NoSuchPool(pool.to_string()))
        }
    }
}

impl Backend for FakeBackend {
    fn startup(&self) -> Result<(), BackendError> {
        self.startups.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn shutdown(&self) -> Result<(), BackendError> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn zpool_create(&self, a: ZpoolCreate) -> Result<(), BackendError> {
        let mut pools = self.pools.lock();
        if pools.contains_key(&a.name) {
            return Err(BackendError::PoolExists(a.name));
        }
        if !a.dry_run {
            pools.insert(a.name.clone(), vec![a.name]);
        }
        Ok(())
    }
    fn zpool_destroy(&self, a: ZpoolDestroy) -> Result<(), BackendError> {
        self.pools
            .lock()
            .remove(&a.name)
            .map(|_| ())
            .ok_or(BackendError::NoSuchPool(a.name))
    }
    fn zpool_list(&self, a: ZpoolList) -> Result<Vec<PoolListRow>, BackendError> {
        let pools = self.pools.lock();
        for name in &a.names {
            if !pools.contains_key(name) {
                return Err(BackendError::NoSuchPool(name.clone()));
            }
        }
        Ok(pools
            .keys()
            .filter(|n| a.names.is_empty() || a.names.contains(n))
            .map(|n| PoolListRow {
                name: n.clone(),
                health: "ONLINE".into(),
                dedup: 1.0,
                ..Default::default()
            })
            .collect())
    }
    fn zpool_status(&self, _: ZpoolStatus) -> Result<Vec<PoolStatus>, BackendError> {
        Ok(vec![])
    }
    fn zpool_get(&self, _: ZpoolGet) -> Result<Vec<PropRow>, BackendError> {
        Ok(vec![])
    }
    fn zpool_set(&self, _: ZpoolSet) -> Result<(), BackendError> {
        Ok(())
    }
    fn zpool_import_scan(&self, _: ZpoolImportScan) -> Result<Vec<ImportablePool>, BackendError> {
        Ok(vec![])
    }
    fn zpool_add(&self, a: ZpoolAdd) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_remove(&self, a: ZpoolRemove) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_detach(&self, a: ZpoolDetach) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_attach(&self, a: ZpoolAttach) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_scrub(&self, a: ZpoolScrub) -> Result<(), BackendError> {
        a.names.iter().try_for_each(|n| self.known(n))
    }
    fn zpool_offline(&self, a: ZpoolOffline) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_online(&self, a: ZpoolOnline) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_clear(&self, a: ZpoolClear) -> Result<(), BackendError> {
        self.known(&a.name)
    }
    fn zpool_sync(&self, a: ZpoolSync) -> Result<(), BackendError> {
        a.names.iter().try_for_each(|n| self.known(n))
    }
    fn zpool_iostat(&self, _: ZpoolIostat) -> Result<Vec<PoolIostat>, BackendError> {
        Ok(vec![])
    }
    fn zpool_import(&self, a: ZpoolImport) -> Result<String, BackendError> {
        Err(BackendError::NoSuchPool(a.pool))
    }
    fn zpool_export(&self, a: ZpoolExport) -> Result<(), BackendError> {
        self.zpool_destroy(ZpoolDestroy {
            name: a.name,
            force: a.force,
        })
    }
    fn zpool_history(&self, _: ZpoolHistory) -> Result<Vec<PoolHistory>, BackendError> {
        Ok(vec![])
    }
    fn zfs_create(&self, a: ZfsCreate) -> Result<(), BackendError> {
        let pool = a.name.split('/').next().unwrap_or_default().to_string();
        let mut pools = self.pools.lock();
        let datasets = pools
            .get_mut(&pool)
            .ok_or_else(|| BackendError::NoSuchPool(pool.clone()))?;
        if datasets.contains(&a.name) {
            return Err(BackendError::DatasetExists(a.name));
        }
        datasets.push(a.name);
        Ok(())
    }
    fn zfs_destroy(&self, _: ZfsDestroy) -> Result<DestroyReport, BackendError> {
        Ok(DestroyReport::default())
    }
    fn zfs_snapshot(&self, _: ZfsSnapshot) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_rollback(&self, _: ZfsRollback) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_clone(&self, _: ZfsClone) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_promote(&self, _: ZfsPromote) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_rename(&self, _: ZfsRename) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_hold(&self, _: ZfsHold) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_holds(&self, _: ZfsHolds) -> Result<Vec<HoldRow>, BackendError> {
        Ok(Vec::new())
    }
    fn zfs_bookmark(&self, _: ZfsBookmark) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_diff(&self, _: ZfsDiff) -> Result<Vec<DiffRow>, BackendError> {
        Ok(Vec::new())
    }
    fn zfs_send(&self, _: ZfsSend) -> Result<Vec<String>, BackendError> {
        Ok(Vec::new())
    }
    fn zfs_receive(&self, _: ZfsReceive) -> Result<Vec<String>, BackendError> {
        Ok(Vec::new())
    }
    fn zfs_list(&self, _: ZfsList) -> Result<Vec<DatasetRow>, BackendError> {
        let pools = self.pools.lock();
        Ok(pools
            .values()
            .flatten()
            .map(|name| DatasetRow {
                name: name.clone(),
                typ: "filesystem".into(),
                props: BTreeMap::new(),
            })
            .collect())
    }
    fn zfs_get(&self, _: ZfsGet) -> Result<Vec<PropRow>, BackendError> {
        Ok(vec![])
    }
    fn zfs_set(&self, _: ZfsSet) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_inherit(&self, _: ZfsInherit) -> Result<(), BackendError> {
        Ok(())
    }
    fn zfs_mount(&self, _: ZfsMount) -> Result<Vec<MountRow>, BackendError> {
        Ok(Vec::new())
    }
    fn zfs_unmount(&self, _: ZfsUnmount) -> Result<(), BackendError> {
        Ok(())
    }
    fn zinject_add(&self, a: ZinjectAdd) -> Result<InjectHandler, BackendError> {
        self.known(&a.pool)?;
        Err(BackendError::Invalid("no devices in a fake pool".into()))
    }
    fn zinject_list(&self, _: ZinjectList) -> Result<Vec<InjectHandler>, BackendError> {
        Ok(Vec::new())
    }
    fn zinject_clear(&self, _: ZinjectClear) -> Result<u64, BackendError> {
        Ok(0)
    }
    fn zilstat(&self, _: Zilstat) -> Result<Vec<ZilstatRow>, BackendError> {
        Ok(Vec::new())
    }
}

/// A daemon serving on a fresh temporary directory.
struct Running {
    /// Kept so the directory outlives the daemon.
    _dir: tempfile::TempDir,
    paths: Paths,
    backend: Arc<FakeBackend>,
    handle: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<Result<(), DaemonError>>>,
}

impl Running {
    fn start() -> Running {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("run");
        let paths = Paths::in_dir(
            run_dir.clone(),
            run_dir.join("tarn.sock"),
            dir.path().join("tarn.cache"),
        );
        let backend = Arc::new(FakeBackend::default());
        let server = Server::bind(&paths, backend.clone()).unwrap();
        let handle = server.shutdown_handle();
        let thread = Some(std::thread::spawn(move || server.run()));
        Running {
            _dir: dir,
            paths,
            backend,
            handle,
            thread,
        }
    }

    fn client(&self) -> Client {
        Client::connect(&self.paths.socket).unwrap()
    }

    /// Wait for the server thread; it must have stopped cleanly.
    fn join(&mut self) {
        let thread = self.thread.take().expect("joined twice");
        thread.join().unwrap().unwrap();
        assert_eq!(self.backend.shutdowns.load(Ordering::SeqCst), 1);
        assert!(!self.paths.socket.exists(), "socket file left behind");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.handle.trigger();
            let _ = thread.join();
        }
    }
}

fn pool_create(name: &str, vdevs: Vec<VdevGroup>) -> Request {
    Request::ZpoolCreate(ZpoolCreate {
        name: name.into(),
        vdevs,
        props: vec![],
        fs_props: vec![],
        mountpoint: None,
        force: false,
        dry_run: false,
    })
}

fn disk(path: &str) -> VdevGroup {
    VdevGroup {
        kind: VdevKind::Disk,
        devices: vec![path.into()],
    }
}

#[test]
fn serves_requests_and_shuts_down_on_request() {
    let mut daemon = Running::start();
    let mode = fs::metadata(&daemon.paths.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    let dir_mode = fs::metadata(&daemon.paths.run_dir)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o711);

    let mut client = daemon.client();
    let pong = client.call(&Request::Ping {}).unwrap();
    assert!(pong.ok);
    assert_eq!(pong.data["pid"], std::process::id());
    assert_eq!(daemon.backend.startups.load(Ordering::SeqCst), 1);

    // Several requests on one connection, in turn.
    let created = client
        .call(&pool_create("tank", vec![disk("/tmp/a")]))
        .unwrap();
    assert!(created.ok, "{created:?}");
    let again = client
        .call(&pool_create("tank", vec![disk("/tmp/b")]))
        .unwrap();
    assert_eq!(
        again.error.as_deref(),
        Some("cannot create 'tank': pool already exists")
    );
    let missing = client
        .call(&Request::ZpoolList(ZpoolList {
            names: vec!["nosuch".into()],
        }))
        .unwrap();
    assert_eq!(
        missing.error.as_deref(),
        Some("cannot open 'nosuch': no such pool")
    );
    let list = client
        .call(&Request::ZpoolList(ZpoolList { names: vec![] }))
        .unwrap();
    let rows: Vec<PoolListRow> = serde_json::from_value(list.data).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].name, "tank");

    // Validation happens before the backend: bad names, bad layouts.
    let bad = client
        .call(&pool_create("mirror0", vec![disk("/tmp/c")]))
        .unwrap();
    assert!(bad.error.unwrap().starts_with("cannot create 'mirror0'"));
    let mismatched = vec![
        VdevGroup {
            kind: VdevKind::Mirror,
            devices: vec!["/a".into(), "/b".into()],
        },
        disk("/c"),
    ];
    let bad = client.call(&pool_create("other", mismatched)).unwrap();
    assert!(bad.error.unwrap().contains("mismatched replication level"));
    assert_eq!(daemon.backend.pools.lock().len(), 1);

    // An idle second connection is closed by the shutdown, not left hanging.
    let idle = UnixStream::connect(&daemon.paths.socket).unwrap();
    let stop = client.call(&Request::Shutdown {}).unwrap();
    assert!(stop.ok);
    daemon.join();
    // End of file, or a reset if it was never accepted: either way, closed.
    let mut rest = String::new();
    let closed = BufReader::new(idle).read_line(&mut rest);
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
}

#[test]
fn malformed_and_overlong_lines_get_errors() {
    let mut daemon = Running::start();
    let stream = UnixStream::connect(&daemon.paths.socket).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = &stream;
    let mut ask = |line: &[u8]| {
        writer.write_all(line).unwrap();
        let mut answer = String::new();
        reader.read_line(&mut answer).unwrap();
        serde_json::from_str::<Response>(&answer).unwrap()
    };
    let r = ask(b"not json\n");
    assert!(r.error.unwrap().starts_with("invalid request"));
    let r = ask(b"{\"op\":\"zpool_list\",\"names\":[],\"colour\":\"red\"}\n");
    assert!(r.error.unwrap().contains("unknown field"));
    let r = ask(b"{\"op\":\"zfs_create\",\"name\":\"tank/a b/../c\"}\n");
    assert!(r.error.unwrap().starts_with("cannot create"));
    let long = vec![b'x'; REQUEST_LINE_BYTES_MAX];
    let r = ask(&long);
    assert_eq!(
        r.error.unwrap(),
        format!("request line longer than {REQUEST_LINE_BYTES_MAX} bytes")
    );
    // The connection is closed after an overlong line.
    let mut rest = String::new();
    assert_eq!(reader.read_line(&mut rest).unwrap(), 0);
    daemon.handle.trigger();
    daemon.join();
}

#[test]
fn a_second_daemon_is_refused_while_the_first_runs() {
    let mut daemon = Running::start();
    let second = Server::bind(&daemon.paths, Arc::new(FakeBackend::default()));
    assert!(matches!(second, Err(DaemonError::AlreadyRunning(_))));
    // The refused daemon did not disturb the running one's socket.
    assert!(daemon.client().call(&Request::Ping {}).unwrap().ok);
    daemon.handle.trigger();
    daemon.join();
    // Once the first is gone, a new one may start on the same paths.
    let third = Server::bind(&daemon.paths, Arc::new(FakeBackend::default())).unwrap();
    drop(third);
    assert!(!daemon.paths.socket.exists());
}

#[test]
fn connections_beyond_the_limit_are_turned_away() {
    let mut daemon = Running::start();
    let mut open: Vec<Client> = (0..CONNECTIONS_MAX).map(|_| daemon.client()).collect();
    for client in &mut open {
        assert!(client.call(&Request::Ping {}).unwrap().ok);
    }
    let mut extra = daemon.client();
    let busy = extra.call(&Request::Ping {});
    match busy {
        Ok(r) => assert!(r.error.unwrap().contains("busy"), "accepted past the limit"),
        // The daemon may close before reading our ping; the busy line was sent.
        Err(e) => assert!(
            e.reason.contains("closed") || e.reason.contains("send"),
            "{e}"
        ),
    }
    drop(open.pop());
    daemon.handle.trigger();
    daemon.join();
}

#[test]
fn stale_socket_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::in_dir(
        dir.path().to_path_buf(),
        dir.path().join("tarn.sock"),
        dir.path().join("cache"),
    );
    fs::write(&paths.socket, b"left by a crashed daemon").unwrap();
    let server = Server::bind(&paths, Arc::new(FakeBackend::default())).unwrap();
    assert!(Client::connect(&paths.socket).is_ok());
    drop(server);
    assert!(!paths.socket.exists());
}

#[test]
fn line_reader_limits() {
    let mut buf = Vec::new();
    let mut input: &[u8] = b"abc\ndef";
    assert_eq!(
        read_line_limited(&mut input, &mut buf, 8).unwrap(),
        LineRead::Line
    );
    assert_eq!(buf, b"abc");
    assert_eq!(
        read_line_limited(&mut input, &mut buf, 8).unwrap(),
        LineRead::Line
    );
    assert_eq!(buf, b"def");
    assert_eq!(
        read_line_limited(&mut input, &mut buf, 8).unwrap(),
        LineRead::Eof
    );
    let mut input: &[u8] = b"0123456789\n";
    assert_eq!(
        read_line_limited(&mut input, &mut buf, 4).unwrap(),
        LineRead::TooLong
    );
    // Exactly at the limit, newline included, is fine.
    let mut input: &[u8] = b"012\n";
    assert_eq!(
        read_line_limited(&mut input, &mut buf, 4).unwrap(),
        LineRead::Line
    );
}
