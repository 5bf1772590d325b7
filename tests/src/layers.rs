//! The import rule of ARCHITECTURE.md, checked: every top-level module of
//! a crate states the modules it may use (`crate::x`), the table has no
//! circle, and any import outside a module's list is an error. A module
//! missing from the table is an error too, so a new folder is placed on
//! purpose.
//!
//! Read from the source text: every `crate::NAME` path outside comments,
//! and the top-level names of `use crate::{...}` groups. Names that are not
//! modules of the table (items of the crate root, such as a re-export in
//! lib.rs) are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One crate's source folder and, for each of its top-level modules, the
/// modules it may use.
#[derive(Debug, Clone)]
pub struct Layers<'a> {
    pub src: PathBuf,
    pub allowed: &'a [(&'a str, &'a [&'a str])],
}

/// One import that runs against the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForbiddenImport {
    /// The file, relative to the crate's source folder.
    pub file: PathBuf,
    pub from: String,
    pub to: String,
}

impl std::fmt::Display for ForbiddenImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: `{}` imports `crate::{}`, which is not among the modules it may use",
            self.file.display(),
            self.from,
            self.to
        )
    }
}

/// What a check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    pub forbidden: Vec<ForbiddenImport>,
    /// Top-level modules the table does not list.
    pub unlisted: Vec<String>,
    /// A circle in the table itself (modules in order, the first again at
    /// the end), if any.
    pub circle: Option<Vec<String>>,
}

impl Layers<'_> {
    fn may_use(&self, module: &str) -> Option<&[&str]> {
        self.allowed
            .iter()
            .find(|(m, _)| *m == module)
            .map(|(_, uses)| *uses)
    }

    /// A circle among the table's allowances: the folders must form none.
    fn circle(&self) -> Option<Vec<String>> {
        fn visit<'a>(
            layers: &'a Layers<'a>,
            m: &'a str,
            path: &mut Vec<&'a str>,
            done: &mut BTreeSet<&'a str>,
        ) -> Option<Vec<String>> {
            if let Some(at) = path.iter().position(|p| *p == m) {
                let mut c: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
                c.push(m.to_string());
                return Some(c);
            }
            if !done.insert(m) {
                return None;
            }
            path.push(m);
            for &next in layers.may_use(m).unwrap_or(&[]) {
                if let Some(c) = visit(layers, next, path, done) {
                    return Some(c);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        self.allowed
            .iter()
            .find_map(|(m, _)| visit(self, m, &mut Vec::new(), &mut done))
    }

    /// Every import against the table under the source folder, the
    /// modules found there that the table does not list, and a circle in
    /// the table.
    pub fn check(&self) -> std::io::Result<Findings> {
        let mut findings = Findings {
            circle: self.circle(),
            ..Findings::default()
        };
        let mut unlisted = BTreeSet::new();
        for file in rust_files(&self.src)? {
            let rel = file.strip_prefix(&self.src).unwrap_or(&file).to_path_buf();
            let Some(from) = top_module(&rel) else {
                continue;
            };
            let Some(uses) = self.may_use(&from) else {
                unlisted.insert(from);
                continue;
            };
            let text = std::fs::read_to_string(&file)?;
            for to in crate_imports(&text) {
                let is_module = self.may_use(&to).is_some();
                if to != from && is_module && !uses.contains(&to.as_str()) {
                    findings.forbidden.push(ForbiddenImport {
                        file: rel.clone(),
                        from: from.clone(),
                        to,
                    });
                }
            }
        }
        findings.unlisted = unlisted.into_iter().collect();
        Ok(findings)
    }
}

/// The top-level module a file belongs to (`ring/backward.rs` → `ring`);
/// None for the crate root (lib.rs, main.rs), which may use everything.
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Source text without `//` comments (doc comments included) and string
/// literals, so a path in prose or in a message is not read as an import.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = '\0';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_str {
                if c == '"' && prev != '\\' {
                    in_str = false;
                }
                prev = if prev == '\\' && c == '\\' { '\0' } else { c };
                continue;
            }
            if c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' {
                in_str = true;
                prev = '\0';
                continue;
            }
            out.push(c);
        }
        out.push('\n');
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names a file takes from `crate::`.
pub fn crate_imports(text: &str) -> BTreeSet<String> {
    let code = code_only(text);
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        // `flightrec_crate::x` is another crate's path.
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let after = rest.trim_start();
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    let name = ident_at(item.trim_start_matches(['{', ',', ' ', '\n']).trim());
                    if !name.is_empty() && name != "self" {
                        out.insert(name.to_string());
                    }
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            let name = ident_at(after);
            if !name.is_empty() {
                out.insert(name.to_string());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_read_from_paths_and_groups_but_not_comments_or_strings() {
        let text = "use crate::abi::{self, X};\n\
                    use crate::{\n    ring::records,\n    host::{clock, modules},\n    self,\n};\n\
                    // crate::control is only mentioned\n\
                    /// [`crate::api`] in a doc comment\n\
                    let m = \"crate::daemon in a string\";\n\
                    let t = crate::tracking::now();\n\
                    use flightrec_crate::fleet;\n";
        let got: Vec<String> = crate_imports(text).into_iter().collect();
        assert_eq!(got, ["abi", "host", "ring", "tracking"]);
    }

    #[test]
    fn an_import_outside_the_table_is_found_and_one_inside_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("upper")).unwrap();
        std::fs::write(src.join("lib.rs"), "pub mod lower; pub mod upper;").unwrap();
        std::fs::write(src.join("lower.rs"), "use crate::shared::X;\n").unwrap();
        std::fs::write(src.join("shared.rs"), "pub struct X;\n").unwrap();
        std::fs::write(src.join("upper/mod.rs"), "use crate::lower;\n").unwrap();
        let layers = Layers {
            src: src.to_path_buf(),
            allowed: &[
                ("shared", &[]),
                ("lower", &["shared"]),
                ("upper", &["lower", "shared"]),
            ],
        };
        assert_eq!(layers.check().unwrap(), Findings::default());

        // The deliberate mistake: the lower floor names the upper one.
        std::fs::write(
            src.join("lower.rs"),
            "use crate::shared::X;\nuse crate::{upper::Y};\n",
        )
        .unwrap();
        std::fs::write(src.join("new.rs"), "").unwrap();
        let found = layers.check().unwrap();
        assert_eq!(
            found.forbidden,
            [ForbiddenImport {
                file: "lower.rs".into(),
                from: "lower".into(),
                to: "upper".into(),
            }]
        );
        assert_eq!(
            found.forbidden[0].to_string(),
            "lower.rs: `lower` imports `crate::upper`, which is not among the modules it may use"
        );
        assert_eq!(found.unlisted, ["new"]);
    }

    #[test]
    fn a_circle_in_the_table_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let layers = Layers {
            src: dir.path().to_path_buf(),
            allowed: &[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &[])],
        };
        assert_eq!(
            layers.check().unwrap().circle,
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
    }
}
