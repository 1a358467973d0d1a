//! `docs/FORMAT.md` checked against the code, so the two cannot drift apart.
//!
//! Three kinds of check, each failing with the line of the document at fault:
//!
//! 1. **Facts.** Every line `NAME = VALUE` of a ` ```format-check ` block is
//!    compared with the constant, code or function of that name here
//!    ([`fact`]). A name this file does not know fails, and so does a
//!    `pub const` of tarn-format (found by scanning `src/*.rs`) or a valid
//!    type/compression/checksum code that the document never quotes.
//! 2. **Layout tables.** A table after `<!-- layout: NAME -->` lists rows
//!    `| off | size | field | … |`. A sample value with distinct field values
//!    is encoded by the real encoder ([`layout`]); each row's bytes must be
//!    exactly that field's bytes, the rows must tile the structure from 0 to
//!    its size with no gap or overlap, and every field must have a row. This
//!    checks the document's offsets against the encoder itself, not only
//!    against the offset constants.
//! 3. **The label example.** The ` ```json label-config ` block must decode
//!    as a `LabelConfig` and re-encode to the same JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sha2::{Digest, Sha256};
use tarn_format::blkptr::{self, BlockPtr, ChecksumAlg, Compression, Dva, ObjType};
use tarn_format::dnode::{self, DnodePhys};
use tarn_format::dsl::{self, DslDatasetPhys, DslDirPhys};
use tarn_format::label::{self, LabelConfig};
use tarn_format::objset::{self, ObjsetPhys, ObjsetType};
use tarn_format::scan::{ScanFunc, ScanPhase, ScanPhys, SCAN_PHYS_SIZE};
use tarn_format::spacemap::{self, SpaceMapBlock, SpaceMapEntry, SpaceMapKind};
use tarn_format::stream;
use tarn_format::uberblock::{self, Uberblock};
use tarn_format::zap::{self, FatHeader, LeafHeader, MicroEntry, ZapValue};
use tarn_format::zpl::{self, Timespec, ZnodePhys};

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/FORMAT.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ------------------------------------------------------------------ facts

/// A value quoted in the document: a number or a quoted string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Val {
    Int(u64),
    Str(String),
}

fn int(v: impl TryInto<u64>) -> Option<Val> {
    Some(Val::Int(v.try_into().ok().expect("fits u64")))
}

/// A magic number is quoted as the eight ASCII bytes it is made of.
fn magic(m: u64) -> Option<Val> {
    Some(Val::Str(
        String::from_utf8(m.to_le_bytes().to_vec()).expect("ASCII magic"),
    ))
}

