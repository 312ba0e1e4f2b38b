//! Which paths a confined command may write: a pure plan computed before any
//! Landlock call, from the policy, the writable roots and the compiled-in
//! rule file `sandbox/landlock.toml`.
//!
//! `.git` is protected by a read-only bind mount when the process can make a
//! mount namespace ([`super::read_only_mounts`]); this module's split is the
//! fallback, and needs nothing but Landlock.
//!
//! Landlock is allow-list only: a right granted on a directory holds for
//! everything beneath it, and nothing can be subtracted. So to keep a `.git`
//! inside a writable root read-only, the root itself gets no write right at
//! all; instead each entry beside the `.git` is granted on its own (and the
//! same one level further down wherever a protected path lies deeper, such as
//! a worktree's `gitdir:` target). Only directories on the way to a protected
//! path are listed, so the cost is one directory read per level, not a walk of
//! the tree.
//!
//! The trade-off of the fallback: in a directory that holds a protected path (typically the
//! repository root) entries cannot be created, removed or renamed; the files
//! already there can be rewritten in place, and every subdirectory is fully
//! writable. Tools that save by writing a temporary file beside the target
//! and renaming it (`sed -i`, some editors) fail at the repository root. New
//! `.git` directories created by the command (`git init`) are not protected.

use std::path::{Path, PathBuf};

use super::policy::Policy;
pub use super::rule_file::{MountMode, RULE_FILE, RuleFile};

impl RuleFile {
    /// The compiled-in rule file, as build.rs read it (see `rule_file`).
    pub fn builtin() -> RuleFile {
        include!(concat!(env!("OUT_DIR"), "/rule_file.rs"))
    }
}

/// What the command may write; everything else is read-only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsPlan {
    /// Granted every right, with everything beneath (files: the file rights).
    pub writable: Vec<PathBuf>,
    /// Devices and device directories: read, write, truncate, ioctl.
    pub devices: Vec<PathBuf>,
    /// Whether the process is in a private mount namespace where everything
    /// but the writable roots is mounted read-only.
    pub read_only_mounts: bool,
    /// The working directory as the plan named it: its rule (and the rules
    /// of paths beneath it) are opened from the process's working directory
    /// (`.`), the handle the command was started in, never by this path.
    pub working_dir: Option<PathBuf>,
}

/// The kind of a directory entry, as far as the plan cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryKind {
    Directory,
    /// Regular files, devices, sockets, fifos.
    Other,
    /// Never granted: a rule on a symlink would follow it out of the root.
    Symlink,
}

/// The writable roots a policy starts from, before canonicalization:
/// the working directory, the rule file's roots, `$TMPDIR`-like variables,
/// then the explicit roots. `read-only` and `danger-full-access` have none.
pub fn candidate_roots(
    policy: Policy,
    cwd: &Path,
    explicit: &[PathBuf],
    rules: &RuleFile,
    var: impl Fn(&str) -> Option<PathBuf>,
) -> Vec<PathBuf> {
    if policy != Policy::WorkspaceWrite {
        return Vec::new();
    }
    let mut roots = vec![cwd.to_path_buf()];
    roots.extend(rules.workspace_roots.iter().cloned());
    roots.extend(
        rules
            .workspace_root_vars
            .iter()
            .filter_map(|name| var(name))
            .filter(|dir| dir.is_absolute()),
    );
    roots.extend(explicit.iter().cloned());
    roots
}

/// Splits the writable roots around the protected paths: every root with no
/// protected path beneath it is granted whole; a root (or directory on the way)
/// holding one is replaced by its entries, recursively, the protected path and
/// symlinks left out. A protected path that is itself an explicit root stays
/// writable. `list` reads one directory; an unreadable one grants nothing.
pub fn split_writable<E>(
    roots: &[PathBuf],
    explicit: &[PathBuf],
    protected: &[PathBuf],
    mut list: impl FnMut(&Path) -> Result<Vec<(PathBuf, EntryKind)>, E>,
) -> Vec<PathBuf> {
    let protected: Vec<&PathBuf> = protected
        .iter()
        .filter(|path| !explicit.contains(path))
        .collect();
    let mut granted = Vec::new();
    for root in roots {
        grant(root, &protected, &mut list, &mut granted);
    }
    granted.sort();
    granted.dedup();
    granted
}

fn grant<E>(
    dir: &Path,
    protected: &[&PathBuf],
    list: &mut impl FnMut(&Path) -> Result<Vec<(PathBuf, EntryKind)>, E>,
    granted: &mut Vec<PathBuf>,
) {
    if protected.iter().any(|p| p.as_path() == dir) {
        return;
    }
    if !protected.iter().any(|p| p.starts_with(dir)) {
        granted.push(dir.to_path_buf());
        return;
    }
    let Ok(entries) = list(dir) else { return };
    for (entry, kind) in entries {
        match kind {
            EntryKind::Symlink => {}
            EntryKind::Directory => grant(&entry, protected, list, granted),
            EntryKind::Other => {
                if !protected.iter().any(|p| p.as_path() == entry) {
                    granted.push(entry);
                }
            }
        }
    }
}

