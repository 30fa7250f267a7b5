//! `cargo xtask layers`: the layering rule of `src/`, checked on every
//! `crate::` path (a `use` line or a path inside code).
//!
//! From the bottom: the sans-I/O core, `runtime` (the only I/O), the engine,
//! the API objects, and `component` (the WIT skin). A module imports its own
//! layer and the ones below it, never one above, so no circle of imports
//! spans two layers. A module below `component` names what it imports by the
//! module that defines it, not through a re-export of the crate root, and
//! every module has a layer here: a new module fails the check until it is
//! given one. Test code (`#[cfg(test)] mod ... { }`, `tests.rs`) may use
//! anything and is not read. std only, and plain text: a `crate::` path is
//! found wherever it stands, in `use` lines and in code alike.

use std::fs;
use std::path::Path;

use crate::run::{Ctx, Result};

/// The layers, bottom first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    Core,
    Runtime,
    Engine,
    Api,
    Component,
    /// `fuzzing`: entry points for the fuzzer, above everything (not in the
    /// component, not an API).
    Tools,
}

/// The sans-I/O core: takes values, returns values.
const CORE: &[&str] = &[
    "wire",
    "uri",
    "auth",
    "dns",
    "tls",
    "handshake",
    "sdam",
    "csot",
    "retryable",
    "backpressure",
    "concern",
    "causal_consistency",
    "versioned_api",
    "object_id",
    "deadline",
    "logging",
    "monitoring",
    "load_balancer",
    "error",
    "write_result",
    "warm",
];
const ENGINE: &[&str] = &[
    "executor",
    "topology",
    "conn",
    "cmap",
    "session",
    "operation",
    "discovery",
];
const API: &[&str] = &[
    "client",
    "collection",
    "database",
    "cursor",
    "change_stream",
    "gridfs",
    "bulk_write",
];

/// The layer of a module path (`["client", "inner"]`), or `None` for a
/// name that is not a module of this crate's rule.
pub fn layer_of(path: &[&str]) -> Option<Layer> {
    let first = *path.first()?;
    Some(match first {
        // The client's engine is `client::inner`; the rest of `client` is the face.
        "client" if path.get(1) == Some(&"inner") => Layer::Engine,
        "runtime" => Layer::Runtime,
        "component" => Layer::Component,
        "fuzzing" => Layer::Tools,
        m if CORE.contains(&m) => Layer::Core,
        m if ENGINE.contains(&m) => Layer::Engine,
        m if API.contains(&m) => Layer::Api,
        _ => return None,
    })
}

/// One import that breaks the rule.
#[derive(Debug, PartialEq)]
pub struct Violation {
    pub file: String,
    pub line: usize,
    pub message: String,
}

/// The module path of a source file under `src/` (`client/inner.rs` is
/// `["client", "inner"]`, `sdam/mod.rs` is `["sdam"]`).
pub fn module_of(relative: &str) -> Vec<String> {
    let trimmed = relative.trim_end_matches(".rs");
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The violations in one file's source; `relative` is its path under `src/`.
pub fn check_source(relative: &str, source: &str) -> Vec<Violation> {
    let module = module_of(relative);
    let names: Vec<&str> = module.iter().map(String::as_str).collect();
    let file = format!("src/{relative}");
    let mut out = Vec::new();
    let Some(own) = layer_of(&names) else {
        if names != ["lib"] {
            out.push(Violation {
                file,
                line: 1,
                message: format!(
                    "module `{}` has no layer: add it to host-tests/xtask/src/layers.rs \
                     and the README's layout",
                    names.join("::")
                ),
            });
        }
        return out;
    };
    for (line, path) in imports(source, &names) {
        let segments: Vec<&str> = path.iter().map(String::as_str).collect();
        if segments.first() == names.first() && !(names[0] == "client" && own == Layer::Engine) {
            continue; // inside one module
        }
        let shown = format!("crate::{}", segments.join("::"));
        let message = match layer_of(&segments) {
            None if own < Layer::Component => format!(
                "`{shown}` goes through the crate root (or a module without a layer): \
                 import it from the module that defines it"
            ),
            None => continue,
            Some(target) if target > own => format!(
                "the {} imports `{shown}`, which is in the {} above it",
                name(own),
                name(target)
            ),
            Some(_) => continue,
        };
        out.push(Violation {
            file: file.clone(),
            line,
            message,
        });
    }
    out
}

fn name(layer: Layer) -> &'static str {
    match layer {
        Layer::Core => "sans-I/O core",
        Layer::Runtime => "runtime",
        Layer::Engine => "engine",
        Layer::Api => "API objects",
        Layer::Component => "component",
        Layer::Tools => "fuzzing entry points",
    }
}

