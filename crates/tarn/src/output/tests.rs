//! Golden-text tests: each expected string is written by hand from
//! OpenZFS 2.x output, not produced by the code under test.

use super::*;
use crate::api::{InjectIoType, PropValue};

fn tank_row() -> PoolListRow {
    PoolListRow {
        name: "tank".into(),
        size: 2 << 30,
        alloc: 1 << 20,
        free: (2 << 30) - (1 << 20),
        ckpoint: None,
        expandsz: None,
        frag: Some(0),
        cap: 0,
        dedup: 1.0,
        health: "ONLINE".into(),
        altroot: None,
        guid: 1234,
        txg: 4,
        vdevs: vec![],
    }
}

fn cols(spec: &str) -> Vec<PoolColumn> {
    spec.split(',')
        .map(|c| PoolColumn::parse(c).unwrap())
        .collect()
}

const HUMAN: TableStyle = TableStyle {
    scripted: false,
    parsable: false,
};

#[test]
fn zpool_list_default_columns() {
    let got = pool_list(&[tank_row()], &cols(POOL_LIST_DEFAULT), HUMAN, false);
    let want = "\
NAME   SIZE  ALLOC   FREE  CKPOINT  EXPANDSZ   FRAG    CAP  DEDUP    HEALTH  ALTROOT
tank     2G     1M  2.00G        -         -     0%     0%  1.00x    ONLINE  -
";
    assert_eq!(got, want);
}

#[test]
fn zpool_list_scripted_parsable_and_selected_columns() {
    let style = TableStyle {
        scripted: true,
        parsable: true,
    };
    let got = pool_list(
        &[tank_row()],
        &cols("name,size,cap,dedup,health"),
        style,
        false,
    );
    assert_eq!(got, "tank\t2147483648\t0\t1.00\tONLINE\n");
}

#[test]
fn zpool_list_verbose_shows_vdevs_and_logs() {
    let leaf = |name: &str| VdevListRow {
        name: name.into(),
        health: "ONLINE".into(),
        ..Default::default()
    };
    let mut row = tank_row();
    row.vdevs = vec![
        VdevListRow {
            name: "mirror-0".into(),
            size: Some(2 << 30),
            health: "ONLINE".into(),
            children: vec![leaf("/tmp/a"), leaf("/tmp/b")],
            ..Default::default()
        },
        VdevListRow {
            class: VdevClass::Log,
            size: Some(1 << 30),
            ..leaf("/tmp/l")
        },
    ];
    let got = pool_list(&[row], &cols("name,size,health"), HUMAN, true);
    let want = "\
NAME         SIZE    HEALTH
tank           2G    ONLINE
  mirror-0     2G    ONLINE
    /tmp/a      -    ONLINE
    /tmp/b      -    ONLINE
logs            -         -
  /tmp/l       1G    ONLINE
";
    assert_eq!(got, want);
}

fn node(name: &str, state: &str, children: Vec<VdevStatusNode>) -> VdevStatusNode {
    VdevStatusNode {
        name: name.into(),
        state: state.into(),
        children,
        ..Default::default()
    }
}

fn mirror_pool() -> PoolStatus {
    PoolStatus {
        name: "tank".into(),
        state: "ONLINE".into(),
        guid: 1234,
        config: node(
            "tank",
            "ONLINE",
            vec![node(
                "mirror-0",
                "ONLINE",
                vec![
                    node("/tmp/a", "ONLINE", vec![]),
                    node("/tmp/b", "ONLINE", vec![]),
                ],
            )],
        ),
        logs: vec![node("/tmp/l", "ONLINE", vec![])],
        ..Default::default()
    }
}

#[test]
fn zpool_status_healthy_mirror_with_log() {
    let got = pool_status(&mirror_pool(), false, false, 0);
    let want = "  pool: tank
 state: ONLINE
config:

\tNAME        STATE     READ WRITE CKSUM
\ttank        ONLINE       0     0     0
\t  mirror-0  ONLINE       0     0     0
\t    /tmp/a  ONLINE       0     0     0
\t    /tmp/b  ONLINE       0     0     0
\tlogs\t
\t  /tmp/l    ONLINE       0     0     0

errors: No known data errors
";
    assert_eq!(got, want);
    assert!(!pool_needs_attention(&mirror_pool()));
}

