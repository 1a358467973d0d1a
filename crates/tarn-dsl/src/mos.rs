//! The meta object set (MOS) as the dataset layer uses it.
//!
//! Every MOS access of this crate goes through these few functions: named
//! u64 entries in ZAP objects, bonus-only records, and byte objects. They
//! keep the ZAP calling conventions in one place.

use tarn_dmu::{DmuError, Objset, ZapValue};
use tarn_format::ObjType;

use crate::DslError;

/// Block size of the MOS's ZAP and byte objects.
pub const MOS_BLOCK_SIZE: u32 = 16 << 10;

pub fn zap_create(mos: &Objset, typ: ObjType) -> Result<u64, DslError> {
    Ok(mos.zap_create(typ)?)
}

pub fn zap_set_u64(mos: &Objset, obj: u64, key: &str, v: u64) -> Result<(), DslError> {
    Ok(mos.zap_update(obj, key.as_bytes(), &ZapValue::u64(v))?)
}

pub fn zap_get_u64(mos: &Objset, obj: u64, key: &str) -> Result<Option<u64>, DslError> {
    match mos.zap_lookup(obj, key.as_bytes()) {
        Ok(v) => v
            .as_single_u64()
            .map(Some)
            .ok_or_else(|| DslError::Corrupted(format!("MOS entry '{key}' is not a number"))),
        Err(DmuError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub fn zap_set_str(mos: &Objset, obj: u64, key: &str, v: &str) -> Result<(), DslError> {
    let value = ZapValue::Bytes(v.as_bytes().to_vec());
    Ok(mos.zap_update(obj, key.as_bytes(), &value)?)
}

pub fn zap_get_str(mos: &Objset, obj: u64, key: &str) -> Result<Option<String>, DslError> {
    match mos.zap_lookup(obj, key.as_bytes()) {
        Ok(ZapValue::Bytes(b)) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| DslError::Corrupted(format!("MOS entry '{key}' is not UTF-8"))),
        Ok(_) => Err(DslError::Corrupted(format!(
            "MOS entry '{key}' is not a string"
        ))),
        Err(DmuError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Removes `key`; returns whether it was there.
pub fn zap_remove(mos: &Objset, obj: u64, key: &str) -> Result<bool, DslError> {
    match mos.zap_remove(obj, key.as_bytes()) {
        Ok(()) => Ok(true),
        Err(DmuError::NotFound) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Every (key, value) of a ZAP, keys as UTF-8 strings.
pub fn zap_list(mos: &Objset, obj: u64) -> Result<Vec<(String, ZapValue)>, DslError> {
    let mut out = Vec::new();
    for entry in mos.zap_cursor(obj, 0) {
        let (k, v, _cookie) = entry?;
        let key =
            String::from_utf8(k).map_err(|_| DslError::Corrupted("MOS key is not UTF-8".into()))?;
        out.push((key, v));
    }
    Ok(out)
}

/// Creates a bonus-only object holding `bonus`.
pub fn record_create(mos: &Objset, typ: ObjType, bonus: &[u8]) -> Result<u64, DslError> {
    let obj = mos.object_create(typ, MOS_BLOCK_SIZE, bonus.len())?;
    mos.set_bonus(obj, bonus)?;
    Ok(obj)
}

pub fn object_free(mos: &Objset, obj: u64) -> Result<(), DslError> {
    Ok(mos.object_free(obj)?)
}
