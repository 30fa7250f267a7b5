//! `cargo xtask wit-check`: every item of the public WIT says what it does.
//!
//! A line-based reading of `wit/*.wit` (std only, like the rest of xtask; the
//! WIT is plain enough): interfaces, worlds, resources, functions, records and
//! their fields, enums, variants and flags and their cases, type aliases each
//! need a `///` line right above them (`@since`-style gates may sit between).
//! A single-line body (`enum e { a, b }`) leaves its members undocumented.
//! wasm-tools then parses the package, so a comment cannot break the WIT, and
//! the consumer world `imports` must import exactly what `driver` exports
//! (and `imports-async` what `driver-async` exports). The generated
//! `wit/driver-async.wit` is counted like the rest and must be current.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::{output, Ctx, Result};

/// One WIT item that needs a doc comment.
#[derive(Debug, PartialEq)]
pub struct Item {
    pub file: String,
    pub line: usize,
    /// "func", "record", "field", "case", ...
    pub kind: &'static str,
    /// Qualified: `interface.resource.func`, `record.field`.
    pub name: String,
    pub documented: bool,
}

/// What an open `{` belongs to.
#[derive(Clone, Copy, PartialEq)]
enum Block {
    /// interface, world or resource: functions and type definitions.
    Scope,
    /// record, enum, variant or flags: one member per entry.
    Members(&'static str),
}

/// The items of one `.wit` source, in order.
pub fn items(file: &str, source: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut stack: Vec<(Block, String)> = Vec::new();
    let mut doc = false;
    for (i, raw) in source.lines().enumerate() {
        let line = raw.trim();
        if line.starts_with("///") {
            doc = true;
            continue;
        }
        if line.starts_with('@') {
            continue; // a gate (`@since(...)`) between the doc and its item
        }
        let code = line.split("//").next().unwrap_or("").trim();
        if code.is_empty() {
            doc = false; // a blank line or a plain comment detaches a doc
            continue;
        }
        let mut push = |kind: &'static str, name: String, documented: bool| {
            out.push(Item {
                file: file.to_string(),
                line: i + 1,
                kind,
                name,
                documented,
            })
        };
        let scope: Vec<String> = stack.iter().map(|(_, n)| n.clone()).collect();
        let qualify = |name: &str| {
            let mut parts = scope.clone();
            parts.push(name.to_string());
            parts.join(".")
        };
        let words: Vec<&str> = code.split_whitespace().collect();
        let top = stack.last().map(|(b, _)| *b);
        if code.starts_with('}') {
            stack.pop();
        } else if let Some(Block::Members(kind)) = top {
            for (n, member) in members(code).into_iter().enumerate() {
                push(kind, qualify(member), doc && n == 0);
            }
        } else if let [keyword @ ("interface" | "world" | "resource" | "record" | "enum"
        | "variant" | "flags"), name, ..] = words.as_slice()
        {
            let name = name.trim_end_matches(['{', ';']);
            let (kind, block) = match *keyword {
                "interface" => ("interface", Block::Scope),
                "world" => ("world", Block::Scope),
                "resource" => ("resource", Block::Scope),
                "record" => ("record", Block::Members("field")),
                "enum" => ("enum", Block::Members("case")),
                "variant" => ("variant", Block::Members("case")),
                _ => ("flags", Block::Members("case")),
            };
            push(kind, qualify(name), doc);
            match (code.find('{'), code.rfind('}')) {
                (Some(open), Some(close)) if close > open => {
                    // One line, `enum e { a, b }`: its members cannot carry docs.
                    if let Block::Members(kind) = block {
                        let inner = qualify(name);
                        for member in members(&code[open + 1..close]) {
                            push(kind, format!("{inner}.{member}"), false);
                        }
                    }
                }
                (Some(_), _) => stack.push((block, name.to_string())),
                _ => {}
            }
        } else if let ["type", name, ..] = words.as_slice() {
            push("type", qualify(name), doc);
        } else if let Some(name) = function(code) {
            push("func", qualify(name), doc);
        }
        // Anything else (package, use, import/export/include, the rest of a
        // long signature) needs no doc of its own.
        doc = false;
    }
    out
}