#[test]
fn zpool_status_degraded_with_counters_and_notes() {
    let mut pool = mirror_pool();
    pool.logs.clear();
    pool.state = "DEGRADED".into();
    pool.status = Some(
        "One or more devices could not be opened.  Sufficient replicas exist for\n\
         the pool to continue functioning in a degraded state."
            .into(),
    );
    pool.action = Some("Attach the missing device and online it using 'zpool online'.".into());
    pool.config.state = "DEGRADED".into();
    pool.config.children[0].state = "DEGRADED".into();
    let bad = &mut pool.config.children[0].children[1];
    bad.state = "UNAVAIL".into();
    bad.cksum = 3;
    bad.note = Some("cannot open".into());
    pool.error_count = 2;
    let got = pool_status(&pool, false, false, 0);
    let want = "  pool: tank
 state: DEGRADED
status: One or more devices could not be opened.  Sufficient replicas exist for
\tthe pool to continue functioning in a degraded state.
action: Attach the missing device and online it using 'zpool online'.
config:

\tNAME        STATE     READ WRITE CKSUM
\ttank        DEGRADED     0     0     0
\t  mirror-0  DEGRADED     0     0     0
\t    /tmp/a  ONLINE       0     0     0
\t    /tmp/b  UNAVAIL      0     0     3  cannot open

errors: 2 data errors, use '-v' for a list
";
    assert_eq!(got, want);
    assert!(pool_needs_attention(&pool));
}

#[test]
fn zpool_status_name_column_grows_with_long_paths() {
    let pool = PoolStatus {
        name: "tank".into(),
        state: "ONLINE".into(),
        config: node(
            "tank",
            "ONLINE",
            vec![node("/data/disk-a.img", "ONLINE", vec![])],
        ),
        ..Default::default()
    };
    let got = pool_status(&pool, false, false, 0);
    assert!(
        got.contains("\tNAME                STATE     READ WRITE CKSUM\n"),
        "{got}"
    );
    assert!(
        got.contains("\t  /data/disk-a.img  ONLINE       0     0     0\n"),
        "{got}"
    );
}

#[test]
fn scan_lines() {
    assert_eq!(duration_text(3661), "01:01:01");
    assert_eq!(duration_text(2 * 86_400 + 5), "2 days 00:00:05");
    let scan = ScanStatus {
        function: ScanFunction::Scrub,
        state: ScanState::Scanning,
        start_time: 1000,
        examined: 100 << 20,
        issued: 50 << 20,
        to_examine: 200 << 20,
        ..Default::default()
    };
    let text = scan_text(&scan, 1010);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("scrub in progress since "));
    assert_eq!(
        lines[1],
        "100M / 200M scanned at 10M/s, 50M / 200M issued at 5M/s"
    );
    assert_eq!(lines[2], "0B repaired, 25.00% done, 00:00:30 to go");
    // Resumed at 50M issued 10 s ago: rates count this pass only.
    let resumed = ScanStatus {
        issued: 150 << 20,
        examined: 150 << 20,
        pass_start: 2000,
        pass_issued: 50 << 20,
        ..scan.clone()
    };
    let text = scan_text(&resumed, 2010);
    assert!(
        text.contains("scanned at 10M/s") && text.contains("issued at 10M/s"),
        "{text}"
    );
    assert!(text.contains("75.00% done, 00:00:05 to go"), "{text}");
    let paused = ScanStatus {
        pause_time: Some(1005),
        ..scan
    };
    let text = scan_text(&paused, 1010);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("scrub paused since "), "{text}");
    assert!(lines[1].starts_with("scrub started on "), "{text}");
    assert_eq!(lines[2], "100M / 200M scanned, 50M / 200M issued");
    assert_eq!(lines[3], "0B repaired, 25.00% done");
}

