//! Datasets as `zfs list`/`zfs get` see them, and the property checks that
//! need the pool's current state.
//!
//! Selection order is zfs(8)'s: each named dataset, then (with `-r`/`-d`)
//! its descendants depth-first, siblings sorted by name — `tank/a`,
//! `tank/a/b`, `tank/a-b` — so a child always follows its parent.
//!
//! The daemon has already parsed every value to its canonical form with
//! [`tarn_dsl::props`]; what is left for the engine are the rules that
//! depend on the dataset as it is now (zfs(8) wording in each message):
//! a quota below what is already used, a reservation beyond what is
//! available, and volume-only properties on a filesystem.

use tarn_dsl::props;
use tarn_dsl::{Pool, PropSource};

use crate::api::{self, PropRow, PropSourceKind};
use crate::backend::BackendError;

use super::dsl_err;

/// The SOURCE column for a property source.
pub fn source_text(source: &PropSource) -> String {
    match source {
        PropSource::Local => "local".into(),
        PropSource::Received => "received".into(),
        PropSource::Default => "default".into(),
        PropSource::Inherited(from) => format!("inherited from {from}"),
        PropSource::None => "-".into(),
    }
}

/// Which `-s` filter a SOURCE text belongs to.
pub fn source_kind(source: &str) -> PropSourceKind {
    match source {
        "local" => PropSourceKind::Local,
        "default" => PropSourceKind::Default,
        "received" => PropSourceKind::Received,
        s if s.starts_with("inherited") => PropSourceKind::Inherited,
        _ => PropSourceKind::None,
    }
}

/// One property of one dataset, in protocol form.
pub fn prop_value(pool: &Pool, ds: &str, prop: &str) -> Result<api::PropValue, BackendError> {
    let v = pool.dataset_prop(ds, prop).map_err(dsl_err)?;
    Ok(api::PropValue {
        value: v.value,
        source: source_text(&v.source),
    })
}

/// `root` and, down to `depth` levels (`None`: all), its descendants,
/// depth-first with siblings sorted by name.
pub fn subtree(pool: &Pool, root: &str, depth: Option<u32>) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_string(), 0u32)];
    while let Some((name, level)) = stack.pop() {
        if depth.is_none_or(|max| level < max) {
            let children = pool.dataset_children(&name);
            stack.extend(children.into_iter().rev().map(|c| (c, level + 1)));
        }
        out.push(name);
    }
    out
}

/// Every dataset below `name` (not `name` itself), parents first.
pub fn descendants(pool: &Pool, name: &str) -> Vec<String> {
    let mut all = subtree(pool, name, None);
    all.remove(0);
    all
}

/// `zfs get` rows for one dataset. `props` empty means every property
/// (`all`); `sources` empty means every source.
pub fn get_rows(
    pool: &Pool,
    ds: &str,
    props_wanted: &[String],
    sources: &[PropSourceKind],
) -> Result<Vec<PropRow>, BackendError> {
    let all = props_wanted.is_empty();
    let user = if all {
        pool.dataset_user_props(ds)
    } else {
        Vec::new()
    };
    let names: Vec<&str> = if all {
        // `name` is a column, not a property `zfs get all` shows; user
        // properties set here or above follow the native ones.
        props::dataset_props()
            .iter()
            .map(|d| d.name)
            .filter(|n| *n != "name")
            .chain(user.iter().map(String::as_str))
            .collect()
    } else {
        props_wanted.iter().map(String::as_str).collect()
    };
    let mut rows = Vec::with_capacity(names.len());
    for prop in names {
        let value = match pool.dataset_prop(ds, prop) {
            Ok(v) => api::PropValue {
                value: v.value,
                source: source_text(&v.source),
            },
            Err(tarn_dsl::DslError::NoSuchDataset(n)) => {
                return Err(BackendError::NoSuchDataset(n))
            }
            // A property this build does not track (user properties):
            // zfs(8) prints `-` for an unset one.
            Err(_) if all => continue,
            Err(_) => api::PropValue {
                value: String::new(),
                source: "-".into(),
            },
        };
        if !sources.is_empty() && !sources.contains(&source_kind(&value.source)) {
            continue;
        }
        rows.push(PropRow {
            name: ds.to_string(),
            property: prop.to_string(),
            value: value.value,
            source: value.source,
        });
    }
    Ok(rows)
}

