//! `ARCHITECTURE.md` checked against the code, so the map cannot drift
//! from the territory (as `tarn-format/tests/format_doc.rs` does for
//! `docs/FORMAT.md`).
//!
//! Every `code span` of the document that names something in the tree
//! must exist:
//!
//! - a path of items (`Spa::commit`, `tarn_pool::tunables`,
//!   `import::open`, `BlockStore::read(bp)`): each segment resolves — a
//!   crate, a module (a file, a directory or an inline `mod`), or a type
//!   defined or implemented there — and the last one is a module, a type,
//!   or a `fn`/`const`/`static`/variant/field defined where the one
//!   before it lives;
//! - a constant (`SCREAMING_CASE`), a type (`CamelCase`) or a snake_case
//!   item with an underscore (`read_pieces`): defined somewhere in
//!   `crates/` or `vendor/`;
//! - a file or directory (`engine/mounts`, `feed.rs`, `docs/FORMAT.md`,
//!   `tarn-dsl/tests/crash.rs`): present.
//!
//! Names that are not tarn's — Linux flags, OpenZFS functions — are
//! listed in [`EXTERNAL`]; one-word lowercase spans (`fsync`, `scrub`),
//! commands and property assignments are prose and are not checked.
//! A failure names the line of the document and the span.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Names the document quotes that belong to Linux, Rust or OpenZFS.
const EXTERNAL: &[&str] = &[
    "CLOCK_REALTIME_COARSE",
    "O_DIRECT",
    "RWF_DSYNC",
    "FUSE_NOTIFY_STORE",
    "None",
    "current_time",
    "dmu_sync",
    "dmu_zfetch",
    "dsl_scan",
    "enable_uring",
    "zfs_rangelock",
    "zio_dva_throttle",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One source file and what it defines.
struct Source {
    /// Path relative to the repository root.
    rel: String,
    /// The crate it belongs to (`tarn_pool`), from `crates/<name>/`.
    krate: String,
    /// `fn`, `const`, `static`, `mod`, `macro_rules!` names.
    items: BTreeSet<String>,
    /// `struct`, `enum`, `trait`, `type` names.
    types: BTreeSet<String>,
    /// Types with an `impl` block here.
    impls: BTreeSet<String>,
    /// Enum variants and struct fields (approximated by line shape).
    members: BTreeSet<String>,
    /// Upper-case string literals (environment variable names).
    literals: BTreeSet<String>,
    /// Modules this file is (its stem, or its directory for `mod.rs` and
    /// `lib.rs`, or the crate for `lib.rs`), plus inline `mod`s.
    modules: BTreeSet<String>,
}

fn ident_after<'a>(line: &'a str, keyword: &str) -> Option<&'a str> {
    let at = line.find(keyword)?;
    let before = &line[..at];
    if !before.is_empty() && !before.ends_with([' ', '(', '\t']) {
        return None;
    }
    let rest = &line[at + keyword.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

fn parse(rel: String, krate: String, text: &str) -> Source {
    let mut s = Source {
        rel,
        krate,
        items: BTreeSet::new(),
        types: BTreeSet::new(),
        impls: BTreeSet::new(),
        members: BTreeSet::new(),
        literals: BTreeSet::new(),
        modules: BTreeSet::new(),
    };
    for (k, piece) in text.split('"').enumerate() {
        if k % 2 == 1
            && !piece.is_empty()
            && piece.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        {
            s.literals.insert(piece.to_string());
        }
    }
    let path = Path::new(&s.rel);
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = path
        .parent()
        .and_then(|p| p.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap_or_default();
    match stem.as_str() {
        "mod" => {
            s.modules.insert(dir);
        }
        "lib" => {
            s.modules.insert(s.krate.clone());
        }
        _ => {
            s.modules.insert(stem);
        }
    }
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for kw in ["fn ", "const ", "static ", "mod ", "macro_rules! "] {
            if let Some(name) = ident_after(code, kw) {
                s.items.insert(name.to_string());
                if kw == "mod " {
                    s.modules.insert(name.to_string());
                }
            }
        }
        for kw in ["struct ", "enum ", "trait ", "type "] {
            if let Some(name) = ident_after(code, kw) {
                s.types.insert(name.to_string());
            }
        }
        if let Some(rest) = code.strip_prefix("impl") {
            // `impl Foo`, `impl<'a> Foo<'a>`, `impl Trait for Foo`.
            let head = rest.split('{').next().unwrap_or_default();
            let target = head.rsplit(" for ").next().unwrap_or(head);
            let target = target.trim().trim_start_matches(|c| c != ' ' && c != '>');
            let target = target.trim_start_matches(['>', ' ']);
            let name: String = target
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let name = if name.is_empty() {
                head.trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect()
            } else {
                name
            };
            s.impls.insert(name);
        }
        // A variant (`Name,` `Name {` `Name(`) or a field (`name: T`).
        let word: String = code
            .trim_start_matches("pub ")
            .trim_start_matches("pub(crate) ")
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !word.is_empty() {
            let after = code
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ")[word.len()..]
                .trim_start();
            if after.is_empty()
                || after.starts_with([',', '{', '(', ':'])
                    && !after.starts_with("::")
                    && !code.ends_with(';')
            {
                s.members.insert(word);
            }
        }
    }
    s
}

fn sources() -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![root().join("crates"), root().join("vendor")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let parts: Vec<&str> = rel.split('/').collect();
            let krate = match parts.as_slice() {
                ["crates", name, ..] | ["vendor", name, ..] => name.replace('-', "_"),
                _ => String::new(),
            };
            let text = std::fs::read_to_string(&p).unwrap();
            out.push(parse(rel, krate, &text));
        }
    }
    out
}