/// Every `crate::` and `super::` path of the non-test code, as (line, path
/// from the crate root); a group `crate::{a, b::c}` gives one path per item.
fn imports(source: &str, module: &[&str]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0i32;
    let mut cfg_test = false;
    let lines: Vec<&str> = source.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let code = strip_comment(lines[i]);
        let trimmed = code.trim();
        let opens = code.matches('{').count() as i32;
        let closes = code.matches('}').count() as i32;
        if let Some(d) = skip_depth {
            depth += opens - closes;
            if depth <= d {
                skip_depth = None;
            }
            i += 1;
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            cfg_test = true;
            i += 1;
            continue;
        }
        if cfg_test && is_mod(trimmed) {
            cfg_test = false;
            if opens > closes {
                skip_depth = Some(depth);
                depth += opens - closes;
            }
            i += 1;
            continue;
        }
        cfg_test = false;
        // A `use` may span lines: read it whole, to its `;`.
        let mut text = code.to_string();
        let first_line = i + 1;
        if trimmed.starts_with("use ")
            || trimmed.starts_with("pub use ")
            || trimmed.starts_with("pub(crate) use ")
        {
            while !text.contains(';') && i + 1 < lines.len() {
                i += 1;
                text.push(' ');
                text.push_str(strip_comment(lines[i]));
            }
        }
        depth += text.matches('{').count() as i32 - text.matches('}').count() as i32;
        for path in paths_in(&text, module) {
            out.push((first_line, path));
        }
        i += 1;
    }
    out
}

fn is_mod(line: &str) -> bool {
    let rest = line
        .strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line);
    rest.starts_with("mod ")
}

fn strip_comment(line: &str) -> &str {
    match line.trim_start().starts_with("//") {
        true => "",
        false => line,
    }
}

/// The paths `crate::...` and `super::...` in one piece of code.
fn paths_in(text: &str, module: &[&str]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for (prefix, base) in [("crate::", 0usize), ("super::", 1)] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix) {
            let start = from + at;
            from = start + prefix.len();
            // `crate::` must start a path, not end another name.
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric()
                    || bytes[start - 1] == b'_'
                    || bytes[start - 1] == b':')
            {
                continue;
            }
            let root: Vec<String> = match base {
                0 => Vec::new(),
                _ => {
                    if module.len() < 2 {
                        continue; // `super` of a top module is the crate root: lib.rs
                    }
                    module[..module.len() - 1]
                        .iter()
                        .map(|s| s.to_string())
                        .collect()
                }
            };
            for tail in tree(&text[from..]) {
                let mut path = root.clone();
                path.extend(tail);
                if !path.is_empty() {
                    out.push(path);
                }
            }
        }
    }
    out
}