#[test]
fn permanent_errors_listed_with_v() {
    let mut pool = mirror_pool();
    pool.error_count = 1;
    pool.errors = vec!["tank/fs:<0x23>".into()];
    let short = pool_status(&pool, false, false, 0);
    assert!(
        short.ends_with("errors: 1 data errors, use '-v' for a list\n"),
        "{short}"
    );
    let long = pool_status(&pool, false, true, 0);
    assert!(
        long.ends_with(
            "errors: Permanent errors have been detected in the following files:\n\n        tank/fs:<0x23>\n"
        ),
        "{long}"
    );
}

#[test]
fn progress_bars() {
    assert_eq!(progress_bar(0, 0, 4), "[>   ]   0.00%");
    assert_eq!(progress_bar(1, 2, 4), "[==> ]  50.00%");
    assert_eq!(progress_bar(3, 2, 4), "[====] 100.00%");
}

#[test]
fn zpool_import_listing() {
    let pool = ImportablePool {
        name: "tank".into(),
        guid: 15451357997522795478,
        state: "ONLINE".into(),
        config: mirror_pool().config,
        ..Default::default()
    };
    let want = "   pool: tank
     id: 15451357997522795478
  state: ONLINE
 action: The pool can be imported using its name or numeric identifier.
 config:

\ttank        ONLINE
\t  mirror-0  ONLINE
\t    /tmp/a  ONLINE
\t    /tmp/b  ONLINE
";
    assert_eq!(importable_pool(&pool), want);
    let two = importable_pools(&[pool.clone(), pool]);
    assert_eq!(two, format!("{want}\n{want}"));
}

#[test]
fn zpool_create_dry_run_layout() {
    let groups = vec![
        VdevGroup {
            kind: VdevKind::Mirror,
            devices: vec!["/tmp/a".into(), "/tmp/b".into()],
        },
        VdevGroup {
            kind: VdevKind::Log,
            devices: vec!["/tmp/c".into()],
        },
    ];
    let want = "would create 'tank' with the following layout:

\ttank
\t  mirror
\t    /tmp/a
\t    /tmp/b
\tlogs
\t  /tmp/c
";
    assert_eq!(create_layout("tank", &groups), want);
}

fn get_rows() -> Vec<PropRow> {
    let row = |name: &str, property: &str, value: &str, source: &str| PropRow {
        name: name.into(),
        property: property.into(),
        value: value.into(),
        source: source.into(),
    };
    vec![
        row("tank", "compression", "lz4", "local"),
        row("tank", "recordsize", "131072", "default"),
        row("tank/a", "mountpoint", "/tank/a", "inherited from tank"),
    ]
}

#[test]
fn zfs_get_table() {
    let got = get_table(&get_rows(), &GET_FIELDS_DEFAULT, PropScope::Dataset, HUMAN);
    let want = "\
NAME    PROPERTY     VALUE    SOURCE
tank    compression  lz4      local
tank    recordsize   128K     default
tank/a  mountpoint   /tank/a  inherited from tank
";
    assert_eq!(got, want);
    let scripted = TableStyle {
        scripted: true,
        parsable: true,
    };
    let got = get_table(
        &get_rows()[1..2],
        &[GetField::Property, GetField::Value],
        PropScope::Dataset,
        scripted,
    );
    assert_eq!(got, "recordsize\t131072\n");
}

#[test]
fn zpool_get_table() {
    let rows = vec![PropRow {
        name: "tank".into(),
        property: "size".into(),
        value: (2u64 << 30).to_string(),
        source: "-".into(),
    }];
    let got = get_table(&rows, &GET_FIELDS_DEFAULT, PropScope::Pool, HUMAN);
    assert_eq!(
        got,
        "NAME  PROPERTY  VALUE  SOURCE\ntank  size      2G     -\n"
    );
}