struct Index {
    sources: Vec<Source>,
    crates: BTreeSet<String>,
}

impl Index {
    fn any(&self, f: impl Fn(&Source) -> bool) -> bool {
        self.sources.iter().any(f)
    }

    /// The files `seg` resolves to within `scope` (indices of sources).
    fn resolve(&self, seg: &str, scope: &[usize]) -> Vec<usize> {
        if self.crates.contains(seg) {
            return (0..self.sources.len())
                .filter(|&i| self.sources[i].krate == seg)
                .collect();
        }
        let modules: Vec<usize> = scope
            .iter()
            .copied()
            .filter(|&i| self.sources[i].modules.contains(seg))
            .collect();
        // A module's files: the file itself and those under its directory.
        let mut files: BTreeSet<usize> = modules.iter().copied().collect();
        for &i in &modules {
            let s = &self.sources[i];
            let dir = Path::new(&s.rel).with_extension("");
            for &j in scope {
                if Path::new(&self.sources[j].rel).starts_with(&dir) {
                    files.insert(j);
                }
            }
        }
        // A type: where it is defined or implemented, in those crates.
        let crates: BTreeSet<&str> = scope
            .iter()
            .filter(|&&i| self.sources[i].types.contains(seg))
            .map(|&i| self.sources[i].krate.as_str())
            .collect();
        for (i, s) in self.sources.iter().enumerate() {
            if crates.contains(s.krate.as_str()) && (s.types.contains(seg) || s.impls.contains(seg))
            {
                files.insert(i);
            }
        }
        files.into_iter().collect()
    }

    fn defines(&self, files: &[usize], name: &str) -> bool {
        files.iter().any(|&i| {
            let s = &self.sources[i];
            s.items.contains(name) || s.members.contains(name) || s.types.contains(name)
        })
    }

    fn check_path(&self, path: &str) -> Result<(), String> {
        let segs: Vec<&str> = path.split("::").collect();
        let mut scope: Vec<usize> = (0..self.sources.len()).collect();
        for (n, seg) in segs.iter().enumerate() {
            let found = self.resolve(seg, &scope);
            let last = n + 1 == segs.len();
            if last && (!found.is_empty() || self.defines(&scope, seg)) {
                return Ok(());
            }
            if found.is_empty() {
                return Err(format!("`{seg}` not found in `{}`", segs[..n].join("::")));
            }
            scope = found;
        }
        Ok(())
    }

    fn check_name(&self, name: &str) -> bool {
        self.any(|s| {
            s.items.contains(name)
                || s.types.contains(name)
                || s.members.contains(name)
                || s.literals.contains(name)
        })
    }

