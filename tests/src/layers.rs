//! The import rule of ARCHITECTURE.md, checked: the top-level modules of a
//! crate are ranked, and a module may only name (`crate::x`) modules of a
//! lower rank, so the folders form no circle. Modules of one rank are
//! shared plain data that may not name each other either.
//!
//! Read from the source text: every `crate::NAME` path outside comments,
//! and the top-level names of `use crate::{...}` groups. Names that are not
//! ranked modules (items of the crate root, such as an error type defined
//! in lib.rs) are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One crate's source folder and its modules from the bottom up; the
/// modules of one inner slice share a rank.
#[derive(Debug, Clone)]
pub struct Layers<'a> {
    pub src: PathBuf,
    pub ranks: &'a [&'a [&'a str]],
}

/// One import that runs against the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackwardImport {
    /// The file, relative to the crate's source folder.
    pub file: PathBuf,
    pub from: String,
    pub to: String,
}

impl std::fmt::Display for BackwardImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: `{}` imports `crate::{}`, which is not below it",
            self.file.display(),
            self.from,
            self.to
        )
    }
}

impl Layers<'_> {
    fn rank(&self, module: &str) -> Option<usize> {
        self.ranks.iter().position(|r| r.contains(&module))
    }

    /// Every backward import under the source folder, and the top-level
    /// modules found there that have no rank (a new folder must be given
    /// one).
    pub fn check(&self) -> std::io::Result<(Vec<BackwardImport>, Vec<String>)> {
        let mut backward = Vec::new();
        let mut unranked = BTreeSet::new();
        for file in rust_files(&self.src)? {
            let rel = file.strip_prefix(&self.src).unwrap_or(&file).to_path_buf();
            let Some(from) = top_module(&rel) else {
                continue;
            };
            let Some(from_rank) = self.rank(&from) else {
                unranked.insert(from);
                continue;
            };
            let text = std::fs::read_to_string(&file)?;
            for to in crate_imports(&text) {
                if to == from {
                    continue;
                }
                if let Some(to_rank) = self.rank(&to)
                    && to_rank >= from_rank
                {
                    backward.push(BackwardImport {
                        file: rel.clone(),
                        from: from.clone(),
                        to,
                    });
                }
            }
        }
        Ok((backward, unranked.into_iter().collect()))
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
    fn a_backward_import_is_found_and_a_forward_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::create_dir_all(src.join("upper")).unwrap();
        std::fs::write(src.join("lib.rs"), "pub mod lower; pub mod upper;").unwrap();
        std::fs::write(src.join("lower.rs"), "use crate::shared::X;\n").unwrap();
        std::fs::write(src.join("shared.rs"), "pub struct X;\n").unwrap();
        std::fs::write(src.join("upper/mod.rs"), "use crate::lower;\n").unwrap();
        let layers = Layers {
            src: src.to_path_buf(),
            ranks: &[&["shared"], &["lower"], &["upper"]],
        };
        let (backward, unranked) = layers.check().unwrap();
        assert!(backward.is_empty(), "{backward:?}");
        assert!(unranked.is_empty());

        // The deliberate mistake: the lower floor names the upper one.
        std::fs::write(
            src.join("lower.rs"),
            "use crate::shared::X;\nuse crate::{upper::Y};\n",
        )
        .unwrap();
        std::fs::write(src.join("new.rs"), "").unwrap();
        let (backward, unranked) = layers.check().unwrap();
        assert_eq!(
            backward,
            [BackwardImport {
                file: "lower.rs".into(),
                from: "lower".into(),
                to: "upper".into(),
            }]
        );
        assert_eq!(
            backward[0].to_string(),
            "lower.rs: `lower` imports `crate::upper`, which is not below it"
        );
        assert_eq!(unranked, ["new"]);
    }

    #[test]
    fn modules_of_one_rank_may_not_name_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path();
        std::fs::write(src.join("a.rs"), "use crate::b::X;\n").unwrap();
        std::fs::write(src.join("b.rs"), "pub struct X;\n").unwrap();
        let layers = Layers {
            src: src.to_path_buf(),
            ranks: &[&["a", "b"]],
        };
        assert_eq!(layers.check().unwrap().0.len(), 1);
    }
}