fn datasets() -> Vec<DatasetRow> {
    let ds = |name: &str, used: u64, mountpoint: &str| {
        let prop = |value: String, source: &str| PropValue {
            value,
            source: source.into(),
        };
        let mut props = std::collections::BTreeMap::new();
        props.insert("used".to_string(), prop(used.to_string(), "-"));
        props.insert("available".to_string(), prop((1u64 << 30).to_string(), "-"));
        props.insert(
            "referenced".to_string(),
            prop((24u64 << 10).to_string(), "-"),
        );
        props.insert("mountpoint".to_string(), prop(mountpoint.into(), "default"));
        DatasetRow {
            name: name.into(),
            typ: "filesystem".into(),
            props,
        }
    };
    vec![
        ds("tank", 108 << 10, "/tank"),
        ds("tank/a", 24 << 10, "/tank/a"),
    ]
}

#[test]
fn zfs_list_table() {
    let cols: Vec<String> = DATASET_LIST_DEFAULT.split(',').map(String::from).collect();
    let got = dataset_list(&datasets(), &cols, HUMAN);
    let want = "\
NAME    USED  AVAIL  REFER  MOUNTPOINT
tank    108K     1G    24K  /tank
tank/a   24K     1G    24K  /tank/a
";
    assert_eq!(got, want);
    let style = TableStyle {
        scripted: true,
        parsable: true,
    };
    let got = dataset_list(&datasets()[..1], &["name".into(), "used".into()], style);
    assert_eq!(got, "tank\t110592\n");
}

#[test]
fn json_shapes_follow_openzfs_2_3() {
    let list = pool_list_json(&[tank_row()], &cols("name,size,health"), false);
    assert_eq!(list["output_version"]["command"], "zpool list");
    assert_eq!(list["output_version"]["vers_major"], 0);
    assert_eq!(list["pools"]["tank"]["type"], "POOL");
    assert_eq!(list["pools"]["tank"]["pool_guid"], "1234");
    assert_eq!(list["pools"]["tank"]["properties"]["size"]["value"], "2G");
    assert_eq!(
        list["pools"]["tank"]["properties"]["health"]["source"]["type"],
        "NONE"
    );

    let get = get_json(&get_rows(), PropScope::Dataset, true);
    assert_eq!(get["output_version"]["command"], "zfs get");
    let rs = &get["datasets"]["tank"]["properties"]["recordsize"];
    assert_eq!(rs["value"], "131072");
    assert_eq!(rs["source"]["type"], "DEFAULT");
    let mp = &get["datasets"]["tank/a"]["properties"]["mountpoint"]["source"];
    assert_eq!(mp["type"], "INHERITED");
    assert_eq!(mp["data"], "tank");
    assert_eq!(get["datasets"]["tank/a"]["pool"], "tank");

    let cols: Vec<String> = DATASET_LIST_DEFAULT.split(',').map(String::from).collect();
    let zl = dataset_list_json(&datasets(), &cols, false);
    assert_eq!(zl["datasets"]["tank/a"]["type"], "FILESYSTEM");
    assert_eq!(
        zl["datasets"]["tank/a"]["properties"]["used"]["value"],
        "24K"
    );

    let st = pool_status_json(&[mirror_pool()]);
    let root = &st["pools"]["tank"]["vdevs"]["tank"];
    assert_eq!(root["vdev_type"], "root");
    assert_eq!(root["vdevs"]["mirror-0"]["vdev_type"], "mirror");
    assert_eq!(
        root["vdevs"]["mirror-0"]["vdevs"]["/tmp/a"]["checksum_errors"],
        "0"
    );
    assert_eq!(st["pools"]["tank"]["logs"]["/tmp/l"]["state"], "ONLINE");
}

#[test]
fn history_and_empty_tables() {
    let h = PoolHistory {
        name: "tank".into(),
        entries: vec!["2025-01-05.00:24:01 zpool create tank /tmp/a".into()],
    };
    assert_eq!(
        pool_history(&[h]),
        "History for 'tank':\n2025-01-05.00:24:01 zpool create tank /tmp/a\n\n"
    );
    assert_eq!(pool_list(&[], &cols("name"), HUMAN, false), "");
    assert_eq!(dataset_list(&[], &["name".into()], HUMAN), "");
}

