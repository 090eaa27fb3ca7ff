//! The shape of the source: each crate under `crates/` holds the layers [`CRATES`] gives it and
//! depends only on crates of lower layers, every `crate::` import points down the layers the
//! README's Development section states, no files import each other in a loop, engines never
//! touch clap, and files and functions stay small enough to read.
//!
//! Cargo already refuses a crate that depends on one above it in a loop; these checks keep the
//! order the README states, and the order inside each crate, where cargo sees nothing. Every
//! crate re-exports the modules of the crates below it under their own names, so the module
//! names are one tree across crates: `crate::model` means the same module in each. The import
//! graph is read with `syn` from the module trees `src/lib.rs` and each `crates/*/src/lib.rs`
//! declare (following `mod` items and `#[path]`), so `use` trees, paths in code, paths inside
//! macro calls and `super::` all count. Code under `#[cfg(test)]` is left out: a unit test may
//! reach up to build what it checks without making the product depend on it (within its crate:
//! a unit test cannot reach a crate its own does not depend on).

use proc_macro2::{TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::visit::Visit;

/// The layers, top to bottom, by module path; a file belongs to the layer of the longest prefix
/// of its module path named here. A file may import from its own layer (modules on one line are
/// peers; the loop test keeps them from leaning on each other both ways) and from any layer below
/// its own, never from above.
/// This table and the README's "Layers" list say the same thing (a test below checks).
const LAYERS: &[(&str, &[&str])] = &[
    ("entry", &["crate"]),
    ("commands", &["commands"]),
    ("cli", &["cli"]),
    // The engines, in the order they may call each other.
    ("doctor's engines", &["sweep"]),
    ("pair measurement", &["matrix"]),
    // The options of the measuring engines sit with the plan that checks them.
    (
        "harness",
        &[
            "measure",
            "arrivals",
            "plan",
            "watchdog",
            "sweep::options",
            "sweep::split",
            "matrix::options",
        ],
    ),
    ("backends", &["backend"]),
    // The store every run can be kept in, and the fleet judged from it.
    ("fleet history", &["history"]),
    ("reports", &["report"]),
    ("diagnosis", &["diagnose"]),
    ("expectations", &["expect"]),
    ("live machine", &["live"]),
    ("analysis", &["analysis"]),
    ("import", &["import"]),
    // Pure formatting of documents.
    ("render", &["render"]),
    // Documents and the model they are made of.
    (
        "documents",
        &[
            "documents",
            "model",
            "coll",
            "dtype",
            "units",
            "stats",
            "data",
            "flags",
            "exit",
            "term",
            "secrets",
            "bounded",
            "buildinfo",
            "fault_injection",
        ],
    ),
];

/// The library crates under `crates/` (each `ncclprobe-NAME`), bottom to top, and the modules
/// each declares at its root; the root package holds `cli` and `commands`. A crate may depend
/// only on crates whose modules all sit in layers below (or beside) every module of its own.
const CRATES: &[(&str, &[&str])] = &[
    (
        "core",
        &[
            "documents",
            "model",
            "coll",
            "dtype",
            "units",
            "stats",
            "data",
            "flags",
            "exit",
            "term",
            "secrets",
            "bounded",
            "buildinfo",
            "fault_injection",
        ],
    ),
    ("render", &["render"]),
    ("import", &["import"]),
    ("backend", &["backend"]),
    ("history", &["history"]),
    ("analysis", &["live", "analysis", "expect", "diagnose"]),
    ("report", &["report"]),
    (
        "measure",
        &["measure", "arrivals", "plan", "watchdog", "matrix", "sweep"],
    ),
];

/// Most lines a file under `src/` (or the GPU test double) may have.
const MAX_FILE_LINES: usize = 600;
/// Most lines a function may have, signature to closing brace.
const MAX_FN_LINES: usize = 150;

/// One file of the crate and the module it is.
#[derive(Debug, Clone)]
struct SourceFile {
    module: Vec<String>,
    path: PathBuf,
    test_only: bool,
}

/// The crate's module tree: every module (file or inline) and the file it lives in.
#[derive(Debug, Default)]
struct Crate {
    files: Vec<SourceFile>,
    /// Module path (`a::b`, the root is empty) → index into `files`.
    modules: BTreeMap<Vec<String>, usize>,
    /// Names of `#[macro_export]` macros (reached as `crate::name` from any file).
    exported_macros: BTreeSet<String>,
}

fn cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| match &a.meta {
        syn::Meta::List(list) if a.path().is_ident("cfg") => {
            let text = list.tokens.to_string();
            let words: Vec<&str> = text
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .collect();
            words.contains(&"test") && !words.contains(&"not")
        }
        _ => false,
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|a| match &a.meta {
        syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

impl Crate {
    /// The module trees of the crates whose `src/` directories are `roots`, as one tree.
    fn load(roots: &[PathBuf]) -> Crate {
        let mut krate = Crate::default();
        for root in roots {
            krate.add_file(root.join("lib.rs"), Vec::new(), true, false);
        }
        krate
    }

    /// Registers `path` as module `module` and walks its `mod` items. `mod_rs`: the file owns
    /// its directory (lib.rs, mod.rs, a `#[path]` file), so children sit beside it.
    fn add_file(&mut self, path: PathBuf, module: Vec<String>, mod_rs: bool, test_only: bool) {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let index = self.files.len();
        self.files.push(SourceFile {
            module: module.clone(),
            path: path.clone(),
            test_only,
        });
        self.modules.entry(module.clone()).or_insert(index);
        let dir = if mod_rs {
            path.parent().unwrap().to_path_buf()
        } else {
            path.with_extension("")
        };
        self.walk_items(&file.items, &path, &dir, &module, index, test_only);
    }

    fn walk_items(
        &mut self,
        items: &[syn::Item],
        file: &Path,
        dir: &Path,
        module: &[String],
        index: usize,
        test_only: bool,
    ) {
        for item in items {
            if let syn::Item::Macro(m) = item {
                let exported = m.attrs.iter().any(|a| a.path().is_ident("macro_export"));
                if let (true, Some(name)) = (exported, &m.ident) {
                    self.exported_macros.insert(name.to_string());
                }
            }
            let syn::Item::Mod(m) = item else { continue };
            let mut child = module.to_vec();
            child.push(m.ident.to_string());
            let test_only = test_only || cfg_test(&m.attrs);
            match &m.content {
                Some((_, inner)) => {
                    self.modules.entry(child.clone()).or_insert(index);
                    let inner_dir = dir.join(m.ident.to_string());
                    self.walk_items(inner, file, &inner_dir, &child, index, test_only);
                }
                None => {
                    let (path, mod_rs) = match path_attr(&m.attrs) {
                        Some(p) => (file.parent().unwrap().join(p), true),
                        None => {
                            let flat = dir.join(format!("{}.rs", m.ident));
                            if flat.exists() {
                                (flat, false)
                            } else {
                                (dir.join(m.ident.to_string()).join("mod.rs"), true)
                            }
                        }
                    };
                    if self.modules.contains_key(&child) {
                        continue;
                    }
                    self.add_file(path, child, mod_rs, test_only);
                }
            }
        }
    }

    /// The file holding the longest prefix of `path` that is a module.
    fn file_of(&self, path: &[String]) -> Option<usize> {
        (0..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]).copied())
    }

    fn is_module(&self, path: &[String]) -> bool {
        self.modules.contains_key(path)
    }
}

/// One `crate::` import: where it is and which module it reaches.
#[derive(Debug, Clone)]
struct Import {
    from: usize,
    line: usize,
    target: Vec<String>,
}

/// Collects the imports of one file.
struct Imports<'a> {
    krate: &'a Crate,
    file: usize,
    /// The module the visitor is in (inline modules push onto it).
    module: Vec<String>,
    /// Names `use` brought into scope that stand for a module of this crate.
    aliases: BTreeMap<String, Vec<String>>,
    found: Vec<Import>,
    /// Lines (of non-test code) that name clap.
    clap_lines: Vec<usize>,
    /// Functions longer than allowed: (name, first line, lines).
    long_fns: Vec<(String, usize, usize)>,
}