/// The paths to keep read-only for one writable root: each protected name at
/// its top, and for a `.git` file (worktree, submodule) the `gitdir:` target
/// and that repository's `commondir`, where hooks and config live.
/// `read_text` reads a small file; `resolve` canonicalizes a path.
pub fn protected_paths_for_root(
    root: &Path,
    rules: &RuleFile,
    is_file: impl Fn(&Path) -> Option<bool>,
    read_text: impl Fn(&Path) -> Option<String>,
    resolve: impl Fn(&Path) -> Option<PathBuf>,
) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    for name in &rules.protected_names {
        let path = root.join(name);
        let Some(file) = is_file(&path) else { continue };
        protected.push(path.clone());
        if let Some(target) = resolve(&path).filter(|target| *target != path) {
            protected.push(target);
        }
        if !file {
            continue;
        }
        let Some(gitdir) = read_text(&path)
            .as_deref()
            .and_then(|text| text.lines().find_map(|l| l.strip_prefix("gitdir:")))
            .map(|dir| root.join(dir.trim()))
            .and_then(|dir| resolve(&dir))
        else {
            continue;
        };
        if let Some(common) =
            read_text(&gitdir.join("commondir")).and_then(|text| resolve(&gitdir.join(text.trim())))
        {
            protected.push(common);
        }
        protected.push(gitdir);
    }
    protected
}

/// The one list of what stays read-only inside the writable `roots`: each
/// root's protected names (and their `gitdir:` targets) and agent-reach's
/// own state directory `home`, keeping only what lies inside a root and is
/// not itself named an `explicit` writable root. The sandbox wrapper keeps
/// these read-only for a command; the broker keeps them from every file
/// operation (`workspace::Fence`). Read from the real filesystem.
pub fn read_only_within(
    roots: &[PathBuf],
    explicit: &[PathBuf],
    home: Option<&Path>,
    rules: &RuleFile,
) -> Vec<PathBuf> {
    let mut protected = Vec::new();
    for root in roots {
        protected.extend(protected_paths_for_root(
            root,
            rules,
            |path| {
                std::fs::symlink_metadata(path)
                    .ok()
                    .map(|meta| meta.file_type().is_file())
            },
            |path| std::fs::read_to_string(path).ok(),
            |path| path.canonicalize().ok(),
        ));
    }
    // agent-reach's own state (the session PATH links to apply_patch and
    // friends, which the agent runs unconfined) must not be replaceable
    // from inside, even when it lives under /tmp.
    if let Some(home) = home.and_then(|home| home.canonicalize().ok()) {
        protected.push(home);
    }
    // Only protected paths inside a writable root need protecting; the rest
    // is read-only anyway.
    protected
        .retain(|path| !explicit.contains(path) && roots.iter().any(|root| path.starts_with(root)));
    protected.sort();
    protected.dedup();
    protected
}