#[test]
fn zpool_add_dry_run_layout() {
    let groups = vec![
        VdevGroup {
            kind: VdevKind::Mirror,
            devices: vec!["/tmp/e".into(), "/tmp/f".into()],
        },
        VdevGroup {
            kind: VdevKind::Log,
            devices: vec!["/tmp/g".into()],
        },
    ];
    let want = "would update 'tank' to the following configuration:

\ttank
\t  mirror-0
\t    /tmp/a
\t    /tmp/b
\t  mirror
\t    /tmp/e
\t    /tmp/f
\tlogs
\t  /tmp/l
\t  /tmp/g
";
    assert_eq!(add_layout(&mirror_pool(), &groups), want);
    // A first log: the section appears with the new device only.
    let mut no_logs = mirror_pool();
    no_logs.logs.clear();
    let log_only = &groups[1..];
    assert!(add_layout(&no_logs, log_only).ends_with("\t    /tmp/b\n\tlogs\n\t  /tmp/g\n"));
}

fn iostat_pool(elapsed_ns: u64, scale: u64) -> PoolIostat {
    let leaf = |name: &str, ops: [u64; 2], bytes: [u64; 2]| VdevIostat {
        name: name.into(),
        read_ops: ops[0] * scale,
        write_ops: ops[1] * scale,
        read_bytes: bytes[0] * scale,
        write_bytes: bytes[1] * scale,
        ..VdevIostat::default()
    };
    PoolIostat {
        name: "tank".into(),
        alloc: 1 << 20,
        free: 1023 << 20,
        elapsed_ns,
        vdevs: vec![
            VdevIostat {
                alloc: Some(1 << 20),
                free: Some(1023 << 20),
                ..leaf("/tmp/a", [4, 10], [8192, 40960])
            },
            VdevIostat {
                class: VdevClass::Log,
                alloc: Some(0),
                free: Some(63 << 20),
                ..leaf("/tmp/l", [0, 20], [0, 81920])
            },
        ],
    }
}

#[test]
fn zpool_iostat_latency_and_queues() {
    let two_s = 2_000_000_000;
    let mut pool = iostat_pool(two_s, 1);
    let a = &mut pool.vdevs[0];
    // 4 reads of 250us, 10 writes of 2ms at the device after 1ms in the
    // allocation queue; 3 writes queued and 2 at the device now.
    a.disk_read_ns = 4 * 250_000;
    a.disk_write_ns = 10 * 2_000_000;
    a.asyncq_write_ops = 10;
    a.asyncq_write_ns = 10 * 1_000_000;
    a.asyncq_write_pend = 3;
    a.writes_active = 2;
    pool.vdevs[1].disk_write_ns = 20 * 100_000;
    let latency = IostatStyle {
        verbose: true,
        latency: true,
        ..IostatStyle::default()
    };
    let got = iostat_report(std::slice::from_ref(&pool), &[], latency, true);
    let want_head = "              capacity     operations     bandwidth    total_wait     disk_wait    syncq_wait    asyncq_wait  scrub   trim  rebuild
pool        alloc   free   read  write   read  write   read  write   read  write   read  write   read  write   wait   wait   wait
----------  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----  -----
";
    assert!(got.starts_with(want_head), "{got}");
    // The pool line: writes average (10 x 3ms + 20 x 100us) / 30 in all,
    // (10 x 2ms + 20 x 100us) / 30 at the devices.
    assert!(
        got.contains("\ntank           1M  1023M      2     15     4K    60K  250us  1.1ms  250us  733us      -      -      -    1ms      -      -      -\n"),
        "{got}"
    );
    assert!(
        got.contains("\n  /tmp/a       1M  1023M      2      5     4K    20K  250us    3ms  250us    2ms      -      -      -    1ms      -      -      -\n"),
        "{got}"
    );
    let queues = IostatStyle {
        verbose: true,
        queues: true,
        parsable: true,
        scripted: true,
        ..IostatStyle::default()
    };
    let got = iostat_report(std::slice::from_ref(&pool), &[], queues, true);
    assert!(
        got.contains("/tmp/a\t1048576\t1072693248\t2\t5\t4096\t20480\t0\t0\t0\t0\t0\t0\t3\t2\t0\t0\t0\t0\t0\t0\n"),
        "{got}"
    );
}