impl Imports<'_> {
    /// The absolute module path `segments` means here, if it is this crate's.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let (first, rest) = segments.split_first()?;
        let base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.clone(),
            "super" => {
                let mut m = self.module.clone();
                let mut rest = rest;
                m.pop()?;
                while rest.first().is_some_and(|s| s == "super") {
                    m.pop()?;
                    rest = &rest[1..];
                }
                return Some(m.into_iter().chain(rest.iter().cloned()).collect());
            }
            name => {
                let mut child = self.module.clone();
                child.push(name.to_string());
                if self.krate.is_module(&child) {
                    child.pop();
                    child
                } else if let Some(alias) = self.aliases.get(name) {
                    return Some(alias.iter().chain(rest).cloned().collect());
                } else {
                    return None;
                }
            }
        };
        let skip = usize::from(first == "crate" || first == "self");
        Some(
            base.into_iter()
                .chain(segments[skip..].iter().cloned())
                .collect(),
        )
    }

    fn record(&mut self, segments: &[String], line: usize) {
        if segments.first().is_some_and(|s| s == "clap") {
            self.clap_lines.push(line);
        }
        // `#[macro_export]` macros live at the crate root whichever file defines them.
        if segments.len() == 2
            && segments[0] == "crate"
            && self.krate.exported_macros.contains(&segments[1])
        {
            return;
        }
        if let Some(target) = self.resolve(segments) {
            self.found.push(Import {
                from: self.file,
                line,
                target,
            });
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, line: usize) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, line);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                let full: Vec<String> = if name == "self" {
                    prefix.clone()
                } else {
                    prefix.iter().cloned().chain([name.clone()]).collect()
                };
                self.alias(
                    &full,
                    if name == "self" {
                        prefix.last()
                    } else {
                        Some(&name)
                    },
                );
                self.record(&full, line);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.alias(&full, Some(&r.rename.to_string()));
                self.record(&full, line);
            }
            syn::UseTree::Glob(_) => {
                let full = prefix.clone();
                self.record(&full, line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, line);
                }
            }
        }
    }

    fn alias(&mut self, full: &[String], name: Option<&String>) {
        if let (Some(name), Some(abs)) = (name, self.resolve(full)) {
            if self.krate.is_module(&abs) {
                self.aliases.insert(name.clone(), abs);
            }
        }
    }

    /// Paths written inside a macro call (`format!`, `matches!`, …) that syn leaves as tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) => {
                    let starts_path = i == 0
                        || !matches!(&trees[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
                    if starts_path {
                        let mut segments = vec![id.to_string()];
                        let mut j = i + 1;
                        while j + 2 < trees.len()
                            && matches!(&trees[j], TokenTree::Punct(p) if p.as_char() == ':')
                            && matches!(&trees[j + 1], TokenTree::Punct(p) if p.as_char() == ':')
                        {
                            match &trees[j + 2] {
                                TokenTree::Ident(next) => segments.push(next.to_string()),
                                _ => break,
                            }
                            j += 3;
                        }
                        if segments.len() > 1 {
                            self.record(&segments, id.span().start().line);
                        }
                        i = j;
                        continue;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn function(&mut self, name: &syn::Ident, span: proc_macro2::Span) {
        let (start, end) = (span.start().line, span.end().line);
        let lines = end + 1 - start;
        if lines > MAX_FN_LINES {
            self.long_fns.push((name.to_string(), start, lines));
        }
    }
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item::*;
    match item {
        Const(i) => &i.attrs,
        Enum(i) => &i.attrs,
        ExternCrate(i) => &i.attrs,
        Fn(i) => &i.attrs,
        ForeignMod(i) => &i.attrs,
        Impl(i) => &i.attrs,
        Macro(i) => &i.attrs,
        Mod(i) => &i.attrs,
        Static(i) => &i.attrs,
        Struct(i) => &i.attrs,
        Trait(i) => &i.attrs,
        TraitAlias(i) => &i.attrs,
        Type(i) => &i.attrs,
        Union(i) => &i.attrs,
        Use(i) => &i.attrs,
        _ => &[],
    }
}

impl<'ast> Visit<'ast> for Imports<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if cfg_test(item_attrs(item)) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // Files are visited on their own; inline modules here, in their own scope.
        if m.content.is_some() {
            self.module.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = syn::spanned::Spanned::span(u).start().line;
        self.use_tree(&mut Vec::new(), &u.tree, line);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            let line = syn::spanned::Spanned::span(path).start().line;
            self.record(&segments, line);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &a.meta {
            self.tokens(list.tokens.clone());
        }
        syn::visit::visit_attribute(self, a);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, syn::spanned::Spanned::span(f));
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if cfg_test(&f.attrs) {
            return;
        }
        self.function(&f.sig.ident, syn::spanned::Spanned::span(f));
        syn::visit::visit_impl_item_fn(self, f);
    }
}