/// Every constant of tarn-format, by the name the document uses.
fn constant(name: &str) -> Option<Val> {
    use blkptr::*;
    use dnode::*;
    use dsl::*;
    use label::*;
    use objset::*;
    use spacemap::*;
    use uberblock::*;
    use zap::*;
    match name {
        "FORMAT_VERSION" => int(tarn_format::FORMAT_VERSION),
        "KNOWN_FEATURE_BITS" => int(tarn_format::KNOWN_FEATURE_BITS),
        "FEATURE_SNAPSHOTS" => int(tarn_format::FEATURE_SNAPSHOTS),
        "SECTOR_SHIFT" => int(tarn_format::SECTOR_SHIFT),
        "SECTOR_SIZE" => int(tarn_format::SECTOR_SIZE),
        "MIN_BLOCK_SIZE" => int(tarn_format::MIN_BLOCK_SIZE),
        "MAX_BLOCK_SIZE" => int(tarn_format::MAX_BLOCK_SIZE),
        "KNOWN_FEATURES" => Some(Val::Str(tarn_format::KNOWN_FEATURES.join(","))),
        "SCAN_PHYS_SIZE" => int(SCAN_PHYS_SIZE),
        // label.rs
        "VDEV_LABEL_SIZE" => int(VDEV_LABEL_SIZE),
        "VDEV_LABELS" => int(VDEV_LABELS),
        "VDEV_LABEL_START_SIZE" => int(VDEV_LABEL_START_SIZE),
        "VDEV_LABEL_END_SIZE" => int(VDEV_LABEL_END_SIZE),
        "VDEV_SIZE_ALIGN" => int(VDEV_SIZE_ALIGN),
        "MIN_DEVICE_SIZE" => int(MIN_DEVICE_SIZE),
        "LABEL_OFF_CONFIG" => int(LABEL_OFF_CONFIG),
        "LABEL_CONFIG_SIZE" => int(LABEL_CONFIG_SIZE),
        "LABEL_CONFIG_HEADER" => int(LABEL_CONFIG_HEADER),
        "LABEL_CONFIG_MAX_PAYLOAD" => int(LABEL_CONFIG_MAX_PAYLOAD),
        "LABEL_OFF_UBER_RING" => int(LABEL_OFF_UBER_RING),
        "LABEL_UBER_RING_SIZE" => int(LABEL_UBER_RING_SIZE),
        "LABEL_MAGIC" => magic(LABEL_MAGIC),
        "DTL_OPEN" => int(DTL_OPEN),
        "DTL_RANGES_MAX" => int(DTL_RANGES_MAX),
        // uberblock.rs
        "UBERBLOCK_SIZE" => int(UBERBLOCK_SIZE),
        "UBERBLOCK_MAGIC" => magic(UBERBLOCK_MAGIC),
        "UB_OFF_MAGIC" => int(UB_OFF_MAGIC),
        "UB_OFF_VERSION" => int(UB_OFF_VERSION),
        "UB_OFF_TXG" => int(UB_OFF_TXG),
        "UB_OFF_GUID_SUM" => int(UB_OFF_GUID_SUM),
        "UB_OFF_TIMESTAMP" => int(UB_OFF_TIMESTAMP),
        "UB_OFF_ROOTBP" => int(UB_OFF_ROOTBP),
        "UB_OFF_SPACEMAP_BP" => int(UB_OFF_SPACEMAP_BP),
        "UB_OFF_FEATURES" => int(UB_OFF_FEATURES),
        "UB_OFF_CHECKSUM" => int(UB_OFF_CHECKSUM),
        // blkptr.rs
        "BLKPTR_SIZE" => int(BLKPTR_SIZE),
        "DVA_SIZE" => int(DVA_SIZE),
        "MAX_DVAS" => int(MAX_DVAS),
        "MAX_LEVEL" => int(MAX_LEVEL),
        "BP_OFF_DVA" => int(BP_OFF_DVA),
        "BP_OFF_LSIZE" => int(BP_OFF_LSIZE),
        "BP_OFF_PSIZE" => int(BP_OFF_PSIZE),
        "BP_OFF_COMP" => int(BP_OFF_COMP),
        "BP_OFF_CKSUM" => int(BP_OFF_CKSUM),
        "BP_OFF_TYPE" => int(BP_OFF_TYPE),
        "BP_OFF_LEVEL" => int(BP_OFF_LEVEL),
        "BP_OFF_BIRTH" => int(BP_OFF_BIRTH),
        "BP_OFF_PHYS_BIRTH" => int(BP_OFF_PHYS_BIRTH),
        "BP_OFF_FILL" => int(BP_OFF_FILL),
        "BP_OFF_CHECKSUM" => int(BP_OFF_CHECKSUM),
        // spacemap.rs
        "SPACEMAP_MAGIC" => magic(SPACEMAP_MAGIC),
        "SPACEMAP_HEADER_SIZE" => int(SPACEMAP_HEADER_SIZE),
        "SPACEMAP_ENTRY_SIZE" => int(SPACEMAP_ENTRY_SIZE),
        "SPACEMAP_BLOCK_MAX" => int(SPACEMAP_BLOCK_MAX),
        "SPACEMAP_ENTRIES_MAX" => int(SPACEMAP_ENTRIES_MAX),
        "SPACEMAP_RUN_MAX_SECTORS" => int(SPACEMAP_RUN_MAX_SECTORS),
        "SM_OFF_TXG" => int(SM_OFF_TXG),
        "SM_OFF_COUNT" => int(SM_OFF_COUNT),
        "SM_OFF_KIND" => int(SM_OFF_KIND),
        "SM_OFF_PREV" => int(SM_OFF_PREV),
        // dsl.rs
        "DSL_DIR_PHYS_SIZE" => int(DSL_DIR_PHYS_SIZE),
        "DSL_DATASET_PHYS_SIZE" => int(DSL_DATASET_PHYS_SIZE),
        "DS_OFF_BP" => int(DS_OFF_BP),
        "DS_OFF_EXT" => int(DS_OFF_EXT),
        "DD_OFF_ORIGIN" => int(DD_OFF_ORIGIN),
        "DS_FLAG_DEFER_DESTROY" => int(DS_FLAG_DEFER_DESTROY),
        "DS_FLAGS_KNOWN" => int(DS_FLAGS_KNOWN),
        "DS_EXT_PROPS" => Some(Val::Str(DS_EXT_PROPS.into())),
        "DS_EXT_HOLDS" => Some(Val::Str(DS_EXT_HOLDS.into())),
        "DS_EXT_CLONES" => Some(Val::Str(DS_EXT_CLONES.into())),
        "DS_EXT_BOOKMARKS" => Some(Val::Str(DS_EXT_BOOKMARKS.into())),
        "DS_EXT_RECV" => Some(Val::Str(DS_EXT_RECV.into())),
        "DS_FLAG_INCONSISTENT" => int(DS_FLAG_INCONSISTENT),
        // stream.rs
        "STREAM_MAGIC" => magic(stream::STREAM_MAGIC),
        "STREAM_VERSION" => int(stream::STREAM_VERSION),
        "RECORD_SIZE" => int(stream::RECORD_SIZE),
        "RECORD_OFF_CHECKSUM" => int(stream::RECORD_OFF_CHECKSUM),
        "STREAM_PAYLOAD_MAX" => int(stream::STREAM_PAYLOAD_MAX),
        "RECORD_BEGIN" => int(stream::RECORD_BEGIN),
        "RECORD_OBJECT" => int(stream::RECORD_OBJECT),
        "RECORD_FREEOBJECTS" => int(stream::RECORD_FREEOBJECTS),
        "RECORD_WRITE" => int(stream::RECORD_WRITE),
        "RECORD_FREE" => int(stream::RECORD_FREE),
        "RECORD_END" => int(stream::RECORD_END),
        "STREAM_FEATURE_COMPRESSED" => int(stream::STREAM_FEATURE_COMPRESSED),
        "STREAM_FEATURE_LARGE_BLOCKS" => int(stream::STREAM_FEATURE_LARGE_BLOCKS),
        "STREAM_FEATURE_EMBED_DATA" => int(stream::STREAM_FEATURE_EMBED_DATA),
        "STREAM_FEATURE_RAW" => int(stream::STREAM_FEATURE_RAW),
        "STREAM_FEATURE_RESUMING" => int(stream::STREAM_FEATURE_RESUMING),
        "STREAM_FEATURES_KNOWN" => int(stream::STREAM_FEATURES_KNOWN),
        "BEGIN_FLAG_COMPOUND" => int(stream::BEGIN_FLAG_COMPOUND),
        "BEGIN_FLAG_PROPS" => int(stream::BEGIN_FLAG_PROPS),
        "BEGIN_FLAGS_KNOWN" => int(stream::BEGIN_FLAGS_KNOWN),
        "DSTYPE_FILESYSTEM" => int(stream::DSTYPE_FILESYSTEM),
        "DSTYPE_VOLUME" => int(stream::DSTYPE_VOLUME),
        // bpobj.rs
        "BPOBJ_PHYS_SIZE" => int(tarn_format::bpobj::BPOBJ_PHYS_SIZE),
        "BPOBJ_ENTRY_SIZE" => int(tarn_format::bpobj::BPOBJ_ENTRY_SIZE),
        "DEADLIST_BPOBJS_MAX" => int(tarn_format::bpobj::DEADLIST_BPOBJS_MAX),
        // objset.rs
        "OBJSET_PHYS_SIZE" => int(OBJSET_PHYS_SIZE),
        "OBJSET_MAGIC" => magic(OBJSET_MAGIC),
        "ZIL_HEADER_SIZE" => int(ZIL_HEADER_SIZE),
        "OS_OFF_MAGIC" => int(OS_OFF_MAGIC),
        "OS_OFF_VERSION" => int(OS_OFF_VERSION),
        "OS_OFF_TYPE" => int(OS_OFF_TYPE),
        "OS_OFF_FLAGS" => int(OS_OFF_FLAGS),
        "OS_OFF_META_DNODE" => int(OS_OFF_META_DNODE),
        "OS_OFF_ZIL_HEADER" => int(OS_OFF_ZIL_HEADER),
        "OS_OFF_RESERVED" => int(OS_OFF_RESERVED),
        // dnode.rs
        "DNODE_SIZE" => int(DNODE_SIZE),
        "DNODE_SHIFT" => int(DNODE_SHIFT),
        "DNODE_BLOCK_SHIFT" => int(DNODE_BLOCK_SHIFT),
        "DNODE_BLOCK_SIZE" => int(DNODE_BLOCK_SIZE),
        "DNODES_PER_BLOCK" => int(DNODES_PER_BLOCK),
        "DNODE_INDBLKSHIFT" => int(DNODE_INDBLKSHIFT),
        "INDIRECT_BLOCK_SIZE" => int(INDIRECT_BLOCK_SIZE),
        "EPB_SHIFT" => int(EPB_SHIFT),
        "BLKPTRS_PER_INDIRECT" => int(BLKPTRS_PER_INDIRECT),
        "DNODE_BONUS_SIZE" => int(DNODE_BONUS_SIZE),
        "MAX_NLEVELS" => int(MAX_NLEVELS),
        "DNODE_FLAG_USED_BYTES" => int(DNODE_FLAG_USED_BYTES),
        "DN_OFF_TYPE" => int(DN_OFF_TYPE),
        "DN_OFF_INDBLKSHIFT" => int(DN_OFF_INDBLKSHIFT),
        "DN_OFF_NLEVELS" => int(DN_OFF_NLEVELS),
        "DN_OFF_FLAGS" => int(DN_OFF_FLAGS),
        "DN_OFF_BONUS_TYPE" => int(DN_OFF_BONUS_TYPE),
        "DN_OFF_BONUS_LEN" => int(DN_OFF_BONUS_LEN),
        "DN_OFF_DATABLK_SEC" => int(DN_OFF_DATABLK_SEC),
        "DN_OFF_MAXBLKID" => int(DN_OFF_MAXBLKID),
        "DN_OFF_USED" => int(DN_OFF_USED),
        "DN_OFF_ROOT" => int(DN_OFF_ROOT),
        "DN_OFF_BONUS" => int(DN_OFF_BONUS),
        // zap.rs
        "ZAP_MAX_KEY_LEN" => int(ZAP_MAX_KEY_LEN),
        "ZAP_MAX_VALUE_BYTES" => int(ZAP_MAX_VALUE_BYTES),
        "ZAP_HASH_BITS" => int(ZAP_HASH_BITS),
        "ZAP_CD_BITS" => int(ZAP_CD_BITS),
        "ZAP_MAX_CD" => int(ZAP_MAX_CD),
        "ZBT_MICRO" => magic(ZBT_MICRO),
        "ZBT_HEADER" => magic(ZBT_HEADER),
        "ZBT_LEAF" => magic(ZBT_LEAF),
        "MZAP_MIN_BLOCK_SIZE" => int(MZAP_MIN_BLOCK_SIZE),
        "MZAP_MAX_BLOCK_SIZE" => int(MZAP_MAX_BLOCK_SIZE),
        "MZAP_ENT_SIZE" => int(MZAP_ENT_SIZE),
        "MZAP_NAME_MAX" => int(MZAP_NAME_MAX),
        "MZAP_HEADER_SIZE" => int(MZAP_HEADER_SIZE),
        "FZAP_BLOCK_SIZE" => int(FZAP_BLOCK_SIZE),
        "FZAP_EMBEDDED_PTRTBL_OFF" => int(FZAP_EMBEDDED_PTRTBL_OFF),
        "FZAP_EMBEDDED_PTRTBL_SHIFT" => int(FZAP_EMBEDDED_PTRTBL_SHIFT),
        "FZAP_PTRS_PER_BLOCK_SHIFT" => int(FZAP_PTRS_PER_BLOCK_SHIFT),
        "ZAP_MAX_PTRTBL_SHIFT" => int(ZAP_MAX_PTRTBL_SHIFT),
        "ZAP_LEAF_HEADER_SIZE" => int(ZAP_LEAF_HEADER_SIZE),
        "ZAP_LEAF_SPACE" => int(ZAP_LEAF_SPACE),
        "ZAP_LEAF_ENTRY_HEADER" => int(ZAP_LEAF_ENTRY_HEADER),
        _ => zpl_constant(name),
    }
}