/// The paths of a use tree at the start of `s`: `a::b`, or `{a, b::{c, d}}`
/// (each item's first two segments are enough for the rule).
fn tree(s: &str) -> Vec<Vec<String>> {
    let s = s.trim_start();
    if let Some(rest) = s.strip_prefix('{') {
        let mut out = Vec::new();
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.extend(tree(&rest[item_start..i]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(tree(&rest[item_start..i]));
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return out;
    }
    let mut path = Vec::new();
    let mut rest = s;
    loop {
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        path.push(rest[..end].to_string());
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with('{') => {
                return tree(r)
                    .into_iter()
                    .map(|t| path.iter().cloned().chain(t).collect())
                    .collect();
            }
            Some(r) => rest = r,
            None => break,
        }
    }
    match path.as_slice() {
        [] => Vec::new(),
        [only] if only == "self" => Vec::new(),
        _ => vec![path],
    }
}

/// Every violation under `src_dir`, files in order.
pub fn check_tree(src_dir: &Path) -> Result<Vec<Violation>> {
    let mut files = Vec::new();
    collect(src_dir, src_dir, &mut files)?;
    files.sort();
    let mut out = Vec::new();
    for relative in files {
        let path = src_dir.join(&relative);
        let source = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.extend(check_source(&relative, &source));
    }
    Ok(out)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if path.is_dir() {
            if name != "testdata" {
                collect(root, &path, out)?;
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            let relative = path.strip_prefix(root).map_err(|e| e.to_string())?;
            out.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

pub fn check(ctx: &Ctx) -> Result<()> {
    let violations = check_tree(&ctx.root.join("src"))?;
    for v in &violations {
        println!("  {}:{}: {}", v.file, v.line, v.message);
    }
    match violations.len() {
        0 => {
            println!("  src/: every import reads top to bottom (component, API objects, engine, runtime, core)");
            Ok(())
        }
        n => Err(format!(
            "{n} imports break the layering rule (README, Layout)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(file: &str, source: &str) -> Vec<String> {
        check_source(file, source)
            .into_iter()
            .map(|v| format!("{}:{}", v.line, v.message))
            .collect()
    }

    #[test]
    fn a_core_module_importing_the_engine_fails_with_its_line() {
        let src = "use crate::error::Result;\nuse crate::operation::int_field;\n";
        let got = messages("csot.rs", src);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(
            got[0].starts_with("2:the sans-I/O core imports `crate::operation::int_field`"),
            "{got:?}"
        );
    }

    #[test]
    fn groups_paths_in_code_and_multi_line_uses_are_read() {
        let src = "use crate::{\n    error::Error,\n    collection::WriteConcern,\n};\nfn f() { let _ = crate::runtime::now(); }\n";
        let got = messages("concern.rs", src);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(
            got[0].contains("crate::collection::WriteConcern"),
            "{got:?}"
        );
        assert!(
            got[1].starts_with("5:") && got[1].contains("crate::runtime::now"),
            "{got:?}"
        );
    }

    #[test]
    fn the_engine_may_not_import_the_api_face_of_the_client() {
        let ok = "use crate::client::inner::ClientInner;\nuse crate::runtime;\n";
        assert!(messages("executor.rs", ok).is_empty());
        let bad = "use crate::client::Client;\n";
        assert_eq!(messages("session/mod.rs", bad).len(), 1);
        // The engine part of the client reaching its face through `super`.
        let up = "use super::Client;\nuse crate::topology::Topology;\n";
        let got = messages("client/inner.rs", up);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].contains("crate::client::Client"), "{got:?}");
        // The face imports its engine freely.
        assert!(messages(
            "client/mod.rs",
            "use inner::ClientInner;\nuse crate::client::inner::X;\n"
        )
        .is_empty());
    }

    #[test]
    fn root_re_exports_and_unknown_modules_are_refused_below_the_component() {
        let got = messages("handshake.rs", "fn f() -> crate::ErrorKind { todo!() }\n");
        assert_eq!(got.len(), 1);
        assert!(got[0].contains("through the crate root"), "{got:?}");
        assert!(messages("component/mod.rs", "use crate::Client;\n").is_empty());
        let got = messages("newthing.rs", "");
        assert!(got[0].contains("has no layer"), "{got:?}");
    }

    #[test]
    fn test_modules_and_comments_are_not_read() {
        let src = "use crate::error::Error;\n// crate::collection::X in a comment\n#[cfg(test)]\nmod tests {\n    use crate::client::Client;\n    fn f() {\n    }\n}\n";
        assert!(messages("sdam/mod.rs", src).is_empty());
        // Code after a test module is read again.
        let after = format!("{src}fn g() {{ crate::cmap::f() }}\n");
        assert_eq!(messages("sdam/mod.rs", &after).len(), 1);
    }

    #[test]
    fn upward_imports_are_allowed_only_downward() {
        assert!(messages("runtime/tcp.rs", "use crate::error::Error;\n").is_empty());
        assert_eq!(
            messages("runtime/tcp.rs", "use crate::conn::Connection;\n").len(),
            1
        );
        assert!(messages(
            "collection/mod.rs",
            "use crate::executor::x;\nuse crate::cursor::Cursor;\n"
        )
        .is_empty());
        assert_eq!(
            messages("collection/mod.rs", "use crate::component::x;\n").len(),
            1
        );
    }
}