/// Everything read off the tree.
struct Survey {
    krate: Crate,
    imports: Vec<Import>,
    clap: Vec<(usize, usize)>,
    long_fns: Vec<(usize, String, usize, usize)>,
}

fn survey(root: &Path) -> Survey {
    survey_all(&[root.to_path_buf()])
}

fn survey_all(roots: &[PathBuf]) -> Survey {
    let krate = Crate::load(roots);
    let mut imports = Vec::new();
    let mut clap = Vec::new();
    let mut long_fns = Vec::new();
    for (index, file) in krate.files.iter().enumerate() {
        if file.test_only {
            continue;
        }
        let text = std::fs::read_to_string(&file.path).unwrap();
        let ast = syn::parse_file(&text).unwrap();
        let mut visitor = Imports {
            krate: &krate,
            file: index,
            module: file.module.clone(),
            aliases: BTreeMap::new(),
            found: Vec::new(),
            clap_lines: Vec::new(),
            long_fns: Vec::new(),
        };
        // Two passes: the first learns the module aliases `use` brings in anywhere in the file.
        visitor.visit_file(&ast);
        visitor.found.clear();
        visitor.clap_lines.clear();
        visitor.long_fns.clear();
        visitor.visit_file(&ast);
        imports.extend(visitor.found);
        clap.extend(visitor.clap_lines.into_iter().map(|l| (index, l)));
        long_fns.extend(
            visitor
                .long_fns
                .into_iter()
                .map(|(n, start, len)| (index, n, start, len)),
        );
    }
    Survey {
        krate,
        imports,
        clap,
        long_fns,
    }
}