fn zil_constant(name: &str) -> Option<Val> {
    use tarn_format::zil::*;
    match name {
        "ZIL_HEADER_MAGIC" => magic(ZIL_HEADER_MAGIC),
        "LOG_BLOCK_MAGIC" => magic(LOG_BLOCK_MAGIC),
        "LOG_PTR_SIZE" => int(LOG_PTR_SIZE),
        "LOG_BLOCK_HEADER_SIZE" => int(LOG_BLOCK_HEADER_SIZE),
        "LOG_RECORD_HEADER_SIZE" => int(LOG_RECORD_HEADER_SIZE),
        "ZH_OFF_MAGIC" => int(ZH_OFF_MAGIC),
        "ZH_OFF_GUID" => int(ZH_OFF_GUID),
        "ZH_OFF_HEAD" => int(ZH_OFF_HEAD),
        "LB_OFF_MAGIC" => int(LB_OFF_MAGIC),
        "LB_OFF_GUID" => int(LB_OFF_GUID),
        "LB_OFF_SEQ" => int(LB_OFF_SEQ),
        "LB_OFF_NUSED" => int(LB_OFF_NUSED),
        "LB_OFF_NRECORDS" => int(LB_OFF_NRECORDS),
        "LB_OFF_NEXT" => int(LB_OFF_NEXT),
        "LB_OFF_FLAGS" => int(LB_OFF_FLAGS),
        "LOG_BLOCK_COMMIT_END" => int(LOG_BLOCK_COMMIT_END),
        "LOG_BLOCK_FLETCHER4" => int(LOG_BLOCK_FLETCHER4),
        "LB_OFF_CHECKSUM" => int(LB_OFF_CHECKSUM),
        "LOG_ATTR_MODE" => int(LOG_ATTR_MODE),
        "LOG_ATTR_UID" => int(LOG_ATTR_UID),
        "LOG_ATTR_GID" => int(LOG_ATTR_GID),
        "LOG_ATTR_SIZE" => int(LOG_ATTR_SIZE),
        "LOG_ATTR_ATIME" => int(LOG_ATTR_ATIME),
        "LOG_ATTR_MTIME" => int(LOG_ATTR_MTIME),
        "LOG_ATTR_CTIME" => int(LOG_ATTR_CTIME),
        "LR_WRITE" => int(LR_WRITE),
        "LR_FREE_RANGE" => int(LR_FREE_RANGE),
        "LR_SETATTR" => int(LR_SETATTR),
        "LR_CREATE" => int(LR_CREATE),
        "LR_REMOVE" => int(LR_REMOVE),
        "LR_LINK" => int(LR_LINK),
        "LR_RENAME" => int(LR_RENAME),
        "LR_SETXATTR" => int(LR_SETXATTR),
        "LR_REMOVEXATTR" => int(LR_REMOVEXATTR),
        "LR_WRITE_INDIRECT" => int(LR_WRITE_INDIRECT),
        _ => None,
    }
}

fn zvol_constant(name: &str) -> Option<Val> {
    use tarn_format::zvol::*;
    match name {
        "ZVOL_OBJ" => int(ZVOL_OBJ),
        "ZVOL_ZAP_OBJ" => int(ZVOL_ZAP_OBJ),
        "ZVOL_SIZE_KEY" => Some(Val::Str(ZVOL_SIZE_KEY.to_string())),
        "ZVOL_BLOCK_MIN" => int(ZVOL_BLOCK_MIN),
        "ZVOL_BLOCK_MAX" => int(ZVOL_BLOCK_MAX),
        "ZVOL_BLOCK_DEFAULT" => int(ZVOL_BLOCK_DEFAULT),
        _ => None,
    }
}