/// Reads one directory for [`split_writable`], from the real filesystem.
pub fn list_dir(dir: &Path) -> std::io::Result<Vec<(PathBuf, EntryKind)>> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = match entry.file_type()? {
            t if t.is_symlink() => EntryKind::Symlink,
            t if t.is_dir() => EntryKind::Directory,
            _ => EntryKind::Other,
        };
        entries.push((entry.path(), kind));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn rules() -> RuleFile {
        RuleFile::builtin()
    }

    #[test]
    fn the_built_rules_are_the_rule_file_parsed_now() {
        let parsed: RuleFile = toml::from_str(RULE_FILE).unwrap();
        assert_eq!(RuleFile::builtin(), parsed);
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    /// A made-up tree: directory -> entries.
    fn tree(dirs: &[(&str, &[(&str, EntryKind)])]) -> BTreeMap<PathBuf, Vec<(PathBuf, EntryKind)>> {
        dirs.iter()
            .map(|(dir, entries)| {
                (
                    PathBuf::from(dir),
                    entries
                        .iter()
                        .map(|(name, kind)| (Path::new(dir).join(name), *kind))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn builtin_rule_file_parses() {
        let rules = rules();
        assert!(rules.devices.contains(&PathBuf::from("/dev/null")));
        assert!(rules.device_dirs.contains(&PathBuf::from("/dev/pts")));
        assert_eq!(rules.protected_names, vec![".git".to_owned()]);
        assert_eq!(rules.read_only_mounts, MountMode::Always);
    }

    #[test]
    fn mount_modes_decide_by_protected_paths() {
        assert!(MountMode::Always.wanted(false));
        assert!(!MountMode::Repositories.wanted(false));
        assert!(MountMode::Repositories.wanted(true));
        assert!(!MountMode::Never.wanted(true));
    }

    #[test]
    fn only_workspace_write_has_roots() {
        let var = |name: &str| (name == "TMPDIR").then(|| PathBuf::from("/var/tmp/x"));
        let explicit = paths(&["/data"]);
        let roots = candidate_roots(
            Policy::WorkspaceWrite,
            Path::new("/w"),
            &explicit,
            &rules(),
            var,
        );
        assert_eq!(
            roots,
            paths(&["/w", "/tmp", "/dev/shm", "/var/tmp/x", "/data"])
        );
        for policy in [Policy::ReadOnly, Policy::DangerFullAccess] {
            assert!(candidate_roots(policy, Path::new("/w"), &explicit, &rules(), var).is_empty());
        }
    }

    #[test]
    fn relative_tmpdir_is_ignored() {
        let var = |_: &str| Some(PathBuf::from("relative"));
        let roots = candidate_roots(Policy::WorkspaceWrite, Path::new("/w"), &[], &rules(), var);
        assert_eq!(roots, paths(&["/w", "/tmp", "/dev/shm"]));
    }

    #[test]
    fn roots_without_protected_paths_are_granted_whole_without_listing() {
        let granted = split_writable(
            &paths(&["/w", "/tmp"]),
            &[],
            &paths(&["/repo/.git"]),
            |dir| Err(format!("listed {}", dir.display())),
        );
        assert_eq!(granted, paths(&["/tmp", "/w"]));
    }

    #[test]
    fn top_level_git_is_left_out_and_siblings_granted() {
        let fs = tree(&[(
            "/w",
            &[
                (".git", EntryKind::Directory),
                ("src", EntryKind::Directory),
                ("README", EntryKind::Other),
                ("out", EntryKind::Symlink),
            ],
        )]);
        let granted = split_writable(&paths(&["/w"]), &[], &paths(&["/w/.git"]), |dir| {
            fs.get(dir).cloned().ok_or(())
        });
        assert_eq!(granted, paths(&["/w/README", "/w/src"]));
    }

    #[test]
    fn deep_protected_path_splits_each_level_on_the_way() {
        let fs = tree(&[
            (
                "/w",
                &[("a", EntryKind::Directory), ("b", EntryKind::Directory)],
            ),
            (
                "/w/a",
                &[("wt", EntryKind::Directory), ("c", EntryKind::Other)],
            ),
        ]);
        let granted = split_writable(&paths(&["/w"]), &[], &paths(&["/w/a/wt"]), |dir| {
            fs.get(dir).cloned().ok_or(())
        });
        assert_eq!(granted, paths(&["/w/a/c", "/w/b"]));
    }

    #[test]
    fn explicitly_named_git_stays_writable() {
        let fs = tree(&[(
            "/w",
            &[(".git", EntryKind::Directory), ("x", EntryKind::Other)],
        )]);
        let explicit = paths(&["/w/.git"]);
        let roots = paths(&["/w", "/w/.git"]);
        let granted = split_writable(&roots, &explicit, &paths(&["/w/.git"]), |dir| {
            fs.get(dir).cloned().ok_or(())
        });
        assert_eq!(granted, paths(&["/w", "/w/.git"]));
    }

    #[test]
    fn root_that_is_protected_grants_nothing() {
        let granted = split_writable(&paths(&["/w/.git"]), &[], &paths(&["/w/.git"]), |_| {
            Err::<Vec<_>, ()>(())
        });
        assert!(granted.is_empty());
    }

    #[test]
    fn unreadable_directory_grants_nothing() {
        let granted = split_writable(&paths(&["/w"]), &[], &paths(&["/w/.git"]), |_| {
            Err::<Vec<_>, ()>(())
        });
        assert!(granted.is_empty());
    }

    #[test]
    fn git_file_protects_gitdir_and_commondir() {
        let files: BTreeMap<PathBuf, String> = [
            ("/wt/.git", "gitdir: ../main/.git/worktrees/wt\n"),
            ("/main/.git/worktrees/wt/commondir", "../..\n"),
        ]
        .into_iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_owned()))
        .collect();
        let resolve = |p: &Path| {
            // A tiny lexical canonicalizer for the test: fold `..`.
            let mut out = PathBuf::new();
            for part in p.components() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    other => out.push(other),
                }
            }
            Some(out)
        };
        let protected = protected_paths_for_root(
            Path::new("/wt"),
            &rules(),
            |p| (p == Path::new("/wt/.git")).then_some(true),
            |p| files.get(p).cloned(),
            resolve,
        );
        assert_eq!(
            protected,
            paths(&["/wt/.git", "/main/.git", "/main/.git/worktrees/wt"])
        );
    }

    #[test]
    fn git_directory_is_protected_and_absent_git_is_nothing() {
        let with_git = protected_paths_for_root(
            Path::new("/w"),
            &rules(),
            |p| (p == Path::new("/w/.git")).then_some(false),
            |_| None,
            |p| Some(p.to_path_buf()),
        );
        assert_eq!(with_git, paths(&["/w/.git"]));
        let without = protected_paths_for_root(
            Path::new("/w"),
            &rules(),
            |_| None,
            |_| None,
            |p| Some(p.to_path_buf()),
        );
        assert!(without.is_empty());
    }

    #[test]
    fn real_directory_listing_marks_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("l")).unwrap();
        let mut entries = list_dir(dir.path()).unwrap();
        entries.sort();
        let kinds: Vec<EntryKind> = entries.iter().map(|(_, k)| *k).collect();
        assert_eq!(
            kinds,
            vec![EntryKind::Directory, EntryKind::Other, EntryKind::Symlink]
        );
    }
}