/// Index into `LAYERS` of a module path, and the prefix that placed it.
fn layer_of(module: &[String]) -> Option<(usize, Vec<String>)> {
    let mut best: Option<(usize, Vec<String>)> = None;
    for (index, (_, prefixes)) in LAYERS.iter().enumerate() {
        for prefix in prefixes.iter() {
            let parts: Vec<String> = if *prefix == "crate" {
                Vec::new()
            } else {
                prefix.split("::").map(str::to_string).collect()
            };
            let matches = if parts.is_empty() {
                module.is_empty()
            } else {
                module.starts_with(&parts)
            };
            if matches && best.as_ref().is_none_or(|(_, b)| parts.len() > b.len()) {
                best = Some((index, parts));
            }
        }
    }
    best
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_string()
    } else {
        format!("crate::{}", module.join("::"))
    }
}

impl Survey {
    fn rel(&self, file: usize) -> String {
        let path = &self.krate.files[file].path;
        path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Imports that point up the layers or sideways between modules of one layer.
    fn layer_violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for import in &self.imports {
            let from = &self.krate.files[import.from].module;
            let Some(target_file) = self.krate.file_of(&import.target) else {
                continue;
            };
            let to = &self.krate.files[target_file].module;
            let (Some((from_layer, from_unit)), Some((to_layer, to_unit))) =
                (layer_of(from), layer_of(to))
            else {
                continue;
            };
            let same_unit = from_unit == to_unit && !from_unit.is_empty();
            if same_unit || to_layer >= from_layer {
                continue;
            }
            out.push(format!(
                "{}:{}: {} ({}) imports {} ({}), a higher layer",
                self.rel(import.from),
                import.line,
                display(from),
                LAYERS[from_layer].0,
                display(&import.target),
                LAYERS[to_layer].0,
            ));
        }
        out.sort();
        out.dedup();
        out
    }