fn zpl_constant(name: &str) -> Option<Val> {
    use zpl::*;
    let text = |s: &str| Some(Val::Str(s.to_string()));
    match name {
        "MASTER_NODE_OBJ" => int(MASTER_NODE_OBJ),
        "ZPL_VERSION" => int(ZPL_VERSION),
        "ZPL_VERSION_KEY" => text(ZPL_VERSION_KEY),
        "ZPL_ROOT_KEY" => text(ZPL_ROOT_KEY),
        "ZPL_DELETE_QUEUE_KEY" => text(ZPL_DELETE_QUEUE_KEY),
        "ZPL_GENERATION_KEY" => text(ZPL_GENERATION_KEY),
        "S_IFMT" => int(S_IFMT),
        "S_IFIFO" => int(S_IFIFO),
        "S_IFCHR" => int(S_IFCHR),
        "S_IFDIR" => int(S_IFDIR),
        "S_IFBLK" => int(S_IFBLK),
        "S_IFREG" => int(S_IFREG),
        "S_IFLNK" => int(S_IFLNK),
        "S_IFSOCK" => int(S_IFSOCK),
        "MODE_PERM_MASK" => int(MODE_PERM_MASK),
        "ZNODE_MAGIC" => Some(Val::Str(
            String::from_utf8(ZNODE_MAGIC.to_le_bytes().to_vec()).expect("ASCII"),
        )),
        "ZNODE_FIXED_SIZE" => int(ZNODE_FIXED_SIZE),
        "ZNODE_SA_XATTR_SPACE" => int(ZNODE_SA_XATTR_SPACE),
        "SA_XATTR_ENTRY_HEADER" => int(SA_XATTR_ENTRY_HEADER),
        "XATTR_NAME_MAX" => int(XATTR_NAME_MAX),
        "ZNODE_FLAG_XATTR" => int(ZNODE_FLAG_XATTR),
        "NSEC_PER_SEC" => int(NSEC_PER_SEC),
        "DIRENT_OBJ_BITS" => int(DIRENT_OBJ_BITS),
        "DIRENT_TYPE_SHIFT" => int(DIRENT_TYPE_SHIFT),
        _ => zil_constant(name),
    }
}

/// An on-disk code, quoted as `kind.name`: `compression.zstd-3`,
/// `checksum.fletcher4`, `type.PlainFile`, `objset_type.Mos`,
/// `spacemap_kind.base`.
fn code(name: &str) -> Option<Val> {
    let (kind, spelled) = name.split_once('.')?;
    let all = all_codes(kind)?;
    all.into_iter()
        .find(|(_, s)| s == spelled)
        .and_then(|(c, _)| int(c))
}

/// Every valid code of `kind` with its spelling, found by asking the
/// decoder about every possible value, so a new code is noticed.
fn all_codes(kind: &str) -> Option<Vec<(u64, String)>> {
    let bytes = 0..=255u8;
    Some(match kind {
        "compression" => bytes
            .filter_map(|c| {
                Compression::from_code(c)
                    .ok()
                    .map(|x| (u64::from(c), x.name()))
            })
            .collect(),
        "checksum" => bytes
            .filter_map(|c| {
                ChecksumAlg::from_code(c)
                    .ok()
                    .map(|x| (u64::from(c), x.name().into()))
            })
            .collect(),
        "type" => bytes
            .filter_map(|c| {
                ObjType::from_code(c)
                    .ok()
                    .map(|x| (u64::from(c), format!("{x:?}")))
            })
            .collect(),
        "objset_type" => (0..=255u64)
            .filter_map(|c| ObjsetType::from_code(c).ok().map(|x| (c, format!("{x:?}"))))
            .collect(),
        "spacemap_kind" => [(SpaceMapKind::Delta, "delta"), (SpaceMapKind::Base, "base")]
            .into_iter()
            .map(|(k, s)| (spacemap_kind_code(k), s.to_string()))
            .collect(),
        _ => return None,
    })
}

/// The kind word as the encoder writes it (there is no `code()` for it).
fn spacemap_kind_code(kind: SpaceMapKind) -> u64 {
    let b = SpaceMapBlock {
        txg: 1,
        kind,
        prev: BlockPtr::HOLE,
        entries: vec![],
    }
    .encode();
    u64::from(u32::from_le_bytes(b[20..24].try_into().unwrap()))
}

/// A function of the format evaluated at the arguments the document quotes:
/// `uberblock_slots(12)`, `zap_hash(0x1234, "hello")`.
fn call(name: &str) -> Option<Val> {
    let (func, args) = name.strip_suffix(')')?.split_once('(')?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let n = |i: usize| parse_int(args.get(i)?);
    let s = |i: usize| {
        args.get(i)?
            .strip_prefix('"')?
            .strip_suffix('"')
            .map(str::to_owned)
    };
    match (func, args.len()) {
        ("osize", 1) => int(label::osize(n(0)?)),
        ("leaf_asize", 1) => int(label::leaf_asize(n(0)?)),
        ("label_offset", 2) => int(label::label_offset(n(0)? as usize, n(1)?)),
        ("uberblock_slot_size", 1) => int(label::uberblock_slot_size(n(0)? as u8)),
        ("uberblock_slots", 1) => int(label::uberblock_slots(n(0)? as u8)),
        ("uberblock_offset", 4) => int(label::uberblock_offset(
            n(0)? as usize,
            n(1)?,
            n(2)? as u8,
            n(3)?,
        )),
        ("nlevels_for", 1) => int(dnode::nlevels_for(n(0)?)),
        ("max_blkid_for", 2) => int(dnode::max_blkid_for(n(0)? as u8, n(1)? as u32)),
        ("mzap_slots", 1) => int(zap::mzap_slots(n(0)? as usize)),
        ("zap_hash", 2) => int(zap::zap_hash(n(0)?, s(1)?.as_bytes())),
        ("SpaceMapBlock::encoded_len", 1) => int(SpaceMapBlock::encoded_len(n(0)? as usize)),
        _ => None,
    }
}

fn fact(name: &str) -> Option<Val> {
    constant(name)
        .or_else(|| zvol_constant(name))
        .or_else(|| code(name))
        .or_else(|| call(name))
}

fn parse_int(s: &str) -> Option<u64> {
    let s = s.replace('_', "");
    if let Some(hex) = s.strip_prefix("0x") {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = s.strip_prefix("0o") {
        u64::from_str_radix(oct, 8).ok()
    } else {
        s.parse().ok()
    }
}

fn parse_val(s: &str) -> Option<Val> {
    match s.strip_prefix('"').and_then(|x| x.strip_suffix('"')) {
        Some(text) => Some(Val::Str(text.to_string())),
        None => parse_int(s).map(Val::Int),
    }
}

/// `(line number, name, value text)` of every fact in every format-check block.
fn doc_facts(doc: &str) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("```") {
            inside = !inside && t == "```format-check";
            continue;
        }
        if inside && !t.is_empty() && !t.starts_with('#') {
            let (name, value) = t
                .split_once('=')
                .unwrap_or_else(|| panic!("FORMAT.md:{}: not NAME = VALUE: {t}", i + 1));
            out.push((i + 1, name.trim().to_string(), value.trim().to_string()));
        }
    }
    out
}

#[test]
fn every_fact_matches_the_code() {
    let doc = doc();
    let facts = doc_facts(&doc);
    assert!(
        facts.len() > 100,
        "only {} facts found; is the fence spelled ```format-check?",
        facts.len()
    );
    let mut errors = Vec::new();
    for (line, name, value) in &facts {
        let Some(quoted) = parse_val(value) else {
            errors.push(format!(
                "FORMAT.md:{line}: {name}: cannot parse value {value:?}"
            ));
            continue;
        };
        match fact(name) {
            None => errors.push(format!("FORMAT.md:{line}: unknown name {name:?} (add it to tests/format_doc.rs or fix the doc)")),
            Some(real) if real != quoted => {
                errors.push(format!("FORMAT.md:{line}: {name}: doc says {quoted:?}, code has {real:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(
        errors.is_empty(),
        "FORMAT.md disagrees with tarn-format:\n{}",
        errors.join("\n")
    );
}

/// Names of the top-level `pub const` items in tarn-format's sources.
fn crate_consts() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("src dir") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source file");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pub const ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.insert(name);
            }
        }
    }
    out
}