/// The member names on one line of a record, enum, variant or flags body.
fn members(code: &str) -> Vec<&str> {
    code.split(',')
        .map(|m| {
            let end = m.find([':', '(']).unwrap_or(m.len());
            m[..end].trim()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

/// `name: func(...)`, `name: static func(...)`, `constructor(...)`.
fn function(code: &str) -> Option<&str> {
    if code.starts_with("constructor(") {
        return Some("constructor");
    }
    let (name, rest) = code.split_once(':')?;
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("static ").unwrap_or(rest).trim_start();
    let rest = rest.strip_prefix("async ").unwrap_or(rest).trim_start();
    let is_func = rest.starts_with("func(") || rest.starts_with("func (");
    (is_func && !name.contains(char::is_whitespace)).then_some(name.trim())
}

/// The `import`/`export` targets of `world`, as (direction, target), sorted.
pub fn world_items(source: &str, world: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in source.lines().map(str::trim) {
        let code = line.split("//").next().unwrap_or("").trim();
        if !inside {
            inside = code.strip_prefix("world ").is_some_and(|rest| {
                rest.trim_end_matches('{').trim() == world && rest.ends_with('{')
            });
            continue;
        }
        if code.starts_with('}') {
            break;
        }
        if let Some((dir, target)) = code.trim_end_matches(';').split_once(' ') {
            if dir == "import" || dir == "export" {
                out.push((dir.to_string(), target.trim().to_string()));
            }
        }
    }
    out.sort();
    out
}

fn wit_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wit"))
        .collect();
    files.sort();
    Ok(files)
}

/// Counts documented items, lists the rest, and has wasm-tools parse the package.
pub fn check(ctx: &Ctx) -> Result<()> {
    let dir = ctx.root.join("wit");
    let mut all = Vec::new();
    // (exporting world, importing world, its exports, its imports).
    let mut pairs = [
        ("driver", "imports", Vec::new(), Vec::new()),
        ("driver-async", "imports-async", Vec::new(), Vec::new()),
    ];
    for path in wit_files(&dir)? {
        let source = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let file = format!(
            "wit/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        all.extend(items(&file, &source));
        for (exporter, importer, exported, imported) in &mut pairs {
            exported.extend(world_items(&source, exporter));
            imported.extend(world_items(&source, importer));
        }
    }
    let missing: Vec<&Item> = all.iter().filter(|i| !i.documented).collect();
    let funcs = all.iter().filter(|i| i.kind == "func");
    let funcs_total = funcs.clone().count();
    let funcs_doc = funcs.filter(|i| i.documented).count();
    for i in &missing {
        println!(
            "  {}:{}: undocumented {} {}",
            i.file, i.line, i.kind, i.name
        );
    }
    println!(
        "  {} of {} documented ({funcs_doc} of {funcs_total} functions)",
        all.len() - missing.len(),
        all.len()
    );
    let mut cmd = Command::new(ctx.venv_bin("wasm-tools"));
    cmd.args(["component", "wit"]).arg(&dir);
    output(&mut cmd).map_err(|e| format!("wasm-tools does not accept wit/: {e}"))?;
    println!("  wasm-tools component wit wit/: ok");
    let names = |items: &[(String, String)], dir: &str| -> Vec<String> {
        let mut v: Vec<String> = items
            .iter()
            .filter(|(d, _)| d == dir)
            .map(|(_, t)| t.clone())
            .collect();
        v.sort();
        v
    };
    for (exporter, importer, exported, imported) in &pairs {
        let (exports, imports) = (names(exported, "export"), names(imported, "import"));
        if exports.is_empty() || exports != imports || imported.len() != imports.len() {
            return Err(format!(
                "world {importer} must import exactly what world {exporter} exports: \
                 {exporter} exports {exports:?}, {importer} has {imported:?}"
            ));
        }
        println!("  world {importer} imports what world {exporter} exports");
    }
    crate::witasync::check_current(&dir)?;
    println!(
        "  wit/{} is current (cargo xtask wit-async)",
        crate::witasync::FILE
    );
    if !missing.is_empty() {
        return Err(format!("{} WIT items have no doc comment", missing.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(src: &str) -> Vec<(String, bool)> {
        items("t.wit", src)
            .into_iter()
            .map(|i| (format!("{} {}", i.kind, i.name), i.documented))
            .collect()
    }

    #[test]
    fn reads_a_worlds_imports_and_exports() {
        let src = "/// W.\nworld w {\n    /// T.\n    import t;\n    export c; // x\n}\nworld v {\n    import z;\n}\n";
        let want = [("export", "c"), ("import", "t")];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(world_items(src, "w"), want);
        assert!(world_items(src, "nope").is_empty());
    }

    #[test]
    fn finds_every_kind_and_its_doc() {
        let src = "package a:b@0.1.0;\n\
            /// I.\n\
            interface i {\n\
                use t.{x};\n\
                /// R.\n\
                record r {\n\
                    /// F.\n\
                    f: u32,\n\
                    g: option<x>,\n\
                }\n\
                enum e { a, b }\n\
                variant v {\n\
                    /// C.\n\
                    c(list<u8>),\n\
                }\n\
                /// Res.\n\
                resource res {\n\
                    /// Open.\n\
                    @since(version = 0.1.0)\n\
                    open: static func(a: string) -> result<res, x>;\n\
                    // not a doc\n\
                    m: func();\n\
                }\n\
                /// T.\n\
                \n\
                type t = u8;\n\
            }\n\
            world w { import i; }\n";
        let got = names(src);
        let want = [
            ("interface i", true),
            ("record i.r", true),
            ("field i.r.f", true),
            ("field i.r.g", false),
            ("enum i.e", false),
            ("case i.e.a", false),
            ("case i.e.b", false),
            ("variant i.v", false),
            ("case i.v.c", true),
            ("resource i.res", true),
            ("func i.res.open", true),
            ("func i.res.m", false),
            ("type i.t", false),
            ("world w", false),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|(n, d)| (n.to_string(), *d)).collect();
        assert_eq!(got, want);
    }
}