    /// Files no layer claims.
    fn unplaced(&self) -> Vec<String> {
        self.krate
            .files
            .iter()
            .filter(|f| !f.test_only && layer_of(&f.module).is_none())
            .map(|f| format!("{} ({})", f.path.display(), display(&f.module)))
            .collect()
    }

    /// File → files it imports (other than itself).
    fn graph(&self) -> BTreeMap<usize, BTreeSet<usize>> {
        let mut graph: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        for import in &self.imports {
            if let Some(to) = self.krate.file_of(&import.target) {
                if to != import.from && !self.krate.files[to].test_only {
                    graph.entry(import.from).or_default().insert(to);
                }
            }
        }
        graph
    }

    fn import_line(&self, from: usize, to: usize) -> usize {
        self.imports
            .iter()
            .filter(|i| i.from == from && self.krate.file_of(&i.target) == Some(to))
            .map(|i| i.line)
            .min()
            .unwrap_or(0)
    }
}

/// Strongly connected sets of files (Tarjan), largest first; singletons left out.
fn loops(graph: &BTreeMap<usize, BTreeSet<usize>>, nodes: usize) -> Vec<Vec<usize>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sets: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            let empty = BTreeSet::new();
            let edges: Vec<usize> = self
                .graph
                .get(&v)
                .unwrap_or(&empty)
                .iter()
                .copied()
                .collect();
            for w in edges {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    _ => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut set = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    set.push(w);
                    if w == v {
                        break;
                    }
                }
                if set.len() > 1 {
                    set.sort();
                    self.sets.push(set);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        next: 0,
        sets: Vec::new(),
    };
    for v in 0..nodes {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.sets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    t.sets
}

/// A pair of files may import each other when one of them says why, on a line reading
/// `mutual import with crate::other::module: <the reason>`.
fn pair_reason(survey: &Survey, a: usize, b: usize) -> bool {
    let says = |x: usize, y: usize| {
        let text = std::fs::read_to_string(&survey.krate.files[x].path).unwrap();
        let marker = format!(
            "mutual import with {}:",
            display(&survey.krate.files[y].module)
        );
        text.lines()
            .any(|l| l.contains(&marker) && l.split_once(&marker).unwrap().1.trim().len() > 10)
    };
    says(a, b) || says(b, a)
}

/// The trees under test: `src/` and each `crates/*/src/`, or another checkout's `src/` named by
/// `ARCHITECTURE_SRC` (to show what the checks say of an older, single-crate tree).
fn srcs() -> Vec<PathBuf> {
    if let Some(dir) = std::env::var_os("ARCHITECTURE_SRC") {
        return vec![PathBuf::from(dir)];
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("src")];
    out.extend(
        CRATES
            .iter()
            .map(|(dir, _)| root.join("crates").join(dir).join("src")),
    );
    out
}