/// A size property of `ds`; 0 for one that does not apply to its type
/// (a volume's quota).
fn size_of(pool: &Pool, ds: &str, prop: &str) -> Result<u64, BackendError> {
    match pool.dataset_prop(ds, prop) {
        Ok(v) => Ok(v.value.parse().unwrap_or(0)),
        Err(tarn_dsl::DslError::Invalid(_)) => Ok(0),
        Err(e) => Err(dsl_err(e)),
    }
}

/// Checks a property given at `zfs create` of a filesystem or (`volume`)
/// a volume (the dataset does not exist yet): it must apply to the type.
pub fn check_create_value(prop: &str, volume: bool) -> Result<(), BackendError> {
    if prop.contains(':') {
        return Ok(());
    }
    let fits = if volume {
        props::applies_to_volume(prop)
    } else {
        props::applies_to_filesystem(prop)
    };
    if !fits || prop == "volsize" {
        return Err(BackendError::Invalid(format!(
            "'{prop}' does not apply to datasets of this type"
        )));
    }
    Ok(())
}

/// Checks `zfs set prop=value` against the dataset as it is now. `value`
/// is canonical (sizes in bytes, `0` for `none`).
pub fn check_set_value(pool: &Pool, ds: &str, prop: &str, value: &str) -> Result<(), BackendError> {
    let volume = pool.is_volume(ds);
    if !(volume && prop == "volsize") {
        check_create_value(prop, volume)?;
    }
    if value == "auto" && prop == "refreservation" && !volume {
        return Err(BackendError::Invalid(
            "'refreservation=auto' applies only to volumes".into(),
        ));
    }
    let n: u64 = match prop {
        "quota" | "refquota" | "reservation" => value.parse().unwrap_or(0),
        "refreservation" if value == "auto" => return Ok(()),
        "refreservation" => value.parse().unwrap_or(0),
        _ => return Ok(()),
    };
    if n == 0 {
        return Ok(());
    }
    let below_use =
        || BackendError::Invalid("size is less than current used or reserved space".into());
    let beyond_avail = || BackendError::Invalid("size is greater than available space".into());
    match prop {
        "quota" => {
            if n < size_of(pool, ds, "used")? || n < size_of(pool, ds, "reservation")? {
                return Err(below_use());
            }
        }
        "refquota" => {
            if n < size_of(pool, ds, "referenced")? {
                return Err(below_use());
            }
        }
        _ => {
            // A reservation may grow by what is available now, and never
            // past the dataset's own quota.
            let current = size_of(pool, ds, prop)?;
            let avail = size_of(pool, ds, "available")?;
            let quota = size_of(pool, ds, "quota")?;
            if n > avail.saturating_add(current) || (quota > 0 && n > quota) {
                return Err(beyond_avail());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_as_zfs_get() {
        assert_eq!(
            source_text(&PropSource::Inherited("tank/a".into())),
            "inherited from tank/a"
        );
        assert_eq!(source_text(&PropSource::None), "-");
        assert_eq!(
            source_kind("inherited from tank"),
            PropSourceKind::Inherited
        );
        assert_eq!(source_kind("local"), PropSourceKind::Local);
        assert_eq!(source_kind("-"), PropSourceKind::None);
    }

    #[test]
    fn properties_apply_to_their_types() {
        assert!(check_create_value("volsize", false).is_err());
        assert!(check_create_value("volblocksize", false).is_err());
        assert!(check_create_value("recordsize", false).is_ok());
        assert!(check_create_value("volblocksize", true).is_ok());
        assert!(check_create_value("recordsize", true).is_err());
        assert!(check_create_value("mountpoint", true).is_err());
        assert!(check_create_value("compression", true).is_ok());
        assert!(check_create_value("com.example:x", true).is_ok());
    }
}
