//! Secrets: values taken by name from a `NAME=value` file (mode 0600 only)
//! or the server's environment, handed to the child that needs them and
//! nowhere else, and replaced by `[REDACTED:NAME]` wherever text leaves us.

use std::collections::BTreeMap;
use std::ffi::OsString;
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The environment variable naming a secrets file when the registry does not.
pub(crate) const SECRETS_FILE_VAR: &str = "AGENT_REACH_SECRETS_FILE";

/// A secrets file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsError {
    #[error("cannot read secrets file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "secrets file {path} has mode {mode:04o}; it must be readable by its owner only (chmod 600 {path})"
    )]
    Permissions { path: PathBuf, mode: u32 },
    #[cfg(windows)]
    #[error(
        "secrets file {path}: Windows has no owner-only mode agent-reach can check, so a secrets file is not read there; pass the secrets in the server's environment instead"
    )]
    Unprotectable { path: PathBuf },
    #[error("secrets file {path}:{line}: expected NAME=value")]
    Syntax { path: PathBuf, line: usize },
}

/// The secret values known to this process.
#[derive(Clone, Default)]
pub(crate) struct SecretStore {
    from_file: BTreeMap<String, Vec<u8>>,
    from_env: BTreeMap<String, Vec<u8>>,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretStore")
            .field("file_names", &self.from_file.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl SecretStore {
    /// Reads the secrets file (if any) and keeps the environment's values of
    /// the `wanted` names. The file wins over the environment.
    pub(crate) fn load(
        file: Option<&Path>,
        env: &BTreeMap<OsString, OsString>,
        wanted: impl IntoIterator<Item = String>,
    ) -> Result<Self, SecretsError> {
        let from_file = match file {
            Some(path) => read_file(path)?,
            None => BTreeMap::new(),
        };
        let from_env = wanted
            .into_iter()
            .filter_map(|name| {
                let value = env.get(&OsString::from(&name))?;
                Some((name, value.as_encoded_bytes().to_vec()))
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        Ok(Self {
            from_file,
            from_env,
        })
    }

    /// The secrets `registry`'s tools name: from its `secrets_file` (else
    /// `$AGENT_REACH_SECRETS_FILE` in `env`) and from `env`. Also the file
    /// it read, if any (a sandboxed command must not read it).
    pub(crate) fn for_registry(
        registry: &super::Registry,
        env: &BTreeMap<OsString, OsString>,
    ) -> Result<(Self, Option<PathBuf>), SecretsError> {
        let file = registry.settings.secrets_file.clone().or_else(|| {
            env.get(&OsString::from(SECRETS_FILE_VAR))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let wanted: Vec<String> = registry
            .all_tools()
            .flat_map(|(tool, _)| tool.secrets.iter().cloned())
            .collect();
        let store = Self::load(file.as_deref(), env, wanted)?;
        Ok((store, file))
    }

    /// One secret's value.
    pub(crate) fn get(&self, name: &str) -> Option<&[u8]> {
        self.from_file
            .get(name)
            .or_else(|| self.from_env.get(name))
            .map(Vec::as_slice)
    }

    /// Every known secret (name, value), for redaction.
    pub(crate) fn all(&self) -> Vec<(String, Vec<u8>)> {
        let mut all: BTreeMap<&String, &Vec<u8>> = self.from_env.iter().collect();
        all.extend(self.from_file.iter());
        all.into_iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect()
    }
}

/// Refuses a file that others may read: mode 0600 only.
#[cfg(unix)]
fn owner_only(path: &Path) -> Result<(), SecretsError> {
    let meta = std::fs::metadata(path).map_err(|source| SecretsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(SecretsError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Windows: no mode bits to check, so no file is trusted with secrets.
#[cfg(windows)]
fn owner_only(path: &Path) -> Result<(), SecretsError> {
    Err(SecretsError::Unprotectable {
        path: path.to_path_buf(),
    })
}

fn read_file(path: &Path) -> Result<BTreeMap<String, Vec<u8>>, SecretsError> {
    let read_error = |source| SecretsError::Read {
        path: path.to_path_buf(),
        source,
    };
    owner_only(path)?;
    let text = std::fs::read_to_string(path).map_err(read_error)?;
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let line = line
            .trim_start()
            .strip_prefix("export ")
            .unwrap_or(line.trim_start());
        let Some((name, value)) = line.split_once('=') else {
            return Err(SecretsError::Syntax {
                path: path.to_path_buf(),
                line: i + 1,
            });
        };
        let name = name.trim();
        if !super::model::is_valid_env_name(name) {
            return Err(SecretsError::Syntax {
                path: path.to_path_buf(),
                line: i + 1,
            });
        }
        let value = unquote(value);
        if !value.is_empty() {
            out.insert(name.to_owned(), value.as_bytes().to_vec());
        }
    }
    Ok(out)
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// Replaces every occurrence of a secret's value in `text` with
/// `[REDACTED:NAME]`; longer values first, so a secret that contains another
/// is replaced whole. For logs and error messages (whole strings).
pub(crate) fn redact_text(secrets: &[(String, Vec<u8>)], text: &str) -> String {
    let mut ordered: Vec<&(String, Vec<u8>)> =
        secrets.iter().filter(|(_, v)| !v.is_empty()).collect();
    ordered.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    let mut out = text.to_owned();
    for (name, value) in ordered {
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        if out.contains(value) {
            out = out.replace(value, &format!("[REDACTED:{name}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn file_must_be_private_and_wins_over_env() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets");
        std::fs::write(
            &path,
            "# comment\nTOKEN=\"from-file\"\nexport OTHER=x=y\n\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let env: BTreeMap<OsString, OsString> = [
            ("TOKEN".into(), "from-env".into()),
            ("ENVONLY".into(), "e".into()),
        ]
        .into();
        let err = SecretStore::load(Some(&path), &env, vec![]).unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let store =
            SecretStore::load(Some(&path), &env, vec!["TOKEN".into(), "ENVONLY".into()]).unwrap();
        assert_eq!(store.get("TOKEN"), Some(&b"from-file"[..]));
        assert_eq!(store.get("OTHER"), Some(&b"x=y"[..]));
        assert_eq!(store.get("ENVONLY"), Some(&b"e"[..]));
        assert_eq!(store.get("NOPE"), None);
    }

    #[cfg(windows)]
    #[test]
    fn a_secrets_file_is_refused_on_windows_and_the_environment_serves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets");
        std::fs::write(&path, "TOKEN=from-file\n").unwrap();
        let env: BTreeMap<OsString, OsString> = [("TOKEN".into(), "from-env".into())].into();
        let err = SecretStore::load(Some(&path), &env, vec![]).unwrap_err();
        assert!(err.to_string().contains("server's environment"), "{err}");
        let store = SecretStore::load(None, &env, vec!["TOKEN".into()]).unwrap();
        assert_eq!(store.get("TOKEN"), Some(&b"from-env"[..]));
    }

    #[test]
    fn redaction_replaces_longest_first() {
        let secrets = vec![
            ("A".to_owned(), b"abc".to_vec()),
            ("B".to_owned(), b"abcdef".to_vec()),
        ];
        assert_eq!(
            redact_text(&secrets, "x abcdef abc"),
            "x [REDACTED:B] [REDACTED:A]"
        );
    }
}