fn loop_report(survey: &Survey) -> Vec<String> {
    let graph = survey.graph();
    let mut out = Vec::new();
    for set in loops(&graph, survey.krate.files.len()) {
        if set.len() == 2 && pair_reason(survey, set[0], set[1]) {
            continue;
        }
        let mut lines = vec![format!(
            "{} files import each other in a loop{}:",
            set.len(),
            if set.len() == 2 {
                " (a pair may, with the reason written on it: `mutual import with crate::…: why`)"
            } else {
                ""
            }
        )];
        for &from in &set {
            for &to in graph.get(&from).into_iter().flatten() {
                if set.contains(&to) {
                    lines.push(format!(
                        "  {}:{} → {}",
                        survey.rel(from),
                        survey.import_line(from, to),
                        survey.rel(to)
                    ));
                }
            }
        }
        out.push(lines.join("\n"));
    }
    out
}

fn fail_with(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what} ({}):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_import_points_down_the_layers() {
    let survey = survey_all(&srcs());
    fail_with("files no layer claims", &survey.unplaced());
    fail_with(
        "imports against the layer order (README, Development: Layers)",
        &survey.layer_violations(),
    );
}

#[test]
fn no_files_import_each_other_in_a_loop() {
    let survey = survey_all(&srcs());
    fail_with("import loops", &loop_report(&survey));
}

#[test]
fn only_commands_and_the_command_line_name_clap() {
    let survey = survey_all(&srcs());
    let allowed = |m: &[String]| layer_of(m).is_some_and(|(layer, _)| layer <= 2);
    let problems: Vec<String> = survey
        .clap
        .iter()
        .filter(|(file, _)| !allowed(&survey.krate.files[*file].module))
        .map(|(file, line)| format!("{}:{}: names clap", survey.rel(*file), line))
        .collect();
    fail_with(
        "clap outside cli (an engine takes its own options)",
        &problems,
    );
}