#[test]
fn every_constant_and_code_is_documented() {
    let doc = doc();
    let quoted: BTreeSet<String> = doc_facts(&doc).into_iter().map(|(_, n, _)| n).collect();
    let consts = crate_consts();
    assert!(
        consts.len() > 100,
        "found only {} pub consts in src/",
        consts.len()
    );
    let mut missing: Vec<String> = consts
        .iter()
        .filter(|c| !quoted.contains(*c))
        .cloned()
        .collect();
    for kind in [
        "compression",
        "checksum",
        "type",
        "objset_type",
        "spacemap_kind",
    ] {
        for (_, spelled) in all_codes(kind).expect("known kind") {
            let name = format!("{kind}.{spelled}");
            if !quoted.contains(&name) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not quoted in any ```format-check block of docs/FORMAT.md (document them; for a new \
         constant also add it to `constant()` in tests/format_doc.rs):\n{}",
        missing.join("\n")
    );
}

// ------------------------------------------------------------------ layouts

/// A sample structure: its encoded bytes and the bytes each field must
/// occupy. Fields named `reserved` are checked to be zero wherever a row
/// puts them.
struct Sample {
    bytes: Vec<u8>,
    fields: BTreeMap<&'static str, Vec<u8>>,
}

fn le64(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}
fn le32(v: u32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}
fn le16(v: u16) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn sample_dva(i: u8) -> Dva {
    Dva {
        vdev: 0x0100 + u32::from(i),
        asize_sectors: 0x0200 + u32::from(i),
        offset: 0x0003_0400 + (u64::from(i) << 9),
    }
}

fn sample_bp(seed: u8) -> BlockPtr {
    let s = u64::from(seed);
    BlockPtr {
        dvas: [sample_dva(seed), sample_dva(seed + 1), sample_dva(seed + 2)],
        lsize: 0x0002_0000,
        psize: 0x0000_4000,
        comp: Compression::Zstd(3),
        cksum: ChecksumAlg::Sha256,
        typ: ObjType::PlainFile,
        level: 2,
        birth: 0x1111_0000 + s,
        phys_birth: 0x2222_0000 + s,
        fill: 0x3333_0000 + s,
        checksum: [0x4444 + s, 0x5555 + s, 0x6666 + s, 0x7777 + s],
    }
}

fn sample_dnode() -> DnodePhys {
    let mut dn = DnodePhys::new(ObjType::DirectoryContents, 0x4000);
    dn.nlevels = 3;
    dn.bonus_type = ObjType::DslDir;
    dn.maxblkid = 0x1234;
    dn.used_bytes = 0x0005_6789;
    dn.root = sample_bp(1);
    dn.bonus = (1..=40).collect();
    dn
}

fn field_map(pairs: Vec<(&'static str, Vec<u8>)>) -> BTreeMap<&'static str, Vec<u8>> {
    pairs.into_iter().collect()
}

fn layout(name: &str) -> Option<Sample> {
    Some(match name {
        "StreamRecord" => {
            let rec = stream::Record::Free {
                object: 0x1111,
                offset: 0x2222,
                length: 0x3333,
            };
            let mut w = stream::StreamWriter::new(Vec::new());
            w.write(&rec, &[]).unwrap();
            let bytes = w.get_mut().clone();
            let sum = tarn_format::fletcher4::fletcher4(&bytes[..96]);
            let sum: Vec<u8> = sum.iter().flat_map(|w| w.to_le_bytes()).collect();
            Sample {
                fields: field_map(vec![
                    ("type", le32(stream::RECORD_FREE)),
                    ("payload_len", le32(0)),
                    ("field0", le64(0x1111)),
                    ("field1", le64(0x2222)),
                    ("field2", le64(0x3333)),
                    ("field3", le64(0)),
                    ("field4", le64(0)),
                    ("field5", le64(0)),
                    ("field6", le64(0)),
                    ("checksum", sum),
                ]),
                bytes,
            }
        }
        "Dva" => {
            let d = sample_dva(7);
            let mut bytes = vec![0u8; blkptr::DVA_SIZE];
            d.encode(&mut bytes);
            Sample {
                bytes,
                fields: field_map(vec![
                    ("vdev", le32(d.vdev)),
                    ("asize", le32(d.asize_sectors)),
                    ("offset", le64(d.offset)),
                ]),
            }
        }
        "BlockPtr" => {
            let bp = sample_bp(3);
            let dva = |i: usize| {
                let mut b = vec![0u8; 16];
                bp.dvas[i].encode(&mut b);
                b
            };
            Sample {
                bytes: bp.encode().to_vec(),
                fields: field_map(vec![
                    ("dva[0]", dva(0)),
                    ("dva[1]", dva(1)),
                    ("dva[2]", dva(2)),
                    ("lsize", le32(bp.lsize)),
                    ("psize", le32(bp.psize)),
                    ("comp", vec![bp.comp.code()]),
                    ("cksum", vec![bp.cksum.code()]),
                    ("type", vec![bp.typ.code()]),
                    ("level", vec![bp.level]),
                    ("birth", le64(bp.birth)),
                    ("phys_birth", le64(bp.phys_birth)),
                    ("fill", le64(bp.fill)),
                    (
                        "checksum",
                        bp.checksum.iter().flat_map(|w| w.to_le_bytes()).collect(),
                    ),
                ]),
            }
        }
        "Uberblock" => {
            let slot_offset = 0x0006_2000u64;
            let mut ub = Uberblock::new(0x0A0B, 0x0C0D_0E0F, 0x1718_1920);
            ub.rootbp = sample_bp(1);
            ub.spacemap_bp = sample_bp(5);
            ub.features = 0x0102;
            let bytes = ub.encode(slot_offset).to_vec();
            let mut h = Sha256::new();
            h.update(slot_offset.to_le_bytes());
            h.update(&bytes[..992]);
            Sample {
                fields: field_map(vec![
                    ("magic", b"tarnUBER".to_vec()),
                    ("version", le64(ub.version)),
                    ("txg", le64(ub.txg)),
                    ("guid_sum", le64(ub.guid_sum)),
                    ("timestamp", le64(ub.timestamp)),
                    ("rootbp", ub.rootbp.encode().to_vec()),
                    ("spacemap_bp", ub.spacemap_bp.encode().to_vec()),
                    ("features", le64(ub.features)),
                    ("checksum", h.finalize().to_vec()),
                ]),
                bytes,
            }
        }
        "Label" => {
            // Regions of a label, each filled with its own byte value at the
            // place the constants put it.
            let regions = [
                ("reserved", 0, label::LABEL_OFF_CONFIG, 0u8),
                (
                    "config",
                    label::LABEL_OFF_CONFIG,
                    label::LABEL_CONFIG_SIZE,
                    1,
                ),
                (
                    "uber_ring",
                    label::LABEL_OFF_UBER_RING,
                    label::LABEL_UBER_RING_SIZE,
                    2,
                ),
            ];
            let mut bytes = vec![0xEEu8; label::VDEV_LABEL_SIZE as usize];
            let mut fields = BTreeMap::new();
            for (name, off, size, fill) in regions {
                bytes[off as usize..(off + size) as usize].fill(fill);
                if name != "reserved" {
                    fields.insert(name, vec![fill; size as usize]);
                }
            }
            Sample { bytes, fields }
        }
        "LabelConfigHeader" => {
            let cfg = sample_label_config();
            let at = 0x0004_0000u64;
            let encoded = cfg.encode(at).expect("fits");
            let payload = serde_json::to_vec(&cfg).unwrap();
            assert_eq!(
                encoded[48..48 + payload.len()],
                payload[..],
                "payload follows the header"
            );
            let mut h = Sha256::new();
            h.update(at.to_le_bytes());
            h.update(&payload);
            Sample {
                bytes: encoded[..label::LABEL_CONFIG_HEADER].to_vec(),
                fields: field_map(vec![
                    ("magic", b"tarnLABL".to_vec()),
                    ("version", le32(tarn_format::FORMAT_VERSION as u32)),
                    ("length", le32(payload.len() as u32)),
                    ("checksum", h.finalize().to_vec()),
                ]),
            }
        }
        "SpaceMapHeader" | "SpaceMapEntry" => {
            let entry = SpaceMapEntry {
                vdev: 0x0102_0304,
                offset: 0x0000_0506_0708_0A00,
                len: 0x0B0C << 9,
                free: true,
            };
            let blk = SpaceMapBlock {
                txg: 0x1112_1314,
                kind: SpaceMapKind::Base,
                prev: sample_bp(2),
                entries: vec![entry],
            };
            let enc = blk.encode();
            if name == "SpaceMapHeader" {
                Sample {
                    bytes: enc[..spacemap::SPACEMAP_HEADER_SIZE].to_vec(),
                    fields: field_map(vec![
                        ("magic", b"tarnSMAP".to_vec()),
                        ("txg", le64(blk.txg)),
                        ("count", le32(1)),
                        ("kind", le32(1)),
                        ("prev", blk.prev.encode().to_vec()),
                    ]),
                }
            } else {
                let at = spacemap::SPACEMAP_HEADER_SIZE;
                Sample {
                    bytes: enc[at..at + spacemap::SPACEMAP_ENTRY_SIZE].to_vec(),
                    fields: field_map(vec![
                        ("offset", le64(entry.offset)),
                        ("vdev", le32(entry.vdev)),
                        ("len", le32(0x0B0C | 1 << 31)),
                    ]),
                }
            }
        }
        "DslDirPhys" => {
            let d = DslDirPhys {
                creation_time: 0x0101,
                head_dataset_obj: 0x0202,
                parent_dir_obj: 0x0303,
                child_map_obj: 0x0404,
                props_obj: 0x0505,
                used_bytes: 0x0606,
                compressed_bytes: 0x0707,
                uncompressed_bytes: 0x0808,
                origin_obj: 0x0909,
            };
            Sample {
                bytes: d.encode().to_vec(),
                fields: field_map(vec![
                    ("creation_time", le64(d.creation_time)),
                    ("head_dataset_obj", le64(d.head_dataset_obj)),
                    ("parent_dir_obj", le64(d.parent_dir_obj)),
                    ("child_map_obj", le64(d.child_map_obj)),
                    ("props_obj", le64(d.props_obj)),
                    ("used_bytes", le64(d.used_bytes)),
                    ("compressed_bytes", le64(d.compressed_bytes)),
                    ("uncompressed_bytes", le64(d.uncompressed_bytes)),
                    ("origin_obj", le64(d.origin_obj)),
                ]),
            }
        }
        "BpobjPhys" => {
            let b = tarn_format::bpobj::BpobjPhys {
                num_blkptrs: 0x01,
                dsize: 0x02,
                psize: 0x03,
                lsize: 0x04,
            };
            Sample {
                bytes: b.encode().to_vec(),
                fields: field_map(vec![
                    ("num_blkptrs", le64(b.num_blkptrs)),
                    ("dsize", le64(b.dsize)),
                    ("psize", le64(b.psize)),
                    ("lsize", le64(b.lsize)),
                ]),
            }
        }
        "DslDatasetPhys" => {
            let d = DslDatasetPhys {
                dir_obj: 0x01,
                prev_snap_obj: 0x02,
                prev_snap_txg: 0x03,
                next_snap_obj: 0x04,
                snapnames_obj: 0x05,
                deadlist_obj: 0x06,
                creation_time: 0x07,
                creation_txg: 0x08,
                referenced_bytes: 0x09,
                compressed_bytes: 0x0A,
                uncompressed_bytes: 0x0B,
                unique_bytes: 0x0C,
                guid: 0x0D,
                flags: 0x01,
                bp: sample_bp(4),
                ext_obj: 0x0F,
            };
            Sample {
                bytes: d.encode().to_vec(),
                fields: field_map(vec![
                    ("dir_obj", le64(d.dir_obj)),
                    ("prev_snap_obj", le64(d.prev_snap_obj)),
                    ("prev_snap_txg", le64(d.prev_snap_txg)),
                    ("next_snap_obj", le64(d.next_snap_obj)),
                    ("snapnames_obj", le64(d.snapnames_obj)),
                    ("deadlist_obj", le64(d.deadlist_obj)),
                    ("creation_time", le64(d.creation_time)),
                    ("creation_txg", le64(d.creation_txg)),
                    ("referenced_bytes", le64(d.referenced_bytes)),
                    ("compressed_bytes", le64(d.compressed_bytes)),
                    ("uncompressed_bytes", le64(d.uncompressed_bytes)),
                    ("unique_bytes", le64(d.unique_bytes)),
                    ("guid", le64(d.guid)),
                    ("flags", le64(d.flags)),
                    ("bp", d.bp.encode().to_vec()),
                    ("ext_obj", le64(d.ext_obj)),
                ]),
            }
        }
        "ScanPhys" => {
            let s = ScanPhys {
                func: ScanFunc::Scrub,
                state: ScanPhase::Scanning,
                max_txg: 0x03,
                start_time: 0x04,
                end_time: 0x05,
                to_examine: 0x06,
                examined: 0x07,
                issued: 0x08,
                processed: 0x09,
                errors: 0x0A,
                bm_mos_obj: 0x0B,
                bm_obj: 0x0C,
                pause_time: 0x0D,
                target_guid: 0x0E,
                replaces_guid: 0x0F,
            };
            Sample {
                bytes: s.encode().to_vec(),
                fields: field_map(vec![
                    ("func", le64(s.func as u64)),
                    ("state", le64(s.state as u64)),
                    ("max_txg", le64(s.max_txg)),
                    ("start_time", le64(s.start_time)),
                    ("end_time", le64(s.end_time)),
                    ("to_examine", le64(s.to_examine)),
                    ("examined", le64(s.examined)),
                    ("issued", le64(s.issued)),
                    ("processed", le64(s.processed)),
                    ("errors", le64(s.errors)),
                    ("bm_mos_obj", le64(s.bm_mos_obj)),
                    ("bm_obj", le64(s.bm_obj)),
                    ("pause_time", le64(s.pause_time)),
                    ("target_guid", le64(s.target_guid)),
                    ("replaces_guid", le64(s.replaces_guid)),
                ]),
            }
        }
        "DnodePhys" => {
            let dn = sample_dnode();
            let mut bytes = vec![0u8; dnode::DNODE_SIZE];
            dn.encode(&mut bytes);
            let mut bonus = dn.bonus.clone();
            bonus.resize(dnode::DNODE_BONUS_SIZE, 0);
            Sample {
                bytes,
                fields: field_map(vec![
                    ("type", vec![dn.typ.code()]),
                    ("indblkshift", vec![dn.indblkshift]),
                    ("nlevels", vec![dn.nlevels]),
                    ("flags", vec![dn.flags]),
                    ("bonus_type", vec![dn.bonus_type.code()]),
                    ("bonus_len", le16(dn.bonus.len() as u16)),
                    ("datablk_sec", le32(dn.data_block_size / 512)),
                    ("maxblkid", le64(dn.maxblkid)),
                    ("used", le64(dn.used_bytes)),
                    ("root", dn.root.encode().to_vec()),
                    ("bonus", bonus),
                ]),
            }
        }
        "ObjsetPhys" => {
            let mut os = ObjsetPhys::new(ObjsetType::Zvol);
            os.meta_dnode.maxblkid = 3;
            os.meta_dnode.nlevels = 2;
            os.zil_header = std::array::from_fn(|i| i as u8 | 1);
            let mut meta = vec![0u8; dnode::DNODE_SIZE];
            os.meta_dnode.encode(&mut meta);
            Sample {
                bytes: os.encode(),
                fields: field_map(vec![
                    ("magic", b"tarnOBJS".to_vec()),
                    ("version", le64(tarn_format::FORMAT_VERSION)),
                    ("type", le64(os.typ.code())),
                    ("flags", le64(0)),
                    ("meta_dnode", meta),
                    ("zil_header", os.zil_header.to_vec()),
                ]),
            }
        }
        "MzapHeader" | "MzapEntry" => {
            let salt = 0x0102_0304_0506_0708;
            let mut b = vec![0u8; zap::MZAP_MIN_BLOCK_SIZE];
            zap::mzap_encode_header(&mut b, salt);
            let name_bytes = b"entry-name";
            let cookie = zap::make_cookie(zap::zap_hash(salt, name_bytes), 3);
            zap::mzap_put_entry(
                &mut b,
                0,
                Some(&MicroEntry {
                    value: 0x0A0B_0C0D,
                    cookie,
                    name: name_bytes,
                }),
            );
            if name == "MzapHeader" {
                Sample {
                    bytes: b[..zap::MZAP_HEADER_SIZE].to_vec(),
                    fields: field_map(vec![
                        ("block_type", b"tZAPmicr".to_vec()),
                        ("salt", le64(salt)),
                    ]),
                }
            } else {
                let mut padded = name_bytes.to_vec();
                padded.resize(zap::MZAP_NAME_MAX, 0);
                Sample {
                    bytes: b[zap::MZAP_HEADER_SIZE..zap::MZAP_HEADER_SIZE + zap::MZAP_ENT_SIZE]
                        .to_vec(),
                    fields: field_map(vec![
                        ("value", le64(0x0A0B_0C0D)),
                        ("cookie", le64(cookie)),
                        ("name_len", vec![name_bytes.len() as u8]),
                        ("name", padded),
                    ]),
                }
            }
        }
        "FatZapHeader" => {
            let h = FatHeader {
                salt: 0x0101,
                num_entries: 0x0202,
                num_leafs: 0x0303,
                next_free_blk: 0x0404,
                ptrtbl_blk: 0x0505,
                ptrtbl_numblks: 0x0606,
                ptrtbl_shift: 0x17,
            };
            let mut b = vec![0u8; zap::FZAP_BLOCK_SIZE];
            h.encode_into(&mut b);
            let table: Vec<u8> = (0..1024u64).flat_map(|i| (i + 1).to_le_bytes()).collect();
            b[zap::FZAP_EMBEDDED_PTRTBL_OFF..].copy_from_slice(&table);
            Sample {
                bytes: b,
                fields: field_map(vec![
                    ("block_type", b"tZAPhead".to_vec()),
                    ("salt", le64(h.salt)),
                    ("num_entries", le64(h.num_entries)),
                    ("num_leafs", le64(h.num_leafs)),
                    ("next_free_blk", le64(h.next_free_blk)),
                    ("ptrtbl_blk", le64(h.ptrtbl_blk)),
                    ("ptrtbl_numblks", le64(h.ptrtbl_numblks)),
                    ("ptrtbl_shift", vec![h.ptrtbl_shift]),
                    ("ptrtbl", table),
                ]),
            }
        }
        "ZapLeafHeader" => {
            let h = LeafHeader {
                prefix: 0x0506,
                prefix_len: 0x11,
                nentries: 0x0708,
                used: 0x090A,
            };
            let mut b = vec![0u8; zap::FZAP_BLOCK_SIZE];
            h.encode_into(&mut b);
            Sample {
                bytes: b[..zap::ZAP_LEAF_HEADER_SIZE].to_vec(),
                fields: field_map(vec![
                    ("block_type", b"tZAPleaf".to_vec()),
                    ("prefix", le64(h.prefix)),
                    ("prefix_len", vec![h.prefix_len]),
                    ("nentries", le16(h.nentries)),
                    ("used", le16(h.used)),
                ]),
            }
        }
        "ZapLeafEntryHeader" => {
            let key = b"some-key";
            let value = ZapValue::U64s(vec![1, 2, 3]);
            let cookie = 0x0102_0304_0506_0708;
            let mut b = vec![0u8; 256];
            let len = zap::leaf_put_entry(&mut b, 0, cookie, key, &value);
            assert_eq!(len, zap::leaf_entry_len(key, &value));
            assert_eq!(&b[12..12 + key.len()], key, "key follows the entry header");
            Sample {
                bytes: b[..zap::ZAP_LEAF_ENTRY_HEADER].to_vec(),
                fields: field_map(vec![
                    ("cookie", le64(cookie)),
                    ("key_len", vec![key.len() as u8]),
                    ("value_kind", vec![1]),
                    ("value_len", le16(3)),
                ]),
            }
        }
        "ZnodePhys" => {
            let t = |i: i64| Timespec::new(0x0101_0000 * i, 0x0002_0000 + i as u32);
            let z = ZnodePhys {
                mode: zpl::S_IFREG | 0o644,
                uid: 0x0102,
                gid: 0x0304,
                size: 0x0506,
                links: 0x0708,
                parent: 0x090A,
                flags: zpl::ZNODE_FLAG_XATTR,
                gen: 0x0B0C,
                rdev: 0x0D0E,
                xattr: 0x0F10,
                atime: t(1),
                mtime: t(2),
                ctime: t(3),
                crtime: t(4),
                sa_xattrs: vec![(b"user.k".to_vec(), b"v".to_vec())],
            };
            let enc = z.encode();
            let xlen = zpl::sa_xattrs_len(&z.sa_xattrs);
            assert_eq!(
                enc.len(),
                zpl::ZNODE_FIXED_SIZE + xlen,
                "bonus is 144 + sa_xattr_len bytes"
            );
            let ts = |t: Timespec| [le64(t.sec as u64), le32(t.nsec)].concat();
            Sample {
                bytes: enc[..zpl::ZNODE_FIXED_SIZE].to_vec(),
                fields: field_map(vec![
                    ("magic", b"tZN1".to_vec()),
                    ("mode", le32(z.mode)),
                    ("uid", le32(z.uid)),
                    ("gid", le32(z.gid)),
                    ("size", le64(z.size)),
                    ("links", le64(z.links)),
                    ("parent", le64(z.parent)),
                    ("flags", le64(z.flags)),
                    ("gen", le64(z.gen)),
                    ("rdev", le64(z.rdev)),
                    ("xattr", le64(z.xattr)),
                    ("atime", ts(z.atime)),
                    ("mtime", ts(z.mtime)),
                    ("ctime", ts(z.ctime)),
                    ("crtime", ts(z.crtime)),
                    ("sa_xattr_len", le16(xlen as u16)),
                ]),
            }
        }
        _ => return None,
    })
}

fn sample_label_config() -> LabelConfig {
    serde_json::from_str(&label_example(&doc()).1).expect("the doc's label example decodes")
}

/// A row of a layout table: line number, offset, size, field name.
type Row = (usize, u64, u64, String);

/// `(layout name, line, rows)` for every table after a layout marker.
fn doc_layouts(doc: &str) -> Vec<(String, usize, Vec<Row>)> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- layout:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let table = lines[i + 1..]
            .iter()
            .enumerate()
            .skip_while(|(_, l)| !l.starts_with('|'));
        let mut rows = Vec::new();
        for (j, row) in table.take_while(|(_, l)| l.starts_with('|')).skip(2) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let lineno = i + 2 + j;
            let parse = |s: &str| {
                parse_int(s).unwrap_or_else(|| panic!("FORMAT.md:{lineno}: bad number {s:?}"))
            };
            let field = cells[3].trim_matches('`').to_string();
            rows.push((lineno, parse(cells[1]), parse(cells[2]), field));
        }
        out.push((name.trim().to_string(), i + 1, rows));
    }
    out
}