    fn check_file(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        let root = root();
        let mut candidates = vec![root.join(path)];
        for dir in ["crates", "vendor"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
                continue;
            };
            candidates.push(root.join(dir).join(path));
            for e in entries.flatten() {
                candidates.push(e.path().join(path));
                candidates.push(e.path().join("src").join(path));
                candidates.push(e.path().join("src").join(format!("{path}.rs")));
            }
        }
        if candidates.iter().any(|c| c.exists()) {
            return true;
        }
        // A bare file name anywhere in the sources.
        !path.contains('/') && self.any(|s| s.rel.ends_with(&format!("/{path}")))
    }
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// What a span names, if it names code at all.
enum Span<'a> {
    Path(&'a str),
    Name(&'a str),
    File(&'a str),
    Crate(&'a str),
}

fn classify(span: &str) -> Option<Span<'_>> {
    // `read(bp)` names `read`.
    let name = span.split('(').next().unwrap_or(span);
    if span.contains(['=', ' ', '…', '*']) && !span.contains('(') {
        return None;
    }
    if name.contains("::") && name.split("::").all(is_ident) {
        return Some(Span::Path(name));
    }
    if span.starts_with('/') || span.starts_with('-') || span.contains(' ') {
        return None;
    }
    if span.contains('/') || span.ends_with(".rs") || span.ends_with(".md") {
        return Some(Span::File(span));
    }
    if span == "tarn" || span.starts_with("tarn-") && is_ident(&span.replace('-', "_")) {
        return Some(Span::Crate(span));
    }
    if !is_ident(name) {
        return None;
    }
    let upper = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let camel = name.starts_with(|c: char| c.is_ascii_uppercase()) && !upper;
    let snake = name.contains('_') && name.chars().all(|c| !c.is_ascii_uppercase());
    (upper && name.contains('_') || camel || snake).then_some(Span::Name(name))
}

/// The code spans of the document, with the line each starts on; fenced
/// blocks are pictures and commands, not references. A span may wrap onto
/// the next line (its line break reads as a space).
fn spans(doc: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    let mut fenced = false;
    for (n, line) in doc.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (k, piece) in line.split('`').enumerate() {
            if k > 0 {
                // A backtick: a span opens or closes here.
                match open.take() {
                    Some(span) => out.push(span),
                    None => open = Some((n + 1, String::new())),
                }
            }
            if let Some((_, text)) = open.as_mut() {
                text.push_str(piece);
            }
        }
        if let Some((_, text)) = open.as_mut() {
            text.push(' ');
        }
    }
    out
}

#[test]
fn every_code_item_the_map_names_exists() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let index = Index {
        crates: sources().iter().map(|s| s.krate.clone()).collect(),
        sources: sources(),
    };
    let mut failures = BTreeMap::new();
    let mut checked = 0;
    for (line, span) in spans(&doc) {
        let name = span.split('(').next().unwrap_or_default();
        if EXTERNAL.contains(&name) {
            continue;
        }
        let verdict = match classify(&span) {
            None => continue,
            Some(Span::Path(p)) => index.check_path(p),
            Some(Span::Name(n)) => index
                .check_name(n)
                .then_some(())
                .ok_or_else(|| "no such item".to_string()),
            Some(Span::File(f)) => index
                .check_file(f)
                .then_some(())
                .ok_or_else(|| "no such file".to_string()),
            Some(Span::Crate(c)) => root()
                .join("crates")
                .join(c)
                .is_dir()
                .then_some(())
                .ok_or_else(|| "no such crate".to_string()),
        };
        checked += 1;
        if let Err(why) = verdict {
            failures.insert(line, format!("ARCHITECTURE.md:{line}: `{span}`: {why}"));
        }
    }
    assert!(
        checked > 100,
        "only {checked} spans checked: is the parser broken?"
    );
    assert!(
        failures.is_empty(),
        "ARCHITECTURE.md names code that does not exist (rename the doc with the code, \
         or list a name that is not tarn's in EXTERNAL):\n{}",
        failures.into_values().collect::<Vec<_>>().join("\n")
    );
}

/// The checker itself: a renamed item is caught.
#[test]
fn a_renamed_item_is_caught() {
    let index = Index {
        crates: sources().iter().map(|s| s.krate.clone()).collect(),
        sources: sources(),
    };
    assert!(index.check_path("Spa::commit").is_ok());
    assert!(index.check_path("Spa::commit_renamed_away").is_err());
    assert!(index.check_path("tarn_pool::tunables").is_ok());
    assert!(index.check_path("tarn_pool::tunables_gone").is_err());
    assert!(index
        .check_path("tarn_pool::tunables::TXG_TIMEOUT_MS")
        .is_ok());
    assert!(index
        .check_path("tarn_pool::tunables::NO_SUCH_KNOB")
        .is_err());
    assert!(index.check_path("import::open").is_ok());
    assert!(index.check_path("Layout::tolerated_failures").is_ok());
    assert!(index.check_name("PREDICT_PERCENTILE"));
    assert!(!index.check_name("PREDICT_PERCENTILE_GONE"));
    assert!(index.check_file("engine/mounts"));
    assert!(!index.check_file("engine/scan"));
    assert!(classify("zpool offline [-t]").is_none());
    assert!(matches!(
        classify("BlockStore::read(bp)"),
        Some(Span::Path(_))
    ));
}