#[test]
fn files_and_functions_stay_readable() {
    let survey = survey_all(&srcs());
    let mut problems = Vec::new();
    let double = Path::new(env!("CARGO_MANIFEST_DIR")).join("doubles/gpu/src");
    let mut files: Vec<PathBuf> = survey.krate.files.iter().map(|f| f.path.clone()).collect();
    files.extend(
        walk(&double)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs")),
    );
    for path in files {
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        if lines > MAX_FILE_LINES {
            problems.push(format!(
                "{}: {lines} lines (at most {MAX_FILE_LINES})",
                path.display()
            ));
        }
    }
    for (file, name, start, len) in &survey.long_fns {
        problems.push(format!(
            "{}:{start}: fn {name} has {len} lines (at most {MAX_FN_LINES})",
            survey.rel(*file)
        ));
    }
    fail_with("files or functions too long", &problems);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The `ncclprobe-*` crates a manifest depends on (`[dependencies]`; dev- and build-dependencies
/// do not ship).
fn crate_dependencies(manifest: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    doc.get("dependencies")
        .and_then(|d| d.as_table())
        .map(|t| {
            t.keys()
                .filter_map(|k| k.strip_prefix("ncclprobe-").map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The modules a crate root declares with `mod` (re-exports of other crates' modules are not
/// declarations).
fn declared_modules(lib: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    let mut out: Vec<String> = file
        .items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) if !cfg_test(&m.attrs) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// What is wrong with the crates under `root/crates` against `crates`: a crate the table does
/// not name, a crate whose root declares other modules than the table says, a dependency on a
/// crate that is not lower in the table or holds a module of a higher layer than one of its
/// dependent's.
fn crate_problems(root: &Path, crates: &[(&str, &[&str])]) -> Vec<String> {
    let mut problems = Vec::new();
    let position = |name: &str| crates.iter().position(|(n, _)| *n == name);
    for entry in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if position(&name).is_none() {
            problems.push(format!(
                "crates/{name}: a crate the table (CRATES) does not name"
            ));
        }
    }
    let layer = |m: &str| layer_of(&[m.to_string()]).map(|(l, _)| l);
    for (index, (name, modules)) in crates.iter().enumerate() {
        let dir = root.join("crates").join(name);
        let mut want: Vec<String> = modules.iter().map(|m| m.to_string()).collect();
        want.sort();
        let have = declared_modules(&dir.join("src/lib.rs"));
        if have != want {
            problems.push(format!(
                "crates/{name}/src/lib.rs declares {have:?}, the table says {want:?}"
            ));
        }
        for dep in crate_dependencies(&dir.join("Cargo.toml")) {
            let Some(at) = position(&dep) else {
                problems.push(format!(
                    "crates/{name} depends on ncclprobe-{dep}, which the table does not name"
                ));
                continue;
            };
            if at >= index {
                problems.push(format!(
                    "crates/{name} depends on ncclprobe-{dep}, which is not below it in the table"
                ));
            }
            for ours in modules.iter() {
                for theirs in crates[at].1.iter() {
                    if let (Some(a), Some(b)) = (layer(ours), layer(theirs)) {
                        if b < a {
                            problems.push(format!(
                                "crates/{name} depends on ncclprobe-{dep}: `{theirs}` ({}) is above `{ours}` ({})",
                                LAYERS[b].0, LAYERS[a].0
                            ));
                        }
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn each_crate_holds_its_layers_and_depends_only_on_lower_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    fail_with(
        "crates against the layer order",
        &crate_problems(root, CRATES),
    );
    // The root package holds the layers above every crate, and nothing else.
    assert_eq!(
        declared_modules(&root.join("src/lib.rs")),
        vec!["cli".to_string(), "commands".to_string()]
    );
    // Every module a layer names is declared by exactly one crate, or the root package.
    let mut owners: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, modules) in CRATES {
        for m in modules.iter() {
            *owners.entry(m).or_default() += 1;
        }
    }
    for (_, prefixes) in LAYERS {
        for prefix in prefixes.iter() {
            let top = prefix.split("::").next().unwrap();
            if !matches!(top, "crate" | "cli" | "commands") {
                assert_eq!(
                    owners.get(top),
                    Some(&1),
                    "module `{top}`: crates declaring it"
                );
            }
        }
    }
}

#[test]
fn the_readme_states_the_same_layers() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("### Layers")
        .nth(1)
        .expect("README.md has a '### Layers' section under Development");
    let mut missing = Vec::new();
    for (name, prefixes) in LAYERS {
        for prefix in prefixes.iter() {
            if *prefix != "crate" && !section.contains(&format!("`{prefix}`")) {
                missing.push(format!("layer '{name}': module `{prefix}`"));
            }
        }
    }
    fail_with(
        "modules the README's Layers section does not name",
        &missing,
    );
}

/// The checks themselves: each fails on a tree that breaks its rule.
mod self_test {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn a_crate_that_depends_upward_or_is_not_in_the_table_is_named() {
        let manifest = |deps: &str| format!("[package]\nname = \"x\"\n\n[dependencies]\n{deps}\n");
        let dir = tree(&[
            (
                "crates/core/Cargo.toml",
                &manifest("ncclprobe-render = { path = \"../render\" }"),
            ),
            ("crates/core/src/lib.rs", "pub mod model;\n"),
            (
                "crates/render/Cargo.toml",
                &manifest("ncclprobe-core = { path = \"../core\" }"),
            ),
            (
                "crates/render/src/lib.rs",
                "pub use ncclprobe_core::model;\npub mod render;\n",
            ),
            ("crates/stray/Cargo.toml", &manifest("")),
            ("crates/stray/src/lib.rs", ""),
        ]);
        let table: &[(&str, &[&str])] = &[("core", &["model"]), ("render", &["render", "import"])];
        let problems = crate_problems(dir.path(), table);
        let has = |what: &str| problems.iter().any(|p| p.contains(what));
        assert!(has("crates/stray: a crate the table"), "{problems:#?}");
        assert!(
            has("crates/core depends on ncclprobe-render, which is not below it"),
            "{problems:#?}"
        );
        assert!(
            has("`render` (render) is above `model` (documents)"),
            "{problems:#?}"
        );
        assert!(
            has("crates/render/src/lib.rs declares [\"render\"]"),
            "{problems:#?}"
        );
        assert!(
            has("`import` (import) is above `model` (documents)"),
            "{problems:#?}"
        );
        assert_eq!(problems.len(), 5, "{problems:#?}");
    }

    #[test]
    fn an_engine_importing_the_cli_is_named_with_file_and_line() {
        let dir = tree(&[
            ("lib.rs", "pub mod cli;\npub mod sweep;\npub mod model;\n"),
            ("cli.rs", "pub struct Args;\n"),
            ("sweep/mod.rs", "mod plan;\npub fn run() {}\n"),
            ("sweep/plan.rs", "\n\nuse crate::cli::Args;\n"),
            ("model.rs", "use super::sweep;\n"),
        ]);
        let survey = survey(dir.path());
        let v = survey.layer_violations();
        assert_eq!(v.len(), 2, "{v:#?}");
        assert!(v[0].ends_with("model.rs:1: crate::model (documents) imports crate::sweep (doctor's engines), a higher layer"), "{v:#?}");
        assert!(
            v[1].contains("sweep/plan.rs:3: crate::sweep::plan"),
            "{v:#?}"
        );
        assert!(v[1].contains("imports crate::cli::Args (cli)"), "{v:#?}");
    }

    #[test]
    fn paths_in_code_macros_and_aliases_count_and_test_code_does_not() {
        let dir = tree(&[
            ("lib.rs", "pub mod cli;\npub mod render;\n"),
            ("cli/mod.rs", "pub mod args;\n"),
            ("cli/args.rs", "pub fn f() {}\n"),
            (
                "render.rs",
                "use crate::cli as c;\nfn a() { crate::cli::args::f(); }\nfn b() { format!(\"{}\", crate::cli::X); }\nfn d() { c::args::f(); }\n#[cfg(test)]\nmod tests { use crate::cli::args; }\n",
            ),
        ]);
        let survey = survey(dir.path());
        let lines: Vec<usize> = survey.imports.iter().map(|i| i.line).collect();
        assert_eq!(lines, vec![1, 2, 3, 4], "{:#?}", survey.imports);
        assert_eq!(survey.layer_violations().len(), 4);
    }

    #[test]
    fn a_loop_of_three_fails_and_a_pair_passes_only_with_its_reason() {
        let three = tree(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::X;\n"),
            ("b.rs", "use crate::c::X;\n"),
            ("c.rs", "use crate::a::X;\n"),
        ]);
        let report = loop_report(&survey(three.path()));
        assert_eq!(report.len(), 1, "{report:#?}");
        assert!(
            report[0].starts_with("3 files import each other"),
            "{report:#?}"
        );
        let pair = |reason: &str| {
            let dir = tree(&[
                ("lib.rs", "mod a;\nmod b;\n"),
                ("a.rs", &format!("{reason}\nuse crate::b::X;\n")),
                ("b.rs", "use crate::a::Y;\n"),
            ]);
            loop_report(&survey(dir.path())).len()
        };
        assert_eq!(pair(""), 1);
        assert_eq!(
            pair("// mutual import with crate::b: the trait and its one implementor"),
            0
        );
    }

    #[test]
    fn clap_below_the_cli_is_named() {
        let dir = tree(&[
            ("lib.rs", "pub mod diagnose;\n"),
            (
                "diagnose.rs",
                "#[derive(clap::ValueEnum, Clone)]\npub enum Severity { A }\n",
            ),
        ]);
        let survey = survey(dir.path());
        assert_eq!(survey.clap.len(), 1);
    }

    #[test]
    fn a_long_function_is_named() {
        let body = "    let _ = 1;\n".repeat(MAX_FN_LINES);
        let dir = tree(&[
            ("lib.rs", "mod a;\n"),
            (
                "a.rs",
                &format!("fn short() {{}}\nfn long() {{\n{body}}}\n"),
            ),
        ]);
        let survey = survey(dir.path());
        assert_eq!(survey.long_fns.len(), 1);
        assert_eq!(survey.long_fns[0].1, "long");
        assert_eq!(survey.long_fns[0].3, MAX_FN_LINES + 2);
    }
}