#[test]
fn zpool_iostat_layouts() {
    let two_s = 2_000_000_000;
    let plain = IostatStyle::default();
    let want = "              capacity     operations     bandwidth 
pool        alloc   free   read  write   read  write
----------  -----  -----  -----  -----  -----  -----
tank           1M  1023M      2     15     4K    60K
";
    assert_eq!(
        iostat_report(&[iostat_pool(two_s, 1)], &[], plain, true),
        want
    );
    let verbose = IostatStyle {
        verbose: true,
        ..plain
    };
    let want = "              capacity     operations     bandwidth 
pool        alloc   free   read  write   read  write
----------  -----  -----  -----  -----  -----  -----
tank           1M  1023M      2     15     4K    60K
  /tmp/a       1M  1023M      2      5     4K    20K
logs            -      -      -      -      -      -
  /tmp/l        0    63M      0     10      0    40K
----------  -----  -----  -----  -----  -----  -----
";
    assert_eq!(
        iostat_report(&[iostat_pool(two_s, 1)], &[], verbose, true),
        want
    );
    // -Hp: exact numbers, tabs, no header, no separators; zpool(8) keeps
    // the empty line where the `logs` row would be.
    let scripted = IostatStyle {
        verbose: true,
        scripted: true,
        parsable: true,
        ..IostatStyle::default()
    };
    let want = "tank\t1048576\t1072693248\t2\t15\t4096\t61440
/tmp/a\t1048576\t1072693248\t2\t5\t4096\t20480

/tmp/l\t0\t66060288\t0\t10\t0\t40960
";
    assert_eq!(
        iostat_report(&[iostat_pool(two_s, 1)], &[], scripted, true),
        want
    );
    // A later report: rates over the interval (4 s, three times the
    // counts of the first 2 s added), not since import.
    let later = iostat_pool(3 * two_s, 4);
    let got = iostat_report(&[later], &[iostat_pool(two_s, 1)], scripted, false);
    assert!(
        got.starts_with("tank\t1048576\t1072693248\t3\t22\t6144\t92160\n"),
        "{got}"
    );
}

#[test]
fn zinject_list_and_added_layouts() {
    assert_eq!(inject_list(&[]), "No handlers registered.\n");
    let h = |id, device: &str, io_type, error: &str, freq_ppm, delay_ms| InjectHandler {
        id,
        pool: "tank".into(),
        device: device.into(),
        io_type,
        error: error.into(),
        freq_ppm,
        delay_ms,
        lanes: delay_ms.map(|_| 4),
    };
    let rows = [
        h(
            1,
            "/dev/sdb",
            InjectIoType::Read,
            "checksum",
            1_000_000,
            None,
        ),
        h(12, "/tmp/a.img", InjectIoType::All, "io", 1, None),
        h(
            13,
            "/dev/sdb",
            InjectIoType::All,
            "delay",
            125_000,
            Some(25),
        ),
    ];
    assert_eq!(
        inject_list(&rows),
        " ID  POOL  DEVICE      TYPE  ERROR        FREQ  DELAY\n\
         \x20 1  tank  /dev/sdb    read  checksum     100%  -\n\
         \x2012  tank  /tmp/a.img  all   io        0.0001%  -\n\
         \x2013  tank  /dev/sdb    all   delay       12.5%  25ms:4\n"
    );
    assert_eq!(
        inject_added(&rows[2]),
        "Added handler 13 with the following properties:\n  pool: tank\n  vdev: /dev/sdb\n  \
         type: all\n  error: delay 25ms:4\n  freq: 12.5%\n"
    );
}