fn check_layout(name: &str, line: usize, rows: &[Row], errors: &mut Vec<String>) {
    let Some(sample) = layout(name) else {
        errors.push(format!("FORMAT.md:{line}: unknown layout {name:?}"));
        return;
    };
    let mut next = 0u64;
    let mut seen = BTreeSet::new();
    for (lineno, off, size, field) in rows {
        let at = format!("FORMAT.md:{lineno}: {name}.{field}");
        if *off != next {
            errors.push(format!(
                "{at}: starts at {off}, previous row ends at {next}"
            ));
        }
        next = off + size;
        let Some(got) = sample.bytes.get(*off as usize..(off + size) as usize) else {
            errors.push(format!(
                "{at}: {off}+{size} is past the {}-byte structure",
                sample.bytes.len()
            ));
            continue;
        };
        let want = if field == "reserved" {
            vec![0u8; *size as usize]
        } else if let Some(w) = sample.fields.get(field.as_str()) {
            seen.insert(field.as_str());
            w.clone()
        } else {
            errors.push(format!("{at}: no such field"));
            continue;
        };
        if got != want {
            errors.push(format!(
                "{at}: bytes {off}..{} are {got:02x?}, the field encodes as {want:02x?}",
                off + size
            ));
        }
    }
    if next != sample.bytes.len() as u64 {
        errors.push(format!(
            "FORMAT.md:{line}: {name}: rows end at {next}, the structure is {} bytes",
            sample.bytes.len()
        ));
    }
    for field in sample.fields.keys().filter(|f| !seen.contains(*f)) {
        errors.push(format!(
            "FORMAT.md:{line}: {name}: field {field} has no row"
        ));
    }
}

const LAYOUTS: &[&str] = &[
    "Label",
    "LabelConfigHeader",
    "Uberblock",
    "BlockPtr",
    "Dva",
    "SpaceMapHeader",
    "SpaceMapEntry",
    "ObjsetPhys",
    "DnodePhys",
    "MzapHeader",
    "MzapEntry",
    "FatZapHeader",
    "ZapLeafHeader",
    "ZapLeafEntryHeader",
    "DslDirPhys",
    "DslDatasetPhys",
    "BpobjPhys",
    "ScanPhys",
    "ZnodePhys",
    "StreamRecord",
];

#[test]
fn layout_tables_match_the_encoders() {
    let doc = doc();
    let layouts = doc_layouts(&doc);
    let mut errors = Vec::new();
    for (name, line, rows) in &layouts {
        check_layout(name, *line, rows, &mut errors);
    }
    let documented: BTreeSet<&str> = layouts.iter().map(|(n, _, _)| n.as_str()).collect();
    for want in LAYOUTS.iter().filter(|l| !documented.contains(*l)) {
        errors.push(format!("FORMAT.md has no `<!-- layout: {want} -->` table"));
    }
    assert!(
        errors.is_empty(),
        "layout tables disagree with the encoders:\n{}",
        errors.join("\n")
    );
}

#[test]
fn layout_check_catches_a_wrong_offset() {
    // The checker itself must be able to fail: shift one row of a real table.
    let doc = doc();
    let (name, line, mut rows) = doc_layouts(&doc)
        .into_iter()
        .find(|(n, _, _)| n == "Uberblock")
        .expect("table");
    let mut errors = Vec::new();
    check_layout(&name, line, &rows, &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    rows[2].1 += 8;
    check_layout(&name, line, &rows, &mut errors);
    assert!(!errors.is_empty(), "a moved row went unnoticed");
}

// ------------------------------------------------------------------ label example

/// `(line, text)` of the ```json label-config block.
fn label_example(doc: &str) -> (usize, String) {
    let start = doc
        .lines()
        .position(|l| l.trim() == "```json label-config")
        .expect("FORMAT.md has a ```json label-config block");
    let body: Vec<&str> = doc
        .lines()
        .skip(start + 1)
        .take_while(|l| l.trim() != "```")
        .collect();
    (start + 1, body.join("\n"))
}

#[test]
fn label_example_is_a_real_label() {
    let (line, text) = label_example(&doc());
    let cfg: LabelConfig = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("FORMAT.md:{line}: label example does not decode: {e}"));
    let doc_json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let code_json = serde_json::to_value(&cfg).unwrap();
    assert_eq!(
        doc_json, code_json,
        "FORMAT.md:{line}: the example is not what the encoder writes"
    );
    let area = cfg
        .encode(label::LABEL_OFF_CONFIG)
        .expect("fits in a label");
    assert_eq!(
        LabelConfig::decode(&area, label::LABEL_OFF_CONFIG).unwrap(),
        cfg
    );
}

#[test]
fn unknown_names_and_wrong_values_fail() {
    // The fact checker must be able to fail too.
    assert_eq!(fact("NO_SUCH_CONSTANT"), None);
    assert_eq!(fact("compression.zstd-20"), None);
    assert_eq!(fact("BP_OFF_BIRTH"), Some(Val::Int(64)));
    assert_ne!(fact("BP_OFF_BIRTH"), parse_val("65"));
    assert_eq!(fact("compression.zstd-3"), parse_val("0x23"));
    assert_eq!(fact("UBERBLOCK_MAGIC"), parse_val("\"tarnUBER\""));
}
